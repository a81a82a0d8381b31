package orchestrator

import (
	"errors"
)

// LeaseWatcher is a Cluster that tells when this server's own lease may
// have lapsed (redisstore's does): Redis stalled or was cut off from this
// server long enough that the others may take its runs over. The store
// fences their writes once they have, but not what the runs do outside
// it — tool calls — so the server stops them itself (fenceOnLapse).
type LeaseWatcher interface {
	// Lapses receives a value each time the lease may have lapsed.
	Lapses() <-chan struct{}
}

// errLeaseLapsed is why a server gives its sessions up when its lease may
// have lapsed.
var errLeaseLapsed = errors.New("this server's lease in the store may have lapsed: another server may take its runs over")

// fenceOnLapse gives every session this server holds up each time its
// lease may have lapsed, as a ring that can no longer write does
// (session.lost): each run stops, each connection closes with 1012, and
// the client's resume finds the session where it lives now — on the
// server that took it over, or here again, adopted from the store, when
// none did. A run that went on here while another server continues it
// would run its tools twice.
func (s *Server) fenceOnLapse(lapses <-chan struct{}) {
	defer s.janitorWG.Done()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-lapses:
			s.mu.Lock()
			sessions := make([]*session, 0, len(s.sessions))
			for _, sess := range s.sessions {
				sessions = append(sessions, sess)
			}
			s.mu.Unlock()
			s.log.Warn("lease lapsed: giving every session up", "sessions", len(sessions))
			for _, sess := range sessions {
				sess.lost(errLeaseLapsed)
			}
		}
	}
}
