package orchestrator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// Following (§3.6 of docs/protocol.md): a session may have several
// connections attached at once, each a member with its own cursor — what
// it was sent, its held resync answer, what it acked. Every event goes to
// every member; the ring is pruned only to the lowest ack of them all, so
// no member's resume finds the events it has not acked gone for another's
// ack. A member that falls behind is a slow client like any other: its
// queue overflows, it is closed with 1013, and its resume replays or
// resyncs it alone.
//
// Members on other servers of a cluster (a follower served from the store
// there, proxy.go) are known to the owner by their reference, NODE/CONN,
// with their acks: registered when they attach (msgAttach, peers.go),
// updated by their forwarded acks, dropped when they leave (msgDetach).
// Which resume replaces which members is rotation.go's to decide.

// member is a connection attached to a session.
type member struct {
	c *conn // nil for a member on another server
	// ref names the member: its connection's id here, NODE/CONN on
	// another server.
	ref string
	// sent is the latest seq sent to c, with a durable ring.
	sent uint64
	// held is c's resync answer while the store has not caught up with its
	// snapshot (held.go); nil when none.
	held *heldAnswer
	// acked is the highest seq the member acked (0 until it acks).
	acked uint64
	// holds is set when the member holds the session's resume token:
	// the connection that created the session, or one that resumed with
	// the token, which rotated it (rotation.go).
	holds bool
}

// memberLocked returns the member named ref, nil when none.
func (sess *session) memberLocked(ref string) *member {
	for _, m := range sess.members {
		if m.ref == ref {
			return m
		}
	}
	return nil
}

// removeLocked forgets the member named ref, reporting whether there was
// one. A member that acked something leaves its hold on the ring behind
// (a ghost) when dropped is set: a device that drops resumes soon, and
// must find what it had not acked still there, though the others acked
// it meanwhile. Otherwise the ring may then be pruned further.
func (sess *session) removeLocked(ref string, dropped bool) bool {
	for i, m := range sess.members {
		if m.ref == ref {
			sess.dropHeldLocked(m)
			sess.members = append(sess.members[:i], sess.members[i+1:]...)
			if dropped && m.acked > 0 {
				sess.ghosts = append(sess.ghosts, m.acked)
				if len(sess.ghosts) > maxGhosts {
					sess.ghosts = slices.Delete(sess.ghosts, 0, 1) // the oldest lets go
				}
			}
			sess.pruneLocked()
			return true
		}
	}
	return false
}

// maxGhosts bounds the holds that dropped members leave: beyond it the
// oldest lets go. (The ring's capacity bounds what they hold anyway.)
const maxGhosts = 16

// claimGhostLocked takes away the hold a dropped member left that a
// resume from lastSeq succeeds: the highest at or below lastSeq. The new
// member holds the ring with its own acks from now on.
func (sess *session) claimGhostLocked(lastSeq uint64) {
	best := -1
	for i, g := range sess.ghosts {
		if g <= lastSeq && (best < 0 || g > sess.ghosts[best]) {
			best = i
		}
	}
	if best >= 0 {
		sess.ghosts = slices.Delete(sess.ghosts, best, best+1)
	}
}

// followLimitLocked is the answer to a follow the cap refuses, nil when
// one more member fits.
func (sess *session) followLimitLocked() *wsproto.Error {
	if max := sess.srv.opts.MaxFollowers; max > 0 && len(sess.members) >= max {
		return errFollowLimit(max)
	}
	return nil
}

// followedLocked records that a connection followed the session.
func (sess *session) followedLocked() {
	if !sess.followed {
		sess.followed = true
		sess.changedLocked()
	}
}

func errFollowLimit(max int) *wsproto.Error {
	return &wsproto.Error{Code: wsproto.CodeFollowLimit, RefType: wsproto.EventUserReconnect,
		Message: fmt.Sprintf("the session has %d connections attached, the most it may have; close one, or resume without follow to replace them", max)}
}

