package orchestrator

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// The proxy: a connection attached to a session that another, live
// server holds. It is answered from the store, tailed there, and its
// commands are forwarded to the owner (docs/scaling.md, "Resume on another
// node"); takeover.go decides that a resume is proxied.

// remote is the session a connection is attached to when another server
// owns it: the connection is served from the store (tail) and its commands
// go to the owner (forward). Set once by the reader goroutine, before the
// tail starts; owner changes only on the reader goroutine.
type remote struct {
	id    string
	owner string
	stop  context.CancelFunc // ends the tail
}

// proxy attaches c to a session that owner holds: it answers the resume
// from the store, then tails the session's events there. The owner
// learns of c (registerRemote), so that its acks count for pruning and a
// follow counts toward the cap; byFollow says req presents the session's
// follow token, which does not rotate.
func (s *Server) proxy(ctx context.Context, c *conn, req *wsproto.Reconnect, owner string, byFollow bool) *wsproto.Error {
	cl := s.opts.Cluster
	op, err := cl.Open(ctx, req.SessionID, RingHooks{})
	if errors.Is(err, ErrNoSession) {
		return errRejected
	}
	if err != nil {
		s.log.Error("resume: read the session", "session", req.SessionID, "err", err)
		return errStore
	}
	defer closeRing(op.Ring, s)
	st, err := stateOf(ctx, op, s.opts.HistoryRuns)
	if err != nil {
		s.log.Error("resume: read the session's state", "session", req.SessionID, "err", err)
		return errStore
	}
	a, err := answerResume(ctx, op.Ring, op.Ring, &st, req)
	if err != nil {
		s.log.Error("resume: read the session", "session", req.SessionID, "err", err)
		return errStore
	}
	// The token rotates, and the store orders the rotation (rotation.go),
	// before the answer goes out and before the owner learns of c
	// (registerRemote), which orders it too. A follow is registered
	// first, as the owner may refuse it (the cap) and a refused follow
	// changes nothing.
	token, then := req.ResumeToken, func() {}
	var rot *rotation
	if !byFollow {
		rot = newRotation(c.read)
		token = rot.token
		a.followToken = ""
	} else {
		a.followToken = req.ResumeToken
	}
	tctx, stop := context.WithCancel(s.ctx)
	c.remote = &remote{id: req.SessionID, owner: owner, stop: stop}
	abandon := func() {
		if req.Follow {
			c.unregisterRemote()
		}
		c.remote = nil
		stop()
	}
	if req.Follow {
		if e := c.registerRemote(true, req.LastSeq, 0); e != nil {
			c.remote = nil
			stop()
			return e // refused by the owner (the cap): nothing changed
		}
		a.followers = 1 // at least: the owner counts them all
	}
	if rot != nil {
		if ok, e := s.rotateShared(c, req.SessionID, req.ResumeToken, rot); !ok {
			abandon()
			return e
		}
		if !s.attachStored(c, req.SessionID, rot.n, !req.Follow) {
			abandon()
			return nil // a later resume holds the session: c is closed with 4000
		}
		then = s.commitAfterPong(c, nil, req.SessionID, rot.hash)
		c.registerRemote(req.Follow, req.LastSeq, rot.n) // the owner orders it too; it answers no plain resume
	}
	fresh := c.sess
	c.log.Store(s.log.With(c.logAttrs("session", req.SessionID, "owner", owner)...))
	c.sendThen(then, a.frames(s.log, req.SessionID, token)...)
	c.wg.Add(1)
	go c.tail(tctx, a.last)
	s.dropSession(fresh)
	if rot == nil {
		s.attachStored(c, req.SessionID, 0, false) // a follow by the follow token: recorded, ordering nothing
	}
	s.log.Info("session resumed from the store", "session", req.SessionID, "owner", owner,
		"from_session", fresh.id, "replayed", a.replayed, "resync", a.resync)
	a.observe(s.obs)
	return nil
}

