package orchestrator

import (
	"context"
	"crypto/sha256"
	"log/slog"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// resume attaches c to the session named in req, replaying or resyncing
// (§3.5). A plain resume replaces every connection attached; a follow
// attaches c beside them (§3.6). It runs on c's reader goroutine. A session
// this server does not hold is looked up in the cluster's store, if there
// is one.
func (s *Server) resume(c *conn, req *wsproto.Reconnect) *wsproto.Error {
	if c.frames > 1 {
		return &wsproto.Error{Code: wsproto.CodeInvalidState, RefType: wsproto.EventUserReconnect,
			Message: "user.reconnect_with_state must be the first frame of a connection"}
	}
	old := s.lookup(req.SessionID)
	if old == nil && s.opts.Cluster != nil {
		return s.resumeShared(c, req)
	}
	// Another subject's session is rejected as an unknown one is, with
	// the same answer, even with its resume token.
	if old == nil || old.subject != c.subject {
		return errRejected
	}
	// A follow with the session's follow token: that token does not
	// rotate (every device that follows holds it), and it answers only a
	// follow, so it never replaces the session's connections.
	byFollow := req.Follow && old.followHash != noHash && tokenMatches(old.followHash, req.ResumeToken)
	if req.Follow {
		old.mu.Lock()
		e := old.followLimitLocked()
		old.mu.Unlock()
		if e != nil {
			return e // before the token rotates: a refused follow changes nothing
		}
	}
	// The token rotates: the answer carries a new one, and the one
	// presented stops working once the client proves it read the answer
	// (commitToken), so a stolen token is good for one resume, which the
	// session's client notices (its own next resume is refused).
	token, follow := req.ResumeToken, req.ResumeToken
	var hash [sha256.Size]byte
	if !byFollow {
		token, follow = newToken(), ""
		hash = sha256.Sum256([]byte(token))
		if s.opts.Cluster != nil {
			// The store decides, atomically: another server may be
			// resuming the session with the same token (proxy).
			if e := s.rotateShared(req.SessionID, req.ResumeToken, hash); e != nil {
				return e
			}
		}
	}
	fresh := c.sess

	old.mu.Lock()
	if old.given {
		// Lost as this resume found it: it is adopted from the store,
		// where the token has just rotated from the one presented, which
		// stays good until the rotation is committed.
		old.mu.Unlock()
		return s.resumeShared(c, req)
	}
	if old.closed || (!byFollow && s.opts.Cluster == nil && !old.tokenAccepted(req.ResumeToken)) {
		old.mu.Unlock()
		return errRejected
	}
	old.removeLocked(c.id, false) // a connection resuming its own fresh session
	if req.Follow {
		// Checked again: another follow may have attached meanwhile. The
		// rotation, if any, left the token presented good (pending).
		if e := old.followLimitLocked(); e != nil {
			old.mu.Unlock()
			return e
		}
		old.followedLocked()
	}
	a, err := answerResume(old.ctx, old.ring, old.shared, &old.state, req)
	if err != nil {
		old.mu.Unlock()
		s.log.Error("resume: read ring", "session", old.id, "err", err)
		return &wsproto.Error{Code: wsproto.CodeInternal, Message: "could not read the session"}
	}
	var then func()
	if !byFollow {
		old.rotateLocked(req.ResumeToken, hash)
		then = s.commitAfterPong(c, old, hash)
	}
	var gone []*member
	if !req.Follow {
		gone = old.replaceAllLocked(c.id)
	}
	// Its acks start at 0: a resume's last_seq is what the client applied,
	// not what it stored, and a reload resumes from what it stored.
	m := &member{c: c, ref: c.id, sent: a.last}
	old.claimGhostLocked(req.LastSeq)
	old.members = append(old.members, m)
	a.followToken, a.followers = follow, len(old.members)
	if !req.Follow {
		a.followers = 0
	}
	frames := a.frames(s.log, old.id, token)
	old.detachedAt.Store(0)
	c.attach(old)
	if a.ahead {
		old.holdLocked(m, a.last, frames, then)
	} else {
		c.sendThen(then, frames...)
	}
	old.pruneLocked() // the members replaced no longer hold the ring back
	old.drainIdleLocked()
	old.mu.Unlock()

	s.closeReplaced(old.id, gone)
	if fresh != old {
		s.dropSession(fresh)
	}
	s.attachShared(c, old.id, !req.Follow)
	s.log.Info("session resumed", "session", old.id, "from_session", fresh.id, "replayed", a.replayed, "resync", a.resync, "follow", req.Follow)
	a.observe(s.obs)
	return nil
}

// tokenAccepted reports whether token resumes the session: its current
// token, or the previous one while the rotation from it is pending.
func (sess *session) tokenAccepted(token string) bool {
	return tokenMatches(sess.tokenHash, token) || (sess.prevHash != noHash && tokenMatches(sess.prevHash, token))
}

// noHash is a hash no token has: no pending previous token.
var noHash [sha256.Size]byte

// rotateLocked makes next the session's token hash after a resume with
// token. A resume with the current token makes it the pending previous
// one; a resume with the pending previous one leaves it so, and the
// current one, which its client never read, dies.
func (sess *session) rotateLocked(token string, next [sha256.Size]byte) {
	if tokenMatches(sess.tokenHash, token) {
		sess.prevHash = sess.tokenHash
	}
	sess.tokenHash = next
}

// commitAfterPong returns what the writer of c runs once it has written
// the system.connected that gave the client the token of hash: a ping,
// whose pong proves the client read it; then the previous token stops
// working (commitToken).
func (s *Server) commitAfterPong(c *conn, sess *session, hash [sha256.Size]byte) func() {
	return func() { c.confirmPing(func() { s.commitToken(c, sess, sess.id, hash) }) }
}

// commitToken ends a pending rotation: if the session's token hash is
// still hash (no later resume rotated it again), the previous token stops
// working. sess is nil for a session another server holds. It runs on a
// goroutine of c's.
func (s *Server) commitToken(c *conn, sess *session, id string, hash [sha256.Size]byte) {
	done := false
	if s.opts.Cluster != nil {
		ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
		defer cancel()
		ok, err := s.opts.Cluster.Commit(ctx, id, hash)
		if err != nil {
			c.logger().Warn("resume: commit the resume token; the previous one stays good", "err", err)
			return
		}
		done = ok
	}
	if sess != nil {
		sess.mu.Lock()
		if sess.tokenHash == hash {
			sess.prevHash = noHash
			done = done || s.opts.Cluster == nil
		}
		sess.mu.Unlock()
	}
	if done {
		c.logger().Info("resume token committed")
	}
}

var errRejected = &wsproto.Error{Code: wsproto.CodeResumeRejected, RefType: wsproto.EventUserReconnect,
	Message: "unknown or expired session, or wrong resume token"}

// resumeAnswer is what a resume is answered with: the events the client
// missed, or a snapshot of the state when they cannot be replayed.
type resumeAnswer struct {
	last     uint64 // the latest seq the client will have
	lastSum  string
	capacity int
	history  int            // the session's history limit (system.connected's history_limit)
	entries  []buffer.Entry // the replay, or nil with snap
	replayed int
	resync   bool
	snap     *wsproto.Snapshot
	// ahead is set when the snapshot is as of a seq the store does not
	// hold yet: the answer must wait for it (held.go).
	ahead bool
	// followToken and followers answer a follow (§3.6); "" and 0 else.
	followToken string
	followers   int
}

// answerResume reads ring for a client that has everything up to
// req.LastSeq. With a durable ring only what the store holds is replayed
// (the rest follows live), so that a client never holds an event a server
// taking over would not have. st is the state the ring's events amount to;
// it is read only on a resync. Called under the lock that guards ring and st.
func answerResume(ctx context.Context, ring buffer.Ring, durable buffer.Durable, st *wsproto.State, req *wsproto.Reconnect) (resumeAnswer, error) {
	a := resumeAnswer{capacity: ring.Cap(), history: st.HistoryLimit}
	var err error
	if a.last, a.lastSum, err = ring.Last(ctx); err != nil {
		return a, err
	}
	limit := a.last
	if durable != nil {
		limit, _ = durable.Durable()
	}
	entries, err := ring.Since(ctx, req.LastSeq)
	replay := err == nil && req.LastSeq <= limit
	if replay && req.StateChecksum != "" {
		sum, err := ring.Checksum(ctx, req.LastSeq)
		replay = err == nil && sum == req.StateChecksum
	}
	if replay {
		for len(entries) > 0 && entries[len(entries)-1].Seq > limit {
			entries = entries[:len(entries)-1]
		}
		if limit != a.last {
			if a.lastSum, err = ring.Checksum(ctx, limit); err != nil {
				return a, err
			}
			a.last = limit
		}
		a.entries, a.replayed = entries, len(entries)
		return a, nil
	}
	// A snapshot of everything so far: the client then holds the latest
	// state, and the events still on their way to the store are not sent
	// again (sent = last). When some are not durable yet, the answer waits
	// for them (ahead): a client never holds what a server taking the
	// session over would not have.
	snap := st.Snapshot(a.last, a.lastSum)
	a.resync, a.snap, a.ahead = true, &snap, limit < a.last
	return a, nil
}

// observe tells obs how the resume was answered.
func (a *resumeAnswer) observe(obs Observer) {
	if a.resync {
		obs.Resumed(ResumeResync, 0)
		return
	}
	obs.Resumed(ResumeReplay, a.replayed)
}

// frames are the answer's frames: system.connected, then the replay or
// the snapshot.
func (a *resumeAnswer) frames(log *slog.Logger, sessionID, token string) [][]byte {
	n := a.replayed
	frames := make([][]byte, 0, 2+n)
	frames = append(frames, encodeFrame(log, sessionID, wsproto.EventConnected, "", "resumed", &wsproto.Connected{
		SessionID:      sessionID,
		ResumeToken:    token,
		Resumed:        true,
		LastSeq:        a.last,
		StateChecksum:  a.lastSum,
		BufferCapacity: a.capacity,
		HistoryLimit:   a.history,
		Replayed:       &n,
		Resync:         a.resync,
		FollowToken:    a.followToken,
		Followers:      a.followers,
	}))
	for _, e := range a.entries {
		frames = append(frames, e.Data)
	}
	if a.snap != nil {
		frames = append(frames, encodeFrame(log, sessionID, wsproto.EventStateSnapshot, "", "state snapshot", a.snap))
	}
	return frames
}