// pruneLocked acks to the ring the lowest seq every member acked: what no
// member may still need for a replay. With no member the ring keeps what
// it has (the next resume may need it).
func (sess *session) pruneLocked() {
	if len(sess.members) == 0 || sess.closed {
		return
	}
	low := sess.members[0].acked
	for _, m := range sess.members[1:] {
		low = min(low, m.acked)
	}
	for _, g := range sess.ghosts {
		low = min(low, g)
	}
	if low <= sess.pruned {
		return
	}
	if err := sess.ring.Ack(sess.ctx, low); err != nil {
		sess.srv.log.Error("prune the ring", "session", sess.id, "err", err)
		return
	}
	sess.pruned = low
	if sess.dur != nil {
		sess.dur.ring.Commit() // an ack alone is a unit: the store trims too
	}
}

// ack records that the member named ref has applied every event up to
// lastSeq (§3.2), and prunes the ring to what every member has. An ack
// from a member on another server that the session does not know (it
// attached before this server took the session over) makes it a member.
func (sess *session) ack(ref string, lastSeq uint64) *wsproto.Error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closed {
		return &wsproto.Error{Code: wsproto.CodeInternal, RefType: wsproto.EventUserAck, Message: "could not apply the ack"}
	}
	last, _, err := sess.ring.Last(sess.ctx)
	if err != nil {
		sess.srv.log.Error("ack", "session", sess.id, "err", err)
		return &wsproto.Error{Code: wsproto.CodeInternal, RefType: wsproto.EventUserAck, Message: "could not apply the ack"}
	}
	if lastSeq > last {
		return &wsproto.Error{Code: wsproto.CodeInvalidAck, RefType: wsproto.EventUserAck, Message: "last_seq is past the latest event"}
	}
	m := sess.memberLocked(ref)
	if m == nil {
		if !strings.Contains(ref, "/") {
			return nil // a local connection that is no longer attached
		}
		m = &member{ref: ref}
		sess.members = append(sess.members, m)
		sess.detachedAt.Store(0)
	}
	m.acked = max(m.acked, lastSeq)
	sess.pruneLocked()
	return nil
}

// followHashOf is the hash of a session's follow token.
func followHashOf(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }

// keepAttached records one of the session's remaining members as its
// connection in the store after another left, which may have marked the
// session detached there: a session stays while anyone follows it.
func (s *Server) keepAttached(sess *session) {
	cl := s.opts.Cluster
	if cl == nil {
		return
	}
	sess.mu.Lock()
	ref := ""
	if len(sess.members) > 0 {
		m := sess.members[0]
		ref = m.ref
		if m.c != nil {
			ref = s.connRef(m.c)
		}
	}
	sess.mu.Unlock()
	if ref == "" {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	if _, _, err := cl.Attach(ctx, sess.id, ref, 0); err != nil {
		s.log.Error("record the session's connection", "session", sess.id, "err", err)
	}
}

// dropDeadFollowers forgets the members of sessions here that are on
// servers no longer alive: their connections ended with their server,
// which could not say so (msgDetach), and they would otherwise hold the
// ring back and keep the session from expiring for ever.
func (s *Server) dropDeadFollowers(ctx context.Context) {
	cl := s.opts.Cluster
	s.mu.Lock()
	sessions := s.sessionList()
	s.mu.Unlock()
	alive := map[string]bool{cl.Node(): true}
	for _, sess := range sessions {
		sess.mu.Lock()
		var nodes []string
		for _, m := range sess.members {
			if node, _, ok := strings.Cut(m.ref, "/"); ok && m.c == nil {
				nodes = append(nodes, node)
			}
		}
		sess.mu.Unlock()
		var dead []string
		for _, node := range nodes {
			ok, known := alive[node]
			if !known {
				up, err := cl.Alive(ctx, node)
				if err != nil {
					return // the store does not answer: try at the next turn
				}
				alive[node], ok = up, up
			}
			if !ok {
				dead = append(dead, node)
			}
		}
		if len(dead) == 0 {
			continue
		}
		sess.mu.Lock()
		for _, m := range slices.Clone(sess.members) {
			if node, _, _ := strings.Cut(m.ref, "/"); m.c == nil && slices.Contains(dead, node) {
				sess.removeLocked(m.ref, false) // its server died with it
			}
		}
		if len(sess.members) == 0 && sess.detachedAt.Load() == 0 {
			sess.detachedAt.Store(time.Now().UnixNano())
		}
		sess.mu.Unlock()
	}
}
