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
	sess, err := s.takeOver(ctx, id, from)
	if err == nil {
		s.noteTakeover()
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

// noteTakeover notes a takeover that ended now: the moving average of
// the gaps between takeovers ending (an eighth of the new one) is the
// pace the node takes sessions over, which the retry hints are made of.
// Gaps of a second or more (the node idle between takeovers) are not
// counted.
func (s *Server) noteTakeover() {
	now := time.Now().UnixNano()
	last := s.adoptLast.Swap(now)
	gap := now - last
	if last == 0 || gap >= int64(time.Second) {
		return
	}
	for {
		old := s.adoptGap.Load()
		next := gap
		if old > 0 {
			next = old + (gap-old)/8
		}
		if s.adoptGap.CompareAndSwap(old, next) {
			return
		}
	}
}

// adoptBusy answers a resume whose takeover found no slot: busy, with a
// hint of when to resume again: about the time the takeovers waiting now
// take to end at the pace the node takes sessions over (noteTakeover's
// average gap; 1 ms before any), between 100 ms and 5 s, spread ±50 % so
// that the clients refused together do not come back together. It does
// not book further ahead for the clients refused before: many of them
// find their session taken over meanwhile (by the node's hunt for
// orphaned runs, or by another client's resume) and need no slot then.
func (s *Server) adoptBusy() *wsproto.Error {
	gap := time.Duration(s.adoptGap.Load())
	if gap <= 0 {
		gap = time.Millisecond
	}
	d := time.Duration(s.adoptWaiting.Load()+1) * gap
	d = min(max(d, 100*time.Millisecond), 5*time.Second)
	d = time.Duration(float64(d) * (0.5 + rand.Float64()))
	return &wsproto.Error{Code: wsproto.CodeBusy, RefType: wsproto.EventUserReconnect, RetryAfterMS: d.Milliseconds(),
		Message: "this server is taking over many sessions at once: resume again after retry_after_ms"}
}
