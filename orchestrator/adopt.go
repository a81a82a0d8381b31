package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// adoption is a session this server is taking from the store, once: the
// callers that find it under way wait for its outcome instead of starting
// another (or, seeing the store name this server as the owner of a
// session it does not hold yet, rejecting the resume).
type adoption struct {
	done chan struct{} // closed when sess and err are set
	sess *session
	err  error
}

// adoptShared continues here, from the store, a session whose owner there
// is from: a server that died, or this one when it holds the session no
// more — its ring gave the session up while the store stalled (lost), or
// another caller of adoptShared is adopting it right now. One adoption of
// a session runs at a time; the others wait for it (bounded by ctx) and
// share its outcome. A session this server holds already is returned as
// it is. At most MaxTakeovers run at once; one that found no slot within
// TakeoverWait fails with errAdoptBusy, having changed nothing.
func (s *Server) adoptShared(ctx context.Context, id, from string) (*session, error) {
	s.mu.Lock()
	if sess := s.sessions[id]; sess != nil {
		s.mu.Unlock()
		return sess, nil
	}
	if a := s.adoptions[id]; a != nil {
		s.mu.Unlock()
		s.log.Debug("waiting for the session's adoption under way", "session", id)
		select {
		case <-a.done:
			return a.sess, a.err
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the adoption of %s: %w", id, context.Cause(ctx))
		}
	}
	a := &adoption{done: make(chan struct{})}
	s.adoptions[id] = a
	s.mu.Unlock()

	a.sess, a.err = s.takeOverInSlot(ctx, id, from)
	s.mu.Lock()
	delete(s.adoptions, id) // after restore registered the session: no gap between the two
	s.mu.Unlock()
	close(a.done)
	return a.sess, a.err
}

// errAdoptBusy is a takeover that found no slot (MaxTakeovers) within
// TakeoverWait: nothing was claimed.
var errAdoptBusy = errors.New("every takeover slot is taken")

// takeOverInSlot runs takeOver in one of the MaxTakeovers slots, waiting
// up to TakeoverWait for one.
func (s *Server) takeOverInSlot(ctx context.Context, id, from string) (*session, error) {
	if !s.adoptSlotWait(ctx) {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("wait for a takeover slot: %w", context.Cause(ctx))
		}
		return nil, errAdoptBusy
	}
	defer func() { <-s.adoptSlot }()
	began := time.Now()
	sess, err := s.takeOver(ctx, id, from)
	if err == nil {
		s.noteTakeover(time.Since(began))
	}
	return sess, err
}

// adoptSlotWait takes a takeover slot, waiting up to TakeoverWait (bounded by
// ctx); it reports whether it took one.
func (s *Server) adoptSlotWait(ctx context.Context) bool {
	select {
	case s.adoptSlot <- struct{}{}:
		return true
	default:
	}
	s.adoptWaiting.Add(1)
	defer s.adoptWaiting.Add(-1)
	wait := time.NewTimer(s.opts.TakeoverWait)
	defer wait.Stop()
	select {
	case s.adoptSlot <- struct{}{}:
		return true
	case <-wait.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// noteTakeover folds a takeover's duration into the moving average the
// retry hint is made of (an eighth of the new one).
func (s *Server) noteTakeover(d time.Duration) {
	for {
		old := s.adoptTook.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if s.adoptTook.CompareAndSwap(old, next) {
			return
		}
	}
}

// adoptBusy answers a resume whose takeover found no slot: busy, with a
// hint of when to resume again. The hints book the node's takeover
// capacity ahead, so that the clients refused come back spread at the
// pace the node takes sessions over rather than together: one takeover
// slot frees about every interval (a takeover's moving-average duration
// over the slots); the takeovers waiting now go first, then each refused
// client is given the next free interval after the last one booked. A
// hint is at least 50 ms and at most 30 s, spread ±10 %.
func (s *Server) adoptBusy() *wsproto.Error {
	per := time.Duration(s.adoptTook.Load())
	if per <= 0 {
		per = 10 * time.Millisecond
	}
	interval := per / time.Duration(cap(s.adoptSlot))
	now := time.Now()
	s.adoptMu.Lock()
	if first := now.Add(time.Duration(s.adoptWaiting.Load()) * interval); s.adoptBooked.Before(first) {
		s.adoptBooked = first
	}
	s.adoptBooked = s.adoptBooked.Add(interval)
	d := s.adoptBooked.Sub(now)
	s.adoptMu.Unlock()
	d = min(max(d, 50*time.Millisecond), 30*time.Second)
	d = time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
	return &wsproto.Error{Code: wsproto.CodeBusy, RefType: wsproto.EventUserReconnect, RetryAfterMS: d.Milliseconds(),
		Message: "this server is taking over many sessions at once: resume again after retry_after_ms"}
}
