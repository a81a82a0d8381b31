package orchestrator

import (
	"context"
	"fmt"
)

// adoption is a session this server is taking from the store, once: the
// callers that find it under way wait for its outcome instead of starting
// another (or, seeing the store name this server as the owner of a
// session it does not hold yet, rejecting the resume).
type adoption struct {
	done chan struct{} // closed when sess and err are set
	sess *session
	err  error
}

// adoptShared continues here, from the store, a session whose owner there
// is from: a server that died, or this one when it holds the session no
// more — its ring gave the session up while the store stalled (lost), or
// another caller of adoptShared is adopting it right now. One adoption of
// a session runs at a time; the others wait for it (bounded by ctx) and
// share its outcome. A session this server holds already is returned as
// it is.
func (s *Server) adoptShared(ctx context.Context, id, from string) (*session, error) {
	s.mu.Lock()
	if sess := s.sessions[id]; sess != nil {
		s.mu.Unlock()
		return sess, nil
	}
	if a := s.adoptions[id]; a != nil {
		s.mu.Unlock()
		s.log.Debug("waiting for the session's adoption under way", "session", id)
		select {
		case <-a.done:
			return a.sess, a.err
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for the adoption of %s: %w", id, context.Cause(ctx))
		}
	}
	a := &adoption{done: make(chan struct{})}
	s.adoptions[id] = a
	s.mu.Unlock()

	a.sess, a.err = s.takeOver(ctx, id, from)
	s.mu.Lock()
	delete(s.adoptions, id) // after restore registered the session: no gap between the two
	s.mu.Unlock()
	close(a.done)
	return a.sess, a.err
}
