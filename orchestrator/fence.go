package orchestrator

import (
	"errors"
	"fmt"
)

// Two fences keep a run from going on in two places when this server's
// lease lapses (docs/scaling.md, Fencing):
//
//   - This server's own, for what it holds or is about to start: when its
//     lease may have lapsed, fenceOnLapse stops every run it holds, and no
//     adoption starts a run unless the lease has been held all along
//     since before its claim (currentTerm, termHoldsLocked). It covers the
//     time between the lapse and another server's claim, while the store
//     still takes this server's writes — and tool calls, which the store
//     cannot stop.
//   - The store's, once another server has claimed the session: its owner
//     check refuses every write of this server's ring, and the ring is
//     lost. The agent loop runs a tool only once the store holds its call
//     (journal.go, Settled), so a run that lost its ring runs no tool.

// LeaseWatcher is a Cluster that tells when this server's own lease may
// have lapsed (redisstore's does): Redis stalled or was cut off from this
// server long enough that the others may take its runs over. The store
// fences their writes once they have, but not what the runs do outside
// it — tool calls — so the server stops them itself (fenceOnLapse).
type LeaseWatcher interface {
	// Lapses receives a value each time the lease may have lapsed.
	Lapses() <-chan struct{}
	// LeaseHeld reports whether the lease is held for sure now: false
	// from when a lapse is due to be told until a renewal succeeds
	// again. Called with the server's lock held: it must not block.
	LeaseHeld() bool
}

// errLeaseLapsed is why a server gives its sessions up when its lease may
// have lapsed, and why an adoption is abandoned.
var errLeaseLapsed = errors.New("this server's lease in the store may have lapsed: another server may take its runs over")

// fenceOnLapse gives every session this server holds up each time its
// lease may have lapsed, as a ring that can no longer write does
// (session.lost): each run stops, each connection closes with 1012, and
// the client's resume finds the session where it lives now — on the
// server that took it over, or here again, adopted from the store, when
// none did. A run that went on here while another server continues it
// would run its tools twice. The lease's term ends in the same step
// (under s.mu), so that an adoption under way either registered its
// session before — and it is given up here — or finds the term over and
// abandons it (termHoldsLocked).
func (s *Server) fenceOnLapse(lapses <-chan struct{}) {
	defer s.janitorWG.Done()
	for {
		select {
		case <-s.janitors.Done():
			return
		case <-lapses:
			s.mu.Lock()
			s.leaseTerm++
			sessions := make([]*session, 0, len(s.sessions))
			for _, sess := range s.sessions {
				// One the store knows nothing of no other server can
				// take (record.go), and it has no run to stop.
				if !sess.unrecorded.Load() {
					sessions = append(sessions, sess)
				}
			}
			s.mu.Unlock()
			s.log.Warn("lease lapsed: giving every session up", "sessions", len(sessions))
			for _, sess := range sessions {
				sess.lost(errLeaseLapsed)
			}
		}
	}
}

// currentTerm is the lease's term an adoption begins in, before its
// claim: it fails with errLeaseLapsed when the lease is not held now —
// a claim then would make this server the owner of a session that
// another server may claim from it at once.
func (s *Server) currentTerm() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.leaseHeldLocked(); err != nil {
		return 0, err
	}
	return s.leaseTerm, nil
}

// termHoldsLocked reports, under s.mu, whether an adoption that began in term
// may register its session and start its run: the lease has not lapsed
// since (the term is the same: a lapse that healed meanwhile still ends
// it, as another server may have claimed the session while it lasted)
// and is held now (a lapse due and not handled yet). Else it returns
// errLeaseLapsed, and the adoption gives the session up unstarted.
func (s *Server) termHoldsLocked(term uint64) error {
	if s.leaseTerm != term {
		return fmt.Errorf("the lease lapsed during the adoption: %w", errLeaseLapsed)
	}
	return s.leaseHeldLocked()
}

// leaseHeldLocked fails with errLeaseLapsed when the Cluster tells lapses
// and says the lease is not held now.
func (s *Server) leaseHeldLocked() error {
	if lw, ok := s.opts.Cluster.(LeaseWatcher); ok && !lw.LeaseHeld() {
		return fmt.Errorf("the lease is not held: %w", errLeaseLapsed)
	}
	return nil
}