// tail sends c the session's events after seq as the store receives them,
// until c ends. A session gone from the store closes c with 1012: the
// client's resume then learns it is gone.
func (c *conn) tail(ctx context.Context, after uint64) {
	defer c.wg.Done()
	errStop := errors.New("connection closed")
	err := c.srv.opts.Cluster.Tail(ctx, c.remote.id, after, func(entries []buffer.Entry) error {
		frames := make([][]byte, len(entries))
		for i, e := range entries {
			frames[i] = e.Data
		}
		if !c.send(frames...) {
			return errStop
		}
		return nil
	})
	if ctx.Err() != nil || errors.Is(err, errStop) {
		return
	}
	c.logger().Warn("tail of the session ended", "err", err)
	c.closeWith(websocket.StatusServiceRestart, "session moved")
}

// forward sends a client's frame to the server owning c's session and
// returns its answer. When no server answers for the session, or its owner
// took the frame but its answer was lost, the connection is closed with
// 1012: the client resumes, and its resume finds where the session lives
// now (or claims it) and shows whether the frame was applied. A frame is
// sent again only when no server took it, or when the owner answered that
// the session moved.
func (c *conn) forward(data []byte) *wsproto.Error {
	s, cl := c.srv, c.srv.opts.Cluster
	for try := 0; try < 2; try++ {
		id := s.nextMsg.Add(1)
		reply := make(chan message, 1)
		s.mu.Lock()
		s.replies[id] = reply
		s.mu.Unlock()
		e, moved, ok, taken := c.exchange(message{Kind: msgCommand, From: cl.Node(), Session: c.remote.id,
			Conn: c.id, ID: id, Frame: data}, reply)
		s.mu.Lock()
		delete(s.replies, id)
		s.mu.Unlock()
		if ok && !moved {
			return e
		}
		if taken && !moved {
			// The owner took the command and its reply was lost (this
			// server's subscriber blinked, say): it may have been applied,
			// and sent again it would be applied twice — a run started
			// twice, its tool calls done twice. The client's resume shows
			// whether it was, and the client sends it again if not.
			break
		}
		if try == 0 && c.refreshOwner() {
			continue
		}
	}
	c.logger().Warn("the session's owner does not answer; closing for a resume")
	c.closeWith(websocket.StatusServiceRestart, "session owner unavailable")
	return nil
}

// exchange sends m to the owner and waits for its reply; ok is false when
// none came, and taken says whether a subscriber took m all the same.
func (c *conn) exchange(m message, reply chan message) (e *wsproto.Error, moved, ok, taken bool) {
	ctx, cancel := context.WithTimeout(c.srv.ctx, storeTimeout)
	defer cancel()
	b, _ := json.Marshal(m)
	delivered, err := c.srv.opts.Cluster.Send(ctx, c.remote.owner, b)
	if err != nil || !delivered {
		return nil, false, false, false
	}
	select {
	case r := <-reply:
		return r.Error, r.Moved, true, true
	case <-ctx.Done():
		return nil, false, false, true
	}
}

// refreshOwner looks the session's owner up again, reporting whether
// another live server owns it now.
func (c *conn) refreshOwner() bool {
	ctx, cancel := context.WithTimeout(c.srv.ctx, storeTimeout)
	defer cancel()
	cl := c.srv.opts.Cluster
	rec, err := cl.Lookup(ctx, c.remote.id)
	if err != nil || rec.Owner == c.remote.owner || rec.Owner == cl.Node() {
		return false
	}
	if alive, err := cl.Alive(ctx, rec.Owner); err != nil || !alive {
		return false
	}
	c.remote.owner = rec.Owner
	return true
}

// detachShared clears c as its session's connection in the store.
func (s *Server) detachShared(c *conn) {
	cl := s.opts.Cluster
	if cl == nil {
		return
	}
	id := c.sessionID()
	if c.remote == nil && !c.sess.recorded() {
		return // the store knows nothing of it (record.go)
	}
	ctx, cancel := context.WithTimeout(s.final, storeTimeout)
	defer cancel()
	if err := cl.Detach(ctx, id, s.connRef(c)); err != nil && !errors.Is(err, ErrNoSession) {
		s.log.Error("clear the session's connection", "session", id, "err", err)
	}
	// Others may follow the session still: one of them becomes its
	// connection in the store again, so that it does not expire there.
	if c.remote != nil {
		c.unregisterRemote() // the owner does it
	} else if sess := s.lookup(id); sess != nil {
		s.keepAttached(sess)
	}
}

func closeRing(r buffer.Ring, s *Server) {
	if c, ok := r.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			s.log.Error("close a read-only ring", "err", err)
		}
	}
}
