package orchestrator

import (
	"context"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// When a connection's fresh session reaches the cluster's store: at the
// connection's first frame that is not a resume, or once the connection
// has been open recordAfter without sending any frame — not at the
// upgrade.
//
// Whether a connection resumes a session is known only from its first
// frame (§3.5), and in a resume storm nearly every connection does: a
// fresh session written to the store at the upgrade would cost each
// attempt a write then, a detach when it closes and a delete at its
// expiry — for a session that nothing will ever use, and ahead of the
// takeovers that need the store's round trips. So a fresh session is
// unrecorded until something needs it in the store: the connection's
// first other frame (dispatch), a resume or follow of the session on
// this server (resumeHeld), or a connection that stays silent — a page
// showing its "open on another device" link, which another server must
// find in the store (recordIdle). Until then it is this server's alone:
// its ring writes nothing (nothing is sequenced before a run starts), the
// store has no key of it, and everything that would tell the store about
// it — the connection's detach, the sweeper's delete, the touch, a lapse
// of the lease — leaves it out. Another server asked to resume it finds
// no session, and the client loses nothing: a session that never
// sequenced an event brings nothing back (§4, --idle-session-ttl).

// recordAfter is how long a connection that sent nothing keeps its fresh
// session unrecorded.
const recordAfter = time.Second

// recordedWithin is the latest a silent connection's fresh session is in
// the store: recordAfter, and one sweep (at most a second).
const recordedWithin = recordAfter + time.Second

// waitRecorded waits recordedWithin, reporting false if ctx ends first: a
// follow of a session the store does not hold is looked up again after
// it, as the session may be one just made on another server, its device
// showing the link another device followed (resumeShared). A plain resume
// is not: its client moved, and the session it made there brings nothing
// back.
func waitRecorded(ctx context.Context) bool {
	t := time.NewTimer(recordedWithin)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// record writes the unrecorded session sess to the store, with the
// connection that holds its token as its connection, once: the callers
// that come while it is written wait for it. It answers internal, the
// store having taken nothing, when the store does not answer; what
// needed the session there is then not applied.
func (s *Server) record(ctx context.Context, sess *session) *wsproto.Error {
	if !sess.unrecorded.Load() {
		return nil
	}
	sess.recordMu.Lock()
	defer sess.recordMu.Unlock()
	if !sess.unrecorded.Load() {
		return nil
	}
	sess.mu.Lock()
	if sess.closed { // freed meanwhile, unrecorded: its freeing told the store nothing
		sess.mu.Unlock()
		return nil
	}
	conn := ""
	for _, m := range sess.members {
		if m.holds && m.c != nil {
			conn = s.connRef(m.c)
			break
		}
	}
	sess.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	err := s.opts.Cluster.Create(ctx, sess.id, Record{TokenHash: sess.tokenHash, FollowHash: sess.followHash,
		Subject: sess.subject, Owner: s.opts.Cluster.Node(), Conn: conn})
	if err != nil {
		s.log.Error("record the session in the store", "session", sess.id, "err", err)
		return &wsproto.Error{Code: wsproto.CodeInternal, // its own: the caller names the frame (RefType)
			Message: "the session store did not answer: the frame was not applied; send it again"}
	}
	sess.unrecorded.Store(false)
	return nil
}

// recorded reports whether sess is in the store, waiting for a record
// under way: false for a session that never was (the store knows nothing
// of it, and is not told).
func (sess *session) recorded() bool {
	if !sess.unrecorded.Load() {
		return true
	}
	sess.recordMu.Lock()
	defer sess.recordMu.Unlock()
	return !sess.unrecorded.Load()
}

// recordIdle records the fresh sessions, made before now less
// recordAfter, whose connection is open and has sent no frame: not one
// whose connection closed (a connect/close flood leaves nothing in the
// store), nor one whose first frame was a resume — one refused (busy,
// rejected) leaves its connection on the fresh session until the client
// closes it or uses it, and only a use records it. On the sweeper.
func (s *Server) recordIdle(now time.Time) {
	var idle []*session
	s.mu.Lock()
	for _, sess := range s.sessions {
		if sess.unrecorded.Load() && !sess.resuming.Load() && sess.detachedAt.Load() == 0 && now.Sub(sess.made) >= recordAfter {
			idle = append(idle, sess)
		}
	}
	s.mu.Unlock()
	for _, sess := range idle {
		if s.janitors.Err() != nil {
			return
		}
		s.record(s.janitors, sess) // failed: again at the next sweep
	}
}
