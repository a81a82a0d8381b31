package orchestrator

import (
	"context"
	"errors"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

// Drain begins a graceful stop; Close ends it. From Drain on the server
// accepts no new WebSocket connection (503) and Draining reports true.
//
// Without a Cluster, sessions end with the process, so there is nowhere
// for a client to resume: a client whose session has no run in flight is
// closed with 1012 at once (after what it was sent), and a client whose
// run is in flight stays attached until the run ends — its last events and
// final answer are written, then 1012 — or until Close. Runs without a
// client go on too, for their side effects and logs, except a run that
// waits on its user while no connection is attached: no one can answer
// it here now, so it is cancelled at once (errUserAbsent), at the drain's
// start or whenever it comes to that during the drain — unless its
// confirmation expires before ctx's deadline, after what it goes on.
// Nothing new starts: a user.message or user.solve_tasks is refused. Drain
// returns when no run is left, or with ctx's error when ctx ends first
// (Close then cancels what is left).
//
// With a Cluster every connection is closed with 1012 at once and Drain
// returns: the clients resume on other servers, and Close seals the
// sessions and leaves the cluster, so that another server continues the
// runs from their last checkpoint at once.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if s.closed || s.draining.Load() {
		s.mu.Unlock()
		return nil
	}
	if d, ok := ctx.Deadline(); ok {
		s.drainDeadline.Store(d.UnixNano())
	}
	s.draining.Store(true)
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	sessions := s.sessionList()
	s.mu.Unlock()

	if s.opts.Cluster != nil {
		for _, c := range conns {
			c.closeWith(websocket.StatusServiceRestart, "server restarting")
		}
		s.log.Info("draining: clients closed to resume elsewhere; the cluster continues the runs", "connections", len(conns))
		return nil
	}
	for _, sess := range sessions {
		sess.mu.Lock()
		sess.drainIdleLocked()
		sess.cancelAbsentLocked()
		sess.mu.Unlock()
	}
	left := s.runsInFlight()
	s.log.Info("draining: waiting for the runs in flight", "runs", left, "connections", len(conns))
	for left > 0 {
		select {
		case <-ctx.Done():
			s.log.Warn("drain timed out; the runs left are cancelled", "runs_left", left)
			return ctx.Err()
		case <-s.runEnded:
		}
		if n := s.runsInFlight(); n != left {
			left = n
			s.log.Info("draining", "runs_left", left)
		}
	}
	s.log.Info("drained: every run has ended")
	return nil
}

// Draining reports whether the server is draining or closed: it should
// get no new clients.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.draining.Load()
}

// sessionList returns the sessions. Called with s.mu held.
func (s *Server) sessionList() []*session {
	out := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		out = append(out, sess)
	}
	return out
}

// runsInFlight counts the sessions with a run.
func (s *Server) runsInFlight() int {
	s.mu.Lock()
	sessions := s.sessionList()
	s.mu.Unlock()
	n := 0
	for _, sess := range sessions {
		sess.mu.Lock()
		if sess.run != nil {
			n++
		}
		sess.mu.Unlock()
	}
	return n
}

// drainIdleLocked closes the session's connection with 1012, after what
// it was sent, when the server is draining and the session has no run in
// flight: nothing more is coming to it here.
func (sess *session) drainIdleLocked() {
	if !sess.srv.draining.Load() {
		return
	}
	if sess.run != nil {
		return
	}
	for _, m := range sess.members {
		if m.c != nil {
			m.c.closeFlushed(websocket.StatusServiceRestart, "server restarting")
		}
	}
}

// runEndedLocked is called when the session's run has ended (under its
// lock): while draining, its client is let go and Drain is woken.
func (sess *session) runEndedLocked() {
	if !sess.srv.draining.Load() {
		return
	}
	sess.drainIdleLocked()
	select {
	case sess.srv.runEnded <- struct{}{}:
	default:
	}
}

// errUserAbsent cancels a run that waits on its user, while no connection
// is attached to its session, when the server drains without a Cluster:
// new connections are refused, so no answer can come.
var errUserAbsent = errors.New("the run waits on a user who is not connected, and the server is stopping")

// cancelAbsentLocked cancels the session's run with errUserAbsent when the
// server drains without a Cluster, no connection is attached, and the run
// has a confirmation open that does not expire before the drain's
// deadline. Called with the session locked wherever that can come true:
// at the drain's start (Drain), when the connection leaves (detach), when
// a confirmation opens (openConfirm).
func (sess *session) cancelAbsentLocked() {
	s := sess.srv
	r := sess.run
	if !s.draining.Load() || s.opts.Cluster != nil || len(sess.members) > 0 || r == nil {
		return
	}
	deadline := s.drainDeadline.Load()
	for _, c := range sess.confirms {
		if c.run != r || (deadline != 0 && c.expires.UnixNano() <= deadline) {
			continue
		}
		s.log.Info("draining: cancelling a run that waits on a user who is not connected",
			"session", sess.id, "run", r.id, "confirm", c.kind)
		r.cancel(errUserAbsent) // the run's goroutine ends it (stopped), which wakes Drain
		return
	}
}

// errDraining answers a new run asked for while the server drains (a new
// error each time: the reader names the frame it answers in it).
func errDraining() *wsproto.Error {
	return &wsproto.Error{Code: wsproto.CodeInternal, Message: "the server is restarting: reconnect, then send it again"}
}
