package orchestrator

import (
	"errors"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/buffer"
)

// errSessionLost cancels the run of a session this server can no longer
// write: another server owns it now, or the store lost it.
var errSessionLost = errors.New("session lost to another server or to the store")

// hooks are how a session's durable ring reports to it.
func (sess *session) hooks() RingHooks {
	return RingHooks{OnDurable: sess.deliver, OnLost: sess.lost}
}

// deliver sends each connection attached the events the store now holds
// that it was not sent yet. Called by
// the ring's writer, in seq order, never under the session lock. After a
// stall of the store they may be many: sendDurable takes them, within the
// ring's bound on what may wait for the store.
func (sess *session) deliver(entries []buffer.Entry) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if n := len(entries); n > 0 && sess.dur != nil {
		sess.dur.settled(entries[n-1].Seq)
	}
	if sess.closed || len(entries) == 0 {
		return
	}
	backlog := backlogOf(sess.ring)
	for _, m := range sess.members {
		if m.c == nil {
			continue // on another server, which tails the store
		}
		// A resync's answer waiting for these first (held.go); the
		// entries it covers are not sent (sent is its seq).
		sess.releaseHeldLocked(m, entries[len(entries)-1].Seq)
		var frames [][]byte
		for _, e := range entries {
			if e.Seq > m.sent {
				frames = append(frames, e.Data)
				m.sent = e.Seq
			}
		}
		if len(frames) > 0 {
			m.c.sendDurable(backlog, frames...)
		}
	}
}

// backlogOf is how many entries ring lets wait for its store before it
// gives up (a redisstore.Ring's MaxPending), 0 for a ring that does not
// say.
func backlogOf(ring buffer.Ring) int {
	if b, ok := ring.(interface{ MaxPending() int }); ok {
		return b.MaxPending()
	}
	return 0
}

// lost gives up a session whose ring can no longer write: its run stops
// without a word (its events could not be stored), and its connections are
// closed with 1012 so that the client resumes where the session lives now,
// or learns that it is gone (resume_rejected). When the store still names
// this server as the owner (it stalled past the ring's patience), the
// resume adopts the session from the store here, its run going on from
// its checkpoint (adopt.go).
func (sess *session) lost(err error) {
	s := sess.srv
	s.runWG.Add(1) // not on the ring's writer, whose Close the release waits for
	go func() {
		defer s.runWG.Done()
		// Forgotten before it is marked given, and the client hears of
		// it: a resume then finds the session in the store only, and
		// adopts it. (Forgetting a session closed otherwise is a no-op:
		// whoever closed it forgets it too.)
		s.forget(sess)
		sess.mu.Lock()
		if sess.closed {
			sess.mu.Unlock()
			return
		}
		sess.closed, sess.given = true, true
		r, members := sess.run, sess.members
		sess.members = nil
		for _, m := range members {
			sess.dropHeldLocked(m)
		}
		sess.mu.Unlock()
		s.log.Warn("session lost", "session", sess.id, "err", err)
		if r != nil {
			r.cancel(errSessionLost)
		}
		for _, m := range members {
			if m.c != nil {
				m.c.closeWith(websocket.StatusServiceRestart, "session moved")
			}
		}
		sess.release()
	}()
}
