package orchestrator

import (
	"context"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

// The session caps: sessions per server (MaxSessions), per authenticated
// subject (MaxSessionsPerSubject) and per anonymous client address
// (MaxSessionsPerIP), and the short life of a session never used
// (IdleSessionTTL).
//
// A cap cannot be checked at the upgrade the way the connection limits
// are: whether a connection resumes a session is known only from its
// first frame, after system.connected (§3.5), and a resume must never be
// refused for a cap — the session exists already, and refusing it would
// let whoever fills the caps lock its owner out. So a connection beyond a
// cap is upgraded, with a provisional session: system.connected as ever,
// but the session is not counted, not in the store, not resumable, and
// good only for the resume the connection may send first. Its first frame
// anything else, or a resume that fails, closes it with 4029. Holding
// provisional connections gains an attacker nothing it could not get from
// connections: each is one of MaxConnsPerIP, and holds no session.
//
// A session counts from the moment newSession reserves it to the moment it
// leaves s.sessions; a session taken over from another server is counted
// but never refused.

// ownerKey is what a session is counted under for the per-client caps:
// "sub:" and the subject of an authenticated client, "ip:" and the address
// (addrKey) of an anonymous one, "" for neither (an anonymous session
// taken over from another server, whose address is not known).
func ownerKey(subject, addr string) string {
	switch {
	case subject != "":
		return "sub:" + subject
	case addr != "":
		return "ip:" + addr
	}
	return ""
}

// reserve counts sess, made from now on, and reports true, unless a cap
// is reached: then it reports false and counts nothing.
func (s *Server) reserve(sess *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if over, limit := s.overCapLocked(sess.owner); over != "" {
		// Debug: a flood of connections beyond a cap would write as many lines.
		s.log.Debug("session cap reached: the connection gets a provisional session, good only for a resume",
			"cap", over, "limit", limit, "owner", sess.owner)
		return false
	}
	s.making++
	s.ownLocked(sess.owner)
	return true
}

// overCapLocked names the cap a new session of owner would go beyond, and
// its limit; "" when none.
func (s *Server) overCapLocked(owner string) (string, int) {
	o := &s.opts
	if o.MaxSessions > 0 && len(s.sessions)+s.making >= o.MaxSessions {
		return "max-sessions", o.MaxSessions
	}
	limit := o.MaxSessionsPerIP
	if len(owner) > 4 && owner[:4] == "sub:" {
		limit = o.MaxSessionsPerSubject
	}
	if owner != "" && limit > 0 && s.owned[owner] >= limit {
		return "per-client", limit
	}
	return "", 0
}

// ownLocked counts one more session of owner; disownLocked one fewer.
func (s *Server) ownLocked(owner string) {
	if owner != "" {
		s.owned[owner]++
	}
}

func (s *Server) disownLocked(owner string) {
	if owner == "" {
		return
	}
	if s.owned[owner]--; s.owned[owner] <= 0 {
		delete(s.owned, owner)
	}
}

// provisional makes sess the fresh session of a connection beyond a cap:
// uncounted, unstored, with a ring that is never written (its capacity is
// what system.connected tells). The connection drops it when it ends.
func (s *Server) provisional(sess *session) *session {
	sess.provisional = true
	sess.ring = s.opts.NewRing(s.opts.BufferSize)
	sess.ctx, sess.cancel = context.WithCancel(s.ctx)
	return sess
}

// ttl is how long the session outlives its last connection: SessionTTL,
// or IdleSessionTTL while it has sequenced no event — a client resuming
// it would get nothing it would not have from a fresh session, so a
// connect/close flood leaves nothing behind for long.
func (sess *session) ttl() time.Duration {
	if sess.used.Load() {
		return sess.srv.opts.SessionTTL
	}
	return sess.srv.opts.IdleSessionTTL
}

// onlyResume reports whether the connection is still on a provisional
// session: nothing but a resume may be applied on it. On the reader
// goroutine.
func (c *conn) onlyResume() bool { return c.sess.provisional && c.remote == nil }

// closeOverCap closes a provisional connection whose first frame did not
// resume a session, with 4029 once the answer to that frame is written.
func (c *conn) closeOverCap() {
	c.logger().Debug("connection beyond a session cap did not resume a session; closing")
	c.closeFlushed(websocket.StatusCode(wsproto.CloseTooManySessions), "too many sessions: resume one, or try again later")
}
