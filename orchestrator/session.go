package orchestrator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// session is a client's state across connections: its ring, its
// client-visible state, its run and its open confirmations.
type session struct {
	id  string
	srv *Server
	// subject is whom the session belongs to: the subject that created
	// it ("" without authentication). Only its connections resume it.
	subject string
	// owner is what the session is counted under for the session caps
	// (ownerKey): its subject, or an anonymous client's address.
	owner string
	// provisional is set on the fresh session of a connection beyond a
	// session cap: not counted nor stored, good only for a resume
	// (sessioncap.go).
	provisional bool
	// used is set once the session has sequenced an event: it then keeps
	// SessionTTL, not IdleSessionTTL (ttl).
	used atomic.Bool
	ring buffer.Ring
	// dur is set when ring is a buffer.Durable: the session is then
	// checkpointed at every transition (checkpoint.go).
	dur *durable
	// shared is ring when it is a cluster's store's: events then reach
	// the connection once the store holds them (deliver).
	shared buffer.Durable
	// ctx is the session's life, handed to every ring call: done once the
	// session is freed (release).
	ctx    context.Context
	cancel context.CancelFunc
	// detachedAt is when the last connection left (UnixNano), 0 while a
	// connection is attached. The sweeper reads it without the lock.
	detachedAt atomic.Int64

	mu   sync.Mutex // guards the fields below; held across append+send and every ring call
	conn *conn
	// tokenHash is the SHA-256 of the resume token: the token itself is
	// only ever known to the client. Each resume replaces it (rotate).
	// prevHash is the one it replaced while the rotation is pending: until
	// the client proves it read the new token (commitToken), the old one
	// still resumes, so a client that lost the answer is not locked out.
	// Zero when none. With a cluster the store's copies are the ones that
	// count.
	tokenHash, prevHash [sha256.Size]byte
	// sent is the latest seq sent to conn, with a durable ring.
	sent uint64
	// held is conn's resync answer while the store has not caught up
	// with its snapshot (held.go); nil when none.
	held     *heldAnswer
	state    wsproto.State
	run      *run
	confirms map[string]*confirm
	// closed is set once, when the session is freed: from then on its
	// ring is not called and it cannot be resumed.
	closed bool
	// given is set with closed when the ring gave the session up (lost):
	// the store still holds it, and a resume adopts it from there.
	given bool
	// scratch is where events are encoded before being copied out at their
	// exact size: one allocation per event, and no slack kept in the ring.
	scratch []byte
	// next is the event emitLocked is appending, which encodeNext (the
	// ring's encode callback, bound once in encoder) encodes: a closure
	// per event would cost an allocation per event.
	next    wsproto.Frame
	encoder func(seq uint64) ([]byte, error)
	// cut is set by an append whose frame was cut to fit MaxFrameBytes:
	// the frame as sent, whose metadata the state must fold in.
	cut *wsproto.Frame
}

// newSession makes a session of subject, counted under no address.
func (s *Server) newSession(ctx context.Context, subject string) (*session, string, error) {
	return s.newSessionFrom(ctx, subject, "")
}

// newSessionFrom makes a session of subject, connecting from the address
// addr (addrKey), and returns it with its resume token. With a cluster,
// the session is recorded in its store, owned by this server. Beyond a
// session cap the session is a provisional one (sessioncap.go).
func (s *Server) newSessionFrom(ctx context.Context, subject, addr string) (*session, string, error) {
	token := newToken()
	sess := &session{
		id:        "sess_" + uuid.NewString(),
		tokenHash: sha256.Sum256([]byte(token)),
		subject:   subject,
		owner:     ownerKey(subject, addr),
		srv:       s,
		confirms:  make(map[string]*confirm),
		state:     wsproto.State{HistoryLimit: s.opts.HistoryRuns},
	}
	if !s.reserve(sess) {
		return s.provisional(sess), token, nil
	}
	if s.opts.Cluster == nil {
		sess.ring = s.opts.NewRing(s.opts.BufferSize)
	} else {
		d, err := s.opts.Cluster.Create(ctx, sess.id, Record{TokenHash: sess.tokenHash, Subject: subject, Owner: s.opts.Cluster.Node()}, sess.hooks())
		if err != nil {
			s.unreserve(sess)
			return nil, "", fmt.Errorf("record session: %w", err)
		}
		sess.ring, sess.shared = d, d
	}
	sess.dur = newDurable(sess.ring)
	sess.ctx, sess.cancel = context.WithCancel(s.ctx)
	s.mu.Lock()
	s.making--
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	s.obs.SessionOpened(false)
	return sess, token, nil
}

// newToken returns a resume token of 256 random bits.
func newToken() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tokenMatches reports, in constant time, whether token has the hash.
func tokenMatches(hash [sha256.Size]byte, token string) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], hash[:]) == 1
}

