package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

// Which connection holds a session's resume token (§3.5 of
// docs/protocol.md; docs/scaling.md, "One authority for the token"): the
// token's rotation, the number that orders rotations, and the
// replacements that number decides. This file is the one place that
// decides them.
//
// Every resume by the resume token rotates it, and every rotation has a
// number: the store's (Cluster.Rotate), issued in the same atomic step as
// the swap, so that the rotation that holds the token the store accepts
// is the one with the highest number; with no cluster the session's own,
// issued under its lock. The number, and nothing else — not the order in
// which resumes reach the session's lock, a proxy's attach message the
// owner, or their attaches the store — decides every replacement, at each
// of the three places one happens:
//
//   - in the store, where the session's connection is recorded
//     (attachStored, Cluster.Attach): before its answer goes out;
//   - on the owner, under the session's lock, for a resume there
//     (Server.resume) or one proxied from another server (attachRemote):
//     admitLocked.
//
// At each, the higher number replaces the connection holding the token
// (every connection, for a plain resume), and the lower one loses: it is
// refused, gets no token if its answer has not gone out, replaces nobody,
// and is closed with 4000. A connection given a token and replaced later
// was replaced by a higher number. So, after any set of concurrent resumes
// with one token, on any servers, exactly one connection holding it is
// left open; it holds the token the store accepts; and once its client
// has read that token (commitAfterPong) the token presented is retired.
// A follow by the follow token rotates nothing and replaces nobody.
//
// One thing comes before the number: when the resumes arrived. A resume
// a server takes long to carry out (a takeover waiting for its slot on a
// loaded machine) may rotate after its client gave it up and resumed
// again, and its higher number would then replace the very connection
// its client now holds, whose token stops working. So a rotation from
// the pending previous token by a resume that arrived more than
// RotationSkew before the one that made the current token is refused
// (ErrSuperseded, the store's rot_at; rotAt without a cluster), and its
// connection is closed with 4000: its client moved on.

// rotation is a resume's rotation of the token: the new token its answer
// carries, and the number that orders it among the session's rotations.
type rotation struct {
	token string
	hash  [sha256.Size]byte
	n     uint64    // 0 until the store (or, with no cluster, admitLocked) issues it
	at    time.Time // when the resume arrived
}

// newRotation is the rotation of a resume that arrived at at.
func newRotation(at time.Time) *rotation {
	token := newToken()
	return &rotation{token: token, hash: sha256.Sum256([]byte(token)), at: at}
}

// RotationSkew is how much earlier than the resume that made a session's
// token another resume, with the token that one replaced, must have
// arrived to lose to it whatever order their rotations take
// (ErrSuperseded): room for the clocks of two servers, and for two
// resumes sent at once, which the rotation's number orders. A client
// gives a resume up only after seconds.
const RotationSkew = time.Second

// tokenAccepted reports whether token resumes the session: its current
// token, or the previous one while the rotation from it is pending.
func (sess *session) tokenAccepted(token string) bool {
	return tokenMatches(sess.tokenHash, token) || (sess.prevHash != noHash && tokenMatches(sess.prevHash, token))
}

// noHash is a hash no token has: no pending previous token.
var noHash [sha256.Size]byte

var errRejected = &wsproto.Error{Code: wsproto.CodeResumeRejected, RefType: wsproto.EventUserReconnect,
	Message: "unknown or expired session, or wrong resume token"}

// rotateShared rotates the session's token in the store from token (its
// token, or its pending previous one) to r's, for c's resume, and sets
// r's number (Cluster.Rotate). It reports false when it did not rotate:
// e is the resume's answer, or nil when a resume that arrived later holds
// the session and c is closed with 4000.
func (s *Server) rotateShared(c *conn, id, token string, r *rotation) (ok bool, e *wsproto.Error) {
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	n, err := s.opts.Cluster.Rotate(ctx, id, sha256.Sum256([]byte(token)), r.hash, r.at)
	switch {
	case errors.Is(err, ErrNoSession):
		return false, errRejected
	case errors.Is(err, ErrSuperseded):
		s.lost(c, id, 0)
		return false, nil
	case err != nil:
		s.log.Error("resume: rotate the resume token", "session", id, "err", err)
		return false, errStore
	case n == 0:
		return false, errRejected
	}
	r.n = n
	return true, nil
}

// attachStored records c as the session's connection in the store, as
// holding the rotation numbered rot (0: none), and, when replace is set (a
// plain resume), closes the connection it replaces with 4000, wherever
// that one is. It reports false when a connection with a higher rotation
// attached before: c lost, and is closed. A store that does not answer
// leaves c attached (the owner still orders it, admitLocked).
func (s *Server) attachStored(c *conn, id string, rot uint64, replace bool) bool {
	cl := s.opts.Cluster
	if cl == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	prev, ok, err := cl.Attach(ctx, id, s.connRef(c), rot)
	if err != nil {
		s.log.Error("record the session's connection", "session", id, "err", err)
		return true
	}
	if !ok {
		s.lost(c, id, rot)
		return false
	}
	if replace && prev != "" && prev != s.connRef(c) {
		s.sendReplace(id, prev)
	}
	return true
}

