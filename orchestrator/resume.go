package orchestrator

import (
	"context"
	"log/slog"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// resume attaches c to the session named in req, replaying or resyncing
// (§3.5). A plain resume replaces every connection attached; a follow
// attaches c beside them (§3.6). It runs on c's reader goroutine. A session
// this server does not hold is looked up in the cluster's store, if there
// is one, and proxied or taken over (takeover.go); one taken over is then
// resumed here. The walk goes one way: the store's answer, the token
// (rotation.go), the members (members.go), the connection (conn.go).
func (s *Server) resume(c *conn, req *wsproto.Reconnect) *wsproto.Error {
	if c.frames > 1 {
		return &wsproto.Error{Code: wsproto.CodeInvalidState, RefType: wsproto.EventUserReconnect,
			Message: "user.reconnect_with_state must be the first frame of a connection"}
	}
	// A session this server holds may be given up (lost) as the resume
	// finds it, and is then taken over again: twice at most.
	for range 3 {
		old := s.lookup(req.SessionID)
		if old == nil && s.opts.Cluster != nil {
			if held, e := s.resumeShared(c, req); !held {
				return e
			}
			continue // taken over: held here now
		}
		if e, again := s.resumeHeld(c, req, old); !again {
			return e
		}
	}
	return errStore // given up each time it was taken over: the client resumes again
}

// resumeHeld is resume of the session old (nil: none) this server holds.
// again says the session was given up (lost) meanwhile: it is in the
// store, to be taken over again.
func (s *Server) resumeHeld(c *conn, req *wsproto.Reconnect, old *session) (e *wsproto.Error, again bool) {
	// Another subject's session is rejected as an unknown one is, with
	// the same answer, even with its resume token.
	if old == nil || old.subject != c.subject {
		return errRejected, false
	}
	if s.opts.Cluster != nil { // the token rotates in the store, and the connection is recorded there
		if e := s.record(s.ctx, old); e != nil {
			e.RefType = wsproto.EventUserReconnect
			return e, false
		}
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
			return e, false // before the token rotates: a refused follow changes nothing
		}
	}
	// The token rotates: the answer carries a new one, and the one
	// presented stops working once the client proves it read the answer
	// (commitToken), so a stolen token is good for one resume, which the
	// session's client notices (its own next resume is refused). Of
	// resumes with one token at once, on any servers, the rotation's
	// number decides which holds the session (rotation.go): the store's
	// first, then the session's lock.
	token, follow := req.ResumeToken, req.ResumeToken
	var rot *rotation
	if !byFollow {
		rot = newRotation(c.read)
		token, follow = rot.token, ""
		if s.opts.Cluster != nil {
			if ok, e := s.rotateShared(c, req.SessionID, req.ResumeToken, rot); !ok {
				return e, false
			}
			if !s.attachStored(c, req.SessionID, rot.n, !req.Follow) {
				return nil, false // a later resume holds the session: c is closed with 4000
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
		return nil, true
	}
	if old.closed || (!byFollow && s.opts.Cluster == nil && !old.tokenAccepted(req.ResumeToken)) {
		old.mu.Unlock()
		return errRejected, false
	}
	if rot != nil && s.opts.Cluster == nil && old.supersededLocked(req.ResumeToken, rot) {
		old.mu.Unlock()
		s.lost(c, old.id, 0)
		return nil, false
	}
	old.removeLocked(c.id, false) // a connection resuming its own fresh session
	if req.Follow {
		// Checked again: another follow may have attached meanwhile. The
		// rotation, if any, left the token presented good (pending).
		if e := old.followLimitLocked(); e != nil {
			old.mu.Unlock()
			return e, false
		}
	}
	a, err := answerResume(old.ctx, old.ring, old.shared, &old.state, req)
	if err != nil {
		old.mu.Unlock()
		s.log.Error("resume: read ring", "session", old.id, "err", err)
		return &wsproto.Error{Code: wsproto.CodeInternal, Message: "could not read the session"}, false
	}
	gone, ok := old.admitLocked(c.id, rot, req.Follow)
	if !ok {
		old.mu.Unlock()
		s.lost(c, old.id, rot.n)
		return nil, false
	}
	if req.Follow {
		old.followedLocked()
	}
	var then func()
	if rot != nil {
		old.rotateLocked(req.ResumeToken, rot)
		then = s.commitAfterPong(c, old, old.id, rot.hash)
	}
	// Its acks start at 0: a resume's last_seq is what the client applied,
	// not what it stored, and a reload resumes from what it stored.
	m := &member{c: c, ref: c.id, sent: a.last, holds: rot != nil}
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
	if rot == nil {
		s.attachStored(c, old.id, 0, false) // a follow by the follow token: recorded, ordering nothing
	}
	s.log.Info("session resumed", "session", old.id, "from_session", fresh.id, "replayed", a.replayed, "resync", a.resync, "follow", req.Follow)
	a.observe(s.obs)
	return nil, false
}

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