func (s *Server) lookup(id string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// dropSession frees a session that has no run and no connection (the
// fresh session of a connection that resumed another), also from the
// cluster's store.
func (s *Server) dropSession(sess *session) {
	if sess.markClosed() {
		s.forget(sess)
		sess.release()
		if s.opts.Cluster != nil && !sess.provisional {
			s.forgetShared(sess.id)
		}
	}
}

func (s *Server) forget(sess *session) {
	s.mu.Lock()
	if s.sessions[sess.id] == sess {
		delete(s.sessions, sess.id)
		s.disownLocked(sess.owner)
	}
	s.mu.Unlock()
}

// markClosed closes the session to appends and resumes; it reports whether
// this call closed it (the caller then releases it).
func (sess *session) markClosed() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closed {
		return false
	}
	sess.closed = true
	return true
}

// release ends a closed session's context and closes its ring when the
// ring holds resources (buffer's package doc). Called once, without the
// session's lock.
func (sess *session) release() {
	sess.cancel()
	if !sess.provisional {
		sess.srv.obs.SessionClosed()
	}
	if c, ok := sess.ring.(io.Closer); ok {
		if err := c.Close(); err != nil {
			sess.srv.log.Error("close ring", "session", sess.id, "err", err)
		}
	}
}

// attachFresh attaches the connection that created the session (c.attach
// has named it already) and greets it with system.connected, which carries
// the session's resume token.
func (sess *session) attachFresh(c *conn, token string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.conn = c
	c.send(sess.frame(wsproto.EventConnected, "", "connected", &wsproto.Connected{
		SessionID:      sess.id,
		ResumeToken:    token,
		BufferCapacity: sess.ring.Cap(),
		HistoryLimit:   sess.state.HistoryLimit,
	}))
	sess.drainIdleLocked()
}

// detach notes that c has gone; the session starts its TTL if c was its
// connection.
func (sess *session) detach(c *conn) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.conn == c {
		sess.conn = nil
		sess.dropHeldLocked()
		sess.detachedAt.Store(time.Now().UnixNano())
		sess.cancelAbsentLocked()
	}
}

// expire frees a session whose TTL had run out at now, unless a connection
// came back. The TTL is checked again under the lock: the sweeper chose the
// session from a reading taken without it, and the session may have been
// resumed and dropped again since, which restarts its TTL, or have
// sequenced its first event, which lengthens it.
func (sess *session) expire(now time.Time) bool {
	sess.mu.Lock()
	at := sess.detachedAt.Load()
	if sess.conn != nil || sess.closed || at == 0 || now.Sub(time.Unix(0, at)) < sess.ttl() {
		sess.mu.Unlock()
		return false
	}
	sess.closed = true
	r := sess.run
	sess.mu.Unlock()
	if r != nil {
		r.cancel(errSessionExpired)
	}
	sess.srv.forget(sess)
	sess.release()
	if sess.used.Load() {
		sess.srv.log.Info("session expired", "session", sess.id)
	} else { // a connect/close flood makes thousands a second
		sess.srv.log.Debug("idle session freed", "session", sess.id)
	}
	return true
}

var (
	errSessionExpired = errors.New("session expired")
	errSessionClosed  = errors.New("session closed")
)

// frame encodes an unsequenced frame for this session.
func (sess *session) frame(event, stepID, content string, meta any) []byte {
	return encodeFrame(sess.srv.log, sess.id, event, stepID, content, meta)
}

// encodeFrame encodes an unsequenced frame of a session.
func encodeFrame(log *slog.Logger, sessionID, event, stepID, content string, meta any) []byte {
	now := time.Now()
	f := wsproto.Frame{
		Event:     event,
		EventID:   newEventID(now),
		SessionID: sessionID,
		StepID:    stepID,
		Timestamp: now,
		Content:   content,
		Metadata:  meta,
	}
	b, err := wsproto.AppendFrame(nil, f)
	if err != nil {
		log.Error("encode frame", "session", sessionID, "event", event, "err", err)
		f.Event, f.Content = wsproto.EventError, "internal error"
		f.Metadata = &wsproto.Error{Code: wsproto.CodeInternal, Message: "the server could not encode a frame"}
		b, _ = wsproto.AppendFrame(nil, f)
	}
	return b
}

// emit appends a sequenced event to the ring, folds it into the state and
// sends it to the attached connection, if any, all under the session lock.
func (sess *session) emit(event, stepID, content string, meta any) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.emitLocked(event, stepID, content, meta)
}

