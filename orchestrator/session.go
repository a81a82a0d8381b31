package orchestrator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	// unrecorded is set on a connection's fresh session, with a
	// cluster, until record writes it to the store (record.go), which
	// recordMu serializes; resuming is set once its connection's first
	// frame was a resume; made is when the session was made.
	unrecorded atomic.Bool
	resuming   atomic.Bool
	recordMu   sync.Mutex
	made       time.Time
	// ctx is the session's life, handed to every ring call: done once the
	// session is freed (release).
	ctx    context.Context
	cancel context.CancelFunc
	// detachedAt is when the last connection left (UnixNano), 0 while a
	// connection is attached. The sweeper reads it without the lock.
	detachedAt atomic.Int64

	mu sync.Mutex // guards the fields below; held across append+send and every ring call
	// members are the connections attached, each with its own cursor
	// (members.go): one, or several when clients follow the session.
	members []*member
	// pruned is the latest seq acked to the ring: the lowest of every
	// member's acks when it was last raised.
	pruned uint64
	// ghosts are the acks of members that dropped, still holding the ring
	// until a resume succeeds them (removeLocked, claimGhostLocked).
	ghosts []uint64
	// followHash is the SHA-256 of the session's follow token, which lets
	// other devices attach beside its connection (§3.6). Zero when the
	// session has none (a provisional one).
	followHash [sha256.Size]byte
	// followed is set once a connection has followed the session (§3.6):
	// from then on each confirmation's answer is told to every device
	// (agent.confirm_settled). Kept in the checkpoint.
	followed bool
	// tokenHash is the SHA-256 of the resume token: the token itself is
	// only ever known to the client. Each resume replaces it (rotate).
	// prevHash is the one it replaced while the rotation is pending: until
	// the client proves it read the new token (commitToken), the old one
	// still resumes, so a client that lost the answer is not locked out.
	// Zero when none. With a cluster the store's copies are the ones that
	// count.
	tokenHash, prevHash [sha256.Size]byte
	// rot is the number of the latest token rotation admitted: a resume
	// holding a lower one loses (rotation.go). From the store's record on
	// a session adopted. rotAt is when the latest resume that rotated the
	// token arrived (without a cluster; the store keeps its own).
	rot      uint64
	rotAt    time.Time
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

// newSession makes a session of subject, counted under no address, and
// with a cluster records it in the store.
func (s *Server) newSession(ctx context.Context, subject string) (*session, string, error) {
	sess, token, _ := s.newSessionFrom(subject, "")
	if s.opts.Cluster != nil {
		if e := s.record(ctx, sess); e != nil {
			s.dropSession(sess)
			return nil, "", errors.New(e.Message)
		}
	}
	return sess, token, nil
}

// newSessionFrom makes a session of subject, connecting from the address
// addr (addrKey), and returns it with its resume token and its follow
// token ("" for a provisional session). With a cluster, the session is
// owned by this server, and unrecorded: it reaches the store when
// something needs it there (record.go). Beyond a session cap the
// session is a provisional one (sessioncap.go).
func (s *Server) newSessionFrom(subject, addr string) (*session, string, string) {
	token := newToken()
	sess := &session{
		id:        "sess_" + uuid.NewString(),
		tokenHash: sha256.Sum256([]byte(token)),
		subject:   subject,
		owner:     ownerKey(subject, addr),
		srv:       s,
		confirms:  make(map[string]*confirm),
		state:     wsproto.State{HistoryLimit: s.opts.HistoryRuns},
		made:      time.Now(),
	}
	if !s.reserve(sess) {
		return s.provisional(sess), token, ""
	}
	follow := newToken()
	sess.followHash = followHashOf(follow)
	if s.opts.Cluster == nil {
		sess.ring = s.opts.NewRing(s.opts.BufferSize)
	} else {
		d := s.opts.Cluster.NewRing(sess.id, sess.hooks())
		sess.ring, sess.shared = d, d
		sess.unrecorded.Store(true)
	}
	sess.dur = newDurable(sess.ring)
	sess.ctx, sess.cancel = context.WithCancel(s.ctx)
	s.mu.Lock()
	s.making--
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	s.obs.SessionOpened(false)
	return sess, token, follow
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
		if s.opts.Cluster != nil && !sess.provisional && sess.recorded() {
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
// the session's resume token and its follow token.
func (sess *session) attachFresh(c *conn, token, follow string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.members = append(sess.members, &member{c: c, ref: c.id, holds: true})
	c.send(sess.frame(wsproto.EventConnected, "", "connected", &wsproto.Connected{
		SessionID:      sess.id,
		ResumeToken:    token,
		BufferCapacity: sess.ring.Cap(),
		FollowToken:    follow,
		HistoryLimit:   sess.state.HistoryLimit,
	}))
	sess.drainIdleLocked()
}

// detach notes that the member named ref has gone; the session starts its
// TTL if it was the last.
func (sess *session) detach(ref string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.removeLocked(ref, true) && len(sess.members) == 0 {
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
	if len(sess.members) > 0 || sess.closed || at == 0 || now.Sub(time.Unix(0, at)) < sess.ttl() {
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

var errSessionExpired = errors.New("session expired")

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
	for _, m := range sess.members {
		if m.c != nil {
			m.c.send(e.Data)
		}
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
