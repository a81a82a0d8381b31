package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// A resume of a session this server does not hold, with a Cluster: the
// decision between proxying it to its live owner (proxy.go) and taking it
// over here (adopt.go), and the bound on every exchange with the store.

// storeTimeout bounds one exchange with the cluster's store or another
// server: a resume's lookups, a forwarded command and its reply.
const storeTimeout = 5 * time.Second

// resumeShared resumes a session this server does not hold: it proxies to
// the session's owner when that one lives, or claims the session and
// continues it here when it does not, or when the owner is this server,
// which gave the session up or is adopting it (docs/scaling.md). held
// says it took the session over: the caller resumes it as one it holds.
// Otherwise e is the resume's answer (nil: proxied).
func (s *Server) resumeShared(c *conn, req *wsproto.Reconnect) (held bool, e *wsproto.Error) {
	cl := s.opts.Cluster
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	for try := 0; ; try++ {
		rec, err := cl.Lookup(ctx, req.SessionID)
		if errors.Is(err, ErrNoSession) {
			if req.Follow && try == 0 && waitRecorded(ctx) {
				continue // a session just made on another server, not recorded yet (record.go)
			}
			return false, errRejected
		}
		if err != nil {
			s.log.Error("resume: look the session up", "session", req.SessionID, "err", err)
			return false, errStore
		}
		stored := &session{tokenHash: rec.TokenHash, prevHash: rec.PrevTokenHash}
		byFollow := req.Follow && rec.FollowHash != noHash && tokenMatches(rec.FollowHash, req.ResumeToken)
		if (!byFollow && !stored.tokenAccepted(req.ResumeToken)) || rec.Subject != c.subject {
			return false, errRejected // another subject's session is as unknown as a wrong token
		}
		if expiredIn(rec, time.Now(), s.opts.SessionTTL) {
			// Its client left longer than SessionTTL ago; its owner, if it
			// lives, frees it at its next sweep.
			return false, errRejected
		}
		// Ours, yet not in memory: the ring gave the session up while the
		// store stalled (lost), or this server is adopting it right now.
		// Either way it is adopted (or the adoption under way waited for),
		// like a dead server's.
		if rec.Owner != cl.Node() {
			alive, err := cl.Alive(ctx, rec.Owner)
			if err != nil {
				s.log.Error("resume: check the owner", "session", req.SessionID, "owner", rec.Owner, "err", err)
				return false, errStore
			}
			if alive {
				return false, s.proxy(ctx, c, req, rec.Owner, byFollow)
			}
		}
		// The takeover's own deadline: it may wait TakeoverWait for a slot
		// before its exchanges with the store.
		actx, acancel := context.WithTimeout(s.ctx, s.opts.TakeoverWait+storeTimeout)
		_, err = s.adoptShared(actx, req.SessionID, rec.Owner)
		acancel()
		if err != nil {
			if try == 0 && errors.Is(err, errClaimLost) {
				continue // another server took it first: it is the owner now
			}
			if errors.Is(err, ErrNoSession) {
				return false, errRejected // gone, or expired, as it was taken over
			}
			if errors.Is(err, errAdoptBusy) {
				s.log.Debug("resume: no takeover slot; answered busy", "session", req.SessionID)
				s.present(req.SessionID, rec)
				return false, s.adoptBusy()
			}
			s.log.Error("resume: take the session over", "session", req.SessionID, "err", err)
			return false, errStore
		}
		return true, nil // held here now: resume goes on with it
	}
}

var errStore = &wsproto.Error{Code: wsproto.CodeInternal, RefType: wsproto.EventUserReconnect,
	Message: "the session store did not answer; resume again"}

// present tells the store that the client of the session rec is there,
// though its resume was answered busy, once its departure (Detached) is
// an eighth of SessionTTL old: a storm that keeps a client refused for
// minutes must not let its session expire meanwhile (a 10,000-session
// storm on a loaded machine once lost 1,554 sessions so, their clients
// resuming all along). Younger departures cost the store nothing here.
func (s *Server) present(id string, rec Record) {
	if rec.Detached.IsZero() || time.Since(rec.Detached) < s.opts.SessionTTL/8 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	if err := s.opts.Cluster.Present(ctx, id); err != nil {
		s.log.Error("resume: record the client's presence", "session", id, "err", err)
	}
}
