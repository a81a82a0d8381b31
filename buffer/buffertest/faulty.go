package buffertest

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/baton-run/baton/buffer"
)

// Fault is what a Faulty ring does wrong when a resume reads it.
type Fault int

const (
	// Duplicate replays the client's last event again, before the ones
	// that follow it: the server bug a review found the checkers blind to.
	Duplicate Fault = iota + 1
	// Drop leaves the first event after the client's last seq out of the
	// replay.
	Drop
	// Reorder swaps the first two events of the replay.
	Reorder
)

func (f Fault) String() string {
	switch f {
	case Duplicate:
		return "duplicate"
	case Drop:
		return "drop"
	case Reorder:
		return "reorder"
	}
	return "none"
}

// Faults is shared by the Faulty rings of one server: which fault, how many
// replays to break across all of them, and how many were. Safe for
// concurrent use.
type Faults struct {
	Fault Fault
	// Limit is how many replays to break in all; 0 means every one that
	// can be.
	Limit  int
	broken atomic.Int64
}

// Broken returns how many replays were broken so far.
func (f *Faults) Broken() int { return int(f.broken.Load()) }

// take reports whether one more replay may be broken, and counts it.
func (f *Faults) take() bool {
	for {
		n := f.broken.Load()
		if f.Limit > 0 && n >= int64(f.Limit) {
			return false
		}
		if f.broken.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Faulty wraps a ring so that Since — what a resume replays — is wrong as f
// says, when the replay is long enough for the fault (one event to drop,
// two to reorder, a last seq still held to duplicate). Every other method
// is inner's. It is the test double of a broken server: give it to
// orchestrator.Options.NewRing and a checker must report a violation.
func Faulty(inner buffer.Ring, f *Faults) buffer.Ring { return &faulty{Ring: inner, f: f} }

type faulty struct {
	buffer.Ring
	f *Faults
}

func (r *faulty) Since(ctx context.Context, lastSeq uint64) ([]buffer.Entry, error) {
	if r.f.Fault == Duplicate && lastSeq > 0 {
		// From one seq earlier: the client's last event comes again.
		if e, err := r.Ring.Since(ctx, lastSeq-1); err == nil && r.f.take() {
			return e, nil
		}
	}
	e, err := r.Ring.Since(ctx, lastSeq)
	if err != nil {
		return e, err
	}
	switch {
	case r.f.Fault == Drop && len(e) >= 1 && r.f.take():
		return e[1:], nil
	case r.f.Fault == Reorder && len(e) >= 2 && r.f.take():
		e = slices.Clone(e)
		e[0], e[1] = e[1], e[0]
	}
	return e, nil
}
