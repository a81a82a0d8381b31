package clustertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sequence forces an order on the calls of several hooked clusters
// (Wrap with its Hook) about one session. Each step names a call —
// "LABEL OP", "LABEL OP KIND" for a message, "LABEL Attach0" for an attach
// that holds no rotation, with " returned" and " done" for the hooks after
// it returned (Name) — or an event the test itself sees (Mark). A
// returned step never waits: it only marks the call over, so that a
// later step may wait for it while the server is still held at its done
// step. A call whose step is
// listed waits until every step before it has been taken; a call whose
// step is not listed, or was taken already, goes straight through.
//
// A server whose path ends early (a resume that lost does not attach)
// never makes its later steps: Skip takes them for it. No wait is
// unbounded: a step that waited Timeout for the ones before it is taken
// anyway, and Err says the order did not hold.
type Sequence struct {
	session string
	// Timeout bounds a step's wait for those before it. Defaults to 10 s.
	Timeout time.Duration

	mu      sync.Mutex // guards the fields below
	steps   []string
	taken   []bool
	changed chan struct{} // closed and replaced whenever a step is taken
	errs    []string
}

// NewSequence returns the order steps for the calls about session.
func NewSequence(session string, steps ...string) *Sequence {
	return &Sequence{session: session, steps: steps, taken: make([]bool, len(steps)), changed: make(chan struct{})}
}

// Session is the session whose calls s orders.
func (s *Sequence) Session() string { return s.session }

// Name is the step a call is.
func Name(c Call) string {
	name := c.Label + " " + c.Op
	if c.Kind != "" {
		name += " " + c.Kind
	}
	if c.Op == "Attach" && c.Rot == 0 {
		name += "0"
	}
	switch {
	case c.Returned:
		name += " returned"
	case c.Done:
		name += " done"
	}
	return name
}

// Hook is a hook for Wrap: it holds a call until its turn.
func (s *Sequence) Hook(c Call) {
	if c.Session != s.session {
		return
	}
	s.take(Name(c), !c.Returned)
}

// Mark takes step, an event the test saw; it does not wait, and Err
// reports it if steps before it had not been taken.
func (s *Sequence) Mark(step string) { s.take(step, false) }

// Skip takes every step of label's not taken yet: its server will not make
// them.
func (s *Sequence) Skip(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range s.steps {
		if !s.taken[i] && strings.HasPrefix(st, label+" ") {
			s.taken[i] = true
		}
	}
	s.broadcastLocked()
}

// Wait waits until every step has been taken, or ctx is done.
func (s *Sequence) Wait(ctx context.Context) error {
	for {
		s.mu.Lock()
		ch, left := s.changed, s.firstLeftLocked(len(s.steps))
		s.mu.Unlock()
		if left < 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sequence: step %q not taken: %w", s.steps[left], ctx.Err())
		}
	}
}

// Err reports the steps that were not taken in order.
func (s *Sequence) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) == 0 {
		return nil
	}
	return fmt.Errorf("sequence: %s", strings.Join(s.errs, "; "))
}

func (s *Sequence) take(step string, wait bool) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	i := -1
	for j, st := range s.steps {
		if st == step && !s.taken[j] {
			i = j
			break
		}
	}
	if i < 0 {
		return // not listed, or taken already
	}
	for {
		left := s.firstLeftLocked(i)
		if left < 0 {
			break
		}
		if !wait {
			s.errs = append(s.errs, fmt.Sprintf("%q came before %q", step, s.steps[left]))
			break
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
			continue
		case <-deadline.C:
		}
		s.mu.Lock()
		if left := s.firstLeftLocked(i); left >= 0 {
			s.errs = append(s.errs, fmt.Sprintf("%q waited %v for %q", step, timeout, s.steps[left]))
		}
		break
	}
	s.taken[i] = true
	s.broadcastLocked()
}

// firstLeftLocked is the first step before n not taken, -1 if none.
func (s *Sequence) firstLeftLocked(n int) int {
	for j := range n {
		if !s.taken[j] {
			return j
		}
	}
	return -1
}

func (s *Sequence) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}