// lost closes c, whose resume's rotation rot a later one outnumbered,
// with 4000, as if that later one had replaced it.
func (s *Server) lost(c *conn, id string, rot uint64) {
	c.logger().Info("resume lost to a later resume with the same token", "session", id, "rotation", rot)
	c.closeWith(websocket.StatusCode(wsproto.CloseSessionReplaced), "session replaced")
}

// admitLocked decides, on the session's owner, whether a resume holding
// rotation r (nil for a follow by the follow token) attaches as ref: it
// reports false when a higher rotation was admitted before (the resume
// lost, and changes nothing). Otherwise r's number becomes the session's,
// and the members the resume replaces are detached and returned for the
// caller to close (closeReplaced): every other member for a plain resume,
// the one that held the token for a follow.
func (sess *session) admitLocked(ref string, r *rotation, follow bool) ([]*member, bool) {
	if r == nil {
		return nil, true
	}
	if sess.srv.opts.Cluster == nil {
		r.n = sess.rot + 1 // the lock orders the resumes
	}
	if r.n < sess.rot {
		return nil, false
	}
	sess.rot = r.n
	if !follow {
		return sess.replaceAllLocked(ref), true
	}
	var gone []*member
	kept := sess.members[:0]
	for _, m := range sess.members {
		if m.holds && m.ref != ref {
			sess.dropHeldLocked(m)
			gone = append(gone, m)
			continue
		}
		kept = append(kept, m)
	}
	clear(sess.members[len(kept):])
	sess.members = kept
	return gone, true
}

// replaceAllLocked detaches every member but keep (a plain resume's
// connection, or nil) and returns them: the caller closes them with 4000.
func (sess *session) replaceAllLocked(keep string) []*member {
	var gone []*member
	kept := sess.members[:0]
	for _, m := range sess.members {
		if m.ref == keep {
			kept = append(kept, m)
			continue
		}
		sess.dropHeldLocked(m)
		gone = append(gone, m)
	}
	clear(sess.members[len(kept):])
	sess.members = kept
	sess.ghosts = nil // a plain resume takes the session over: the others are not coming back
	return gone
}

// rotateLocked makes r's hash the session's token hash after a resume
// with token. A resume with the current token makes it the pending
// previous one; a resume with the pending previous one leaves it so, and
// the current one, which its client never read, dies. (With a cluster the
// store's hashes are the ones that count: Cluster.Rotate.)
func (sess *session) rotateLocked(token string, r *rotation) {
	if tokenMatches(sess.tokenHash, token) {
		sess.prevHash, sess.rotAt = sess.tokenHash, r.at
	}
	sess.tokenHash = r.hash
	if r.at.After(sess.rotAt) {
		sess.rotAt = r.at
	}
}

// supersededLocked reports whether a resume with token, rotating r, is
// one its client gave up (RotationSkew): token is the pending previous
// one, and the resume that made the current token arrived more than
// RotationSkew after it. (With a cluster the store decides:
// Cluster.Rotate.)
func (sess *session) supersededLocked(token string, r *rotation) bool {
	return !tokenMatches(sess.tokenHash, token) && r.at.Add(RotationSkew).Before(sess.rotAt)
}

// commitAfterPong returns what the writer of c runs once it has written
// the system.connected that gave the client the token of hash: a ping,
// whose pong proves the client read it; then the previous token stops
// working (commitToken). sess is nil for a session another server holds.
func (s *Server) commitAfterPong(c *conn, sess *session, id string, hash [sha256.Size]byte) func() {
	return func() { c.confirmPing(func() { s.commitToken(c, sess, id, hash) }) }
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

// closeReplaced closes the members a resume replaced with 4000, here or on
// the servers they are on.
func (s *Server) closeReplaced(id string, gone []*member) {
	for _, m := range gone {
		if m.c != nil {
			m.c.closeWith(websocket.StatusCode(wsproto.CloseSessionReplaced), "session replaced")
			continue
		}
		s.sendReplace(id, m.ref)
	}
}

// sendReplace asks the server of the connection ref (NODE/CONN) to close
// it with 4000. It does not wait: the message goes through that server's
// peer queue (peers.go).
func (s *Server) sendReplace(id, ref string) {
	cl := s.opts.Cluster
	node, connID, ok := strings.Cut(ref, "/")
	if cl == nil || !ok {
		return
	}
	if node == cl.Node() {
		s.replaced(connID)
		return
	}
	b, _ := json.Marshal(message{Kind: msgReplace, From: cl.Node(), Session: id, Conn: connID})
	s.post(node, peerJob{out: b, session: id, at: time.Now()})
}

// replaced closes this server's connection connID with 4000.
func (s *Server) replaced(connID string) {
	s.mu.Lock()
	var victim *conn
	for c := range s.conns {
		if c.id == connID {
			victim = c
			break
		}
	}
	s.mu.Unlock()
	if victim != nil {
		victim.closeWith(websocket.StatusCode(wsproto.CloseSessionReplaced), "session replaced")
	}
}
