package orchestrator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/baton-run/baton/buffer"
)

// leaseOnly is a Cluster that only tells of its lease (the tests here
// call nothing else of it).
type leaseOnly struct {
	Cluster
	held   atomic.Bool
	lapses chan struct{}
}

func (l *leaseOnly) Lapses() <-chan struct{} { return l.lapses }
func (l *leaseOnly) LeaseHeld() bool         { return l.held.Load() }

// fenceServer is the part of a Server the lease fence needs. lapse (nil
// for a Cluster that is not a leaseOnly) has fenceOnLapse handle one of
// cl's lapses, and returns once it has.
func fenceServer(cl Cluster) (s *Server, lapse func()) {
	s = &Server{opts: Options{Cluster: cl}, log: quiet(), sessions: map[string]*session{}}
	lw, ok := cl.(*leaseOnly)
	if !ok {
		return s, nil
	}
	return s, func() {
		s.janitors, s.endJanitors = context.WithCancel(context.Background())
		s.janitorWG.Add(1)
		go s.fenceOnLapse(lw.lapses)
		lw.lapses <- struct{}{} // unbuffered: taken, then handled before fenceOnLapse sees the stop
		s.endJanitors()
		s.janitorWG.Wait()
	}
}

// TestLeaseFence: an adoption claims only while the lease is held, and
// starts its run only if the lease has not lapsed since — also when the
// lapse healed meanwhile, for another server may have claimed the
// session while it lasted.
func TestLeaseFence(t *testing.T) {
	tests := []struct {
		name string
		// heldBefore is the lease before the claim; lapsesBefore the
		// lapses handled before it, lapsesDuring those handled between
		// the claim and the registration; heldAtAdmit the lease then.
		heldBefore                 bool
		lapsesBefore, lapsesDuring int
		heldAtAdmit                bool
		claims, starts             bool
	}{
		{name: "held throughout", heldBefore: true, heldAtAdmit: true, claims: true, starts: true},
		{name: "lapsed and healed before the claim", heldBefore: true, lapsesBefore: 1, heldAtAdmit: true, claims: true, starts: true},
		{name: "not held at the claim", heldBefore: false, lapsesBefore: 1},
		{name: "lapsed during, not healed", heldBefore: true, lapsesDuring: 1, heldAtAdmit: false, claims: true},
		{name: "lapsed and healed during", heldBefore: true, lapsesDuring: 1, heldAtAdmit: true, claims: true},
		{name: "a lapse due, not told yet", heldBefore: true, heldAtAdmit: false, claims: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := &leaseOnly{lapses: make(chan struct{})}
			s, lapse := fenceServer(cl)
			for range tt.lapsesBefore {
				lapse()
			}
			cl.held.Store(tt.heldBefore)
			term, err := s.currentTerm()
			if claims := err == nil; claims != tt.claims {
				t.Fatalf("claims: %v (%v), want %v", claims, err, tt.claims)
			}
			if err != nil {
				if !errors.Is(err, errLeaseLapsed) {
					t.Errorf("refused with %v, want errLeaseLapsed", err)
				}
				return
			}
			for range tt.lapsesDuring {
				lapse()
			}
			cl.held.Store(tt.heldAtAdmit)
			s.mu.Lock()
			err = s.termHoldsLocked(term)
			s.mu.Unlock()
			if starts := err == nil; starts != tt.starts {
				t.Fatalf("starts: %v (%v), want %v", starts, err, tt.starts)
			}
			if err != nil && !errors.Is(err, errLeaseLapsed) {
				t.Errorf("refused with %v, want errLeaseLapsed", err)
			}
		})
	}
}

// TestLeaseFenceNoWatcher: a Cluster that tells no lapses fences nothing.
func TestLeaseFenceNoWatcher(t *testing.T) {
	s, _ := fenceServer(struct{ Cluster }{})
	term, err := s.currentTerm()
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.termHoldsLocked(term); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreNotAdmitted: a restore whose admission fails registers
// nothing, and fails with its error.
func TestRestoreNotAdmitted(t *testing.T) {
	srv, err := New(newNode(false).models(), &Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	_, err = srv.restore(t.Context(), "sess_fenced", Record{}, buffer.NewMemory(8), nil, nil, nil,
		func() error { return errLeaseLapsed })
	if !errors.Is(err, errLeaseLapsed) {
		t.Errorf("restore: %v, want errLeaseLapsed", err)
	}
	if n := srv.Sessions(); n != 0 {
		t.Errorf("%d sessions registered, want none", n)
	}
}