func (sess *session) emitLocked(event, stepID, content string, meta any) {
	if sess.closed || sess.ctx.Err() != nil {
		return // freed, or being freed: a run winding down has no one to tell
	}
	now := time.Now()
	id := newEventID(now)
	sess.next = wsproto.Frame{
		Event:     event,
		EventID:   id,
		SessionID: sess.id,
		StepID:    stepID,
		Timestamp: now,
		Content:   content,
		Metadata:  meta,
	}
	if sess.encoder == nil {
		sess.encoder = sess.encodeNext
	}
	e, err := sess.ring.Append(sess.ctx, id, sess.encoder)
	sess.next = wsproto.Frame{} // keeps no metadata alive
	applied := meta
	if sess.cut != nil {
		applied, sess.cut = sess.cut.Metadata, nil // clients see the cut texts: so does the state
	}
	if err != nil {
		sess.srv.log.Error("append event", "session", sess.id, "event", event, "err", err)
		return
	}
	sess.srv.obs.Event(event)
	if !sess.used.Load() {
		sess.used.Store(true) // it keeps SessionTTL from now on
	}
	sess.state.Apply(event, applied)
	if sess.dur != nil {
		sess.transitionLocked(e.Seq, event, applied) // commits the unit
	}
	if sess.shared != nil {
		return // deliver sends it once the store has it
	}
	if sess.conn != nil {
		sess.conn.send(e.Data)
	}
}

// encodeNext encodes sess.next as seq, for the ring: into scratch, then
// copied out at its exact size (the ring keeps it), or cut to fit
// MaxFrameBytes.
func (sess *session) encodeNext(seq uint64) ([]byte, error) {
	f := sess.next
	f.Seq = seq
	b, err := wsproto.AppendFrame(sess.scratch[:0], f)
	if err != nil {
		return nil, err
	}
	if limit := sess.srv.opts.MaxFrameBytes; limit > 0 && len(b) > limit {
		return sess.fitLocked(f)
	}
	if cap(b) <= 4096 { // keep an ordinary-sized buffer; let a rare big one go
		sess.scratch = b
	}
	return append([]byte(nil), b...), nil
}

// closeConfirmLocked forgets an open confirmation: its step_id is no longer
// answerable and it leaves the state's pending_confirm.
func (sess *session) closeConfirmLocked(stepID string) {
	delete(sess.confirms, stepID)
	sess.state.CloseConfirm(stepID)
}

// sendError answers a client frame with system.error on its connection.
func (c *conn) sendError(e *wsproto.Error) {
	c.send(encodeFrame(c.srv.log, c.sessionID(), wsproto.EventError, "", e.Message, e))
}

// resume attaches c to the session named in req, replaying or resyncing
// (§3.5). It runs on c's reader goroutine. A session this server does not
// hold is looked up in the cluster's store, if there is one.
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
	// The token rotates: the answer carries a new one, and the one
	// presented stops working once the client proves it read the answer
	// (commitToken), so a stolen token is good for one resume, which the
	// session's client notices (its own next resume is refused).
	token := newToken()
	hash := sha256.Sum256([]byte(token))
	if s.opts.Cluster != nil {
		// The store decides, atomically: another server may be resuming
		// the session with the same token (proxy).
		if e := s.rotateShared(req.SessionID, req.ResumeToken, hash); e != nil {
			return e
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
	if old.closed || (s.opts.Cluster == nil && !old.tokenAccepted(req.ResumeToken)) {
		old.mu.Unlock()
		return errRejected
	}
	a, err := answerResume(old.ctx, old.ring, old.shared, &old.state, req)
	if err != nil {
		old.mu.Unlock()
		s.log.Error("resume: read ring", "session", old.id, "err", err)
		return &wsproto.Error{Code: wsproto.CodeInternal, Message: "could not read the session"}
	}
	old.rotateLocked(req.ResumeToken, hash)
	frames := a.frames(s.log, old.id, token)
	prev := old.conn
	old.conn, old.sent = c, a.last
	old.detachedAt.Store(0)
	c.attach(old)
	old.dropHeldLocked() // prev's
	if a.ahead {
		old.holdLocked(c, a.last, frames, s.commitAfterPong(c, old, hash))
	} else {
		c.sendThen(s.commitAfterPong(c, old, hash), frames...)
	}
	old.drainIdleLocked()
	old.mu.Unlock()

	if prev != nil && prev != c {
		prev.closeWith(websocket.StatusCode(wsproto.CloseSessionReplaced), "session replaced")
	}
	if fresh != old {
		s.dropSession(fresh)
	}
	s.attachShared(c, old.id)
	s.log.Info("session resumed", "session", old.id, "from_session", fresh.id, "replayed", a.replayed, "resync", a.resync)
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
	}))
	for _, e := range a.entries {
		frames = append(frames, e.Data)
	}
	if a.snap != nil {
		frames = append(frames, encodeFrame(log, sessionID, wsproto.EventStateSnapshot, "", "state snapshot", a.snap))
	}
	return frames
}
