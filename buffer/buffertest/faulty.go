package buffertest

import (
	"bytes"
	"context"
	"slices"
	"sync"
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
	// Foreign replays the first event after the client's last seq as
	// another session's: its session_id is the latest other session's
	// that appended to a Faulty ring of the same Faults. Seq and event id
	// stay right, so only a check of the session id sees it: the leak
	// between sessions a checker must catch.
	Foreign
)

func (f Fault) String() string {
	switch f {
	case Duplicate:
		return "duplicate"
	case Drop:
		return "drop"
	case Reorder:
		return "reorder"
	case Foreign:
		return "foreign"
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

	mu       sync.Mutex // guards sessions
	sessions [2]string  // the two sessions that appended last, for Foreign
}

// saw notes that session appended to a ring.
func (f *Faults) saw(session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sessions[0] != session {
		f.sessions[1], f.sessions[0] = f.sessions[0], session
	}
}

// other returns a session seen other than mine, or "".
func (f *Faults) other(mine string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sessions {
		if s != "" && s != mine {
			return s
		}
	}
	return ""
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
// says, when the replay is long enough for the fault (one event to drop or
// relabel, two to reorder, a last seq still held to duplicate) and, for
// Foreign, another session has appended to a ring of f. Every other method
// is inner's. It is the test double of a broken server: give it to
// orchestrator.Options.NewRing and a checker must report a violation.
func Faulty(inner buffer.Ring, f *Faults) buffer.Ring { return &faulty{Ring: inner, f: f} }

type faulty struct {
	buffer.Ring
	f       *Faults
	session string // the session whose events the ring holds, for Foreign
}

var sessionField = []byte(`"session_id":"`)

// sessionOf is the session_id of an encoded frame.
func sessionOf(frame []byte) string {
	_, rest, ok := bytes.Cut(frame, sessionField)
	id, _, ok2 := bytes.Cut(rest, []byte(`"`))
	if !ok || !ok2 {
		return ""
	}
	return string(id)
}

func (r *faulty) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	e, err := r.Ring.Append(ctx, id, encode)
	if err == nil && r.f.Fault == Foreign {
		r.session = sessionOf(e.Data)
		r.f.saw(r.session)
	}
	return e, err
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
	case r.f.Fault == Foreign && len(e) >= 1:
		other := r.f.other(r.session)
		if other == "" || !r.f.take() {
			break
		}
		e = slices.Clone(e)
		e[0].Data = bytes.Replace(e[0].Data, slices.Concat(sessionField, []byte(r.session)), slices.Concat(sessionField, []byte(other)), 1)
	case r.f.Fault == Reorder && len(e) >= 2 && r.f.take():
		e = slices.Clone(e)
		e[0], e[1] = e[1], e[0]
	}
	return e, nil
}
