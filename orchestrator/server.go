package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/budget"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

// Models are the pipeline's three stages.
type Models struct {
	Planner    planner.Planner
	Solver     solver.Model
	Aggregator aggregator.Aggregator
}

// Server serves Baton's WebSocket endpoint. Its methods may be called
// concurrently. Close it to end every connection, session and run.
type Server struct {
	opts   Options
	models Models
	log    *slog.Logger
	budget *budget.Budget // nil: no limits
	obs    Observer

	// ctx is the parent of every run; cancelled by Close.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex // guards sessions, owned, making, conns, closed, replies, adoptions, leaseTerm
	sessions map[string]*session
	// leaseTerm counts the lapses of this server's lease that fenceOnLapse
	// has handled: an adoption starts no run in a later term than the one
	// it claimed in (fence.go).
	leaseTerm uint64
	// owned counts the sessions held and being made by owner (ownerKey),
	// making those being made: what the session caps are checked against
	// (sessioncap.go).
	owned  map[string]int
	making int
	conns  map[*conn]struct{}
	closed bool
	// draining is set once by Drain (under mu); read anywhere (drain.go).
	draining atomic.Bool
	// drainDeadline is the deadline of Drain's ctx (UnixNano; 0: none),
	// set before draining.
	drainDeadline atomic.Int64
	// runEnded wakes Drain when a run ends while draining (cap 1).
	runEnded chan struct{}

	// replies are the forwarded commands waiting for their owner's answer,
	// by message id (proxy.go). Guarded by mu.
	replies map[uint64]chan message
	nextMsg atomic.Uint64
	// adoptions are the sessions this server is adopting from the store,
	// by id (adopt.go). Guarded by mu.
	adoptions map[string]*adoption
	// adoptSlot holds a token per takeover under way (MaxTakeovers);
	// adoptWaiting counts those waiting for one, adoptGap is a moving
	// average of the time between takeovers ending, in ns: what the retry
	// hint of a resume refused for want of a slot is made of (adopt.go).
	adoptSlot    chan struct{}
	adoptWaiting atomic.Int64
	adoptLast    atomic.Int64 // when the latest takeover ended (UnixNano)
	adoptGap     atomic.Int64
	// limits counts open connections (and upgrades under way) by address, for
	// the connection limits (limits.go).
	limits limits

	connWG    sync.WaitGroup // connection handlers
	runWG     sync.WaitGroup // pipeline runs
	janitorWG sync.WaitGroup // the expiry sweeper, and with a cluster the orphan hunter
	clusterWG sync.WaitGroup // with a cluster: the receiver of other servers' messages
	peers     peers          // with a cluster: their queues and senders (peers.go)
	// janitors is done once Close has begun to stop the janitors: their
	// loops end, and so do the store calls they have in flight.
	janitors    context.Context
	endJanitors context.CancelFunc
	// final is the context of the store calls a closing server still
	// makes after ctx ended (a connection's detach, a run's end): it
	// ends when Close's ctx does, so that no store keeps Close waiting
	// past it.
	final    context.Context
	endFinal context.CancelFunc
}

// ErrServerClosed is the cause of runs cancelled by Close.
var ErrServerClosed = errors.New("orchestrator: server closed")

// New returns a Server running pipelines on models.
func New(models Models, opts *Options) (*Server, error) {
	if models.Planner == nil || models.Solver == nil || models.Aggregator == nil {
		return nil, fmt.Errorf("new orchestrator: a planner, a solver and an aggregator are required")
	}
	o := opts.withDefaults()
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Server{
		opts:      o,
		models:    models,
		log:       o.Logger,
		budget:    budget.New(o.Budget, nil),
		obs:       o.Observer,
		ctx:       ctx,
		cancel:    cancel,
		sessions:  make(map[string]*session),
		owned:     make(map[string]int),
		conns:     make(map[*conn]struct{}),
		replies:   make(map[uint64]chan message),
		adoptions: make(map[string]*adoption),
		adoptSlot: make(chan struct{}, o.MaxTakeovers),
		runEnded:  make(chan struct{}, 1),
	}
	s.janitors, s.endJanitors = context.WithCancel(context.Background())
	s.final, s.endFinal = context.WithCancel(context.Background())
	s.janitorWG.Add(1)
	go s.sweep()
	if o.Cluster != nil {
		s.janitorWG.Add(1)
		go s.adoptOrphans()
		if lw, ok := o.Cluster.(LeaseWatcher); ok {
			s.janitorWG.Add(1)
			go s.fenceOnLapse(lw.Lapses())
		}
		s.clusterWG.Add(1)
		go s.listen()
	}
	return s, nil
}

// Sessions returns the number of live sessions.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Connections returns the number of open WebSocket connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// ServeHTTP upgrades the request to a WebSocket and returns: a goroutine
// of the connection's own (serve) reads it until it ends, so that
// net/http's connection, its buffers and the request are not kept for the
// connection's life.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed || s.draining.Load() {
		s.mu.Unlock()
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	s.connWG.Add(1)
	s.mu.Unlock()
	adm, ok := s.admit(w, r) // 429 beyond the connections per address
	if !ok {
		s.connWG.Done()
		return
	}
	c, token, follow := s.upgrade(w, r, adm)
	if c == nil {
		adm.done()
		s.connWG.Done()
		return
	}
	go func() {
		defer s.connWG.Done()
		defer adm.done()
		c.serve(token, follow)
	}()
}

// upgrade authenticates the request, upgrades it and gives the connection
// a fresh session, a provisional one beyond the session caps; c is nil
// when it fails, the client told why.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, adm *admission) (c *conn, token, follow string) {
	id, ok := s.authenticate(w, r)
	if !ok {
		return nil, "", ""
	}
	up := &upgrader{ResponseWriter: w, timeout: s.opts.WriteTimeout}
	ws, err := websocket.Accept(up, r, &websocket.AcceptOptions{
		// Selected when offered: a browser that passes its token as a
		// subprotocol fails the handshake unless one it offered is.
		Subprotocols:    []string{auth.Subprotocol},
		OriginPatterns:  s.opts.AllowedOrigins,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		s.log.Info("websocket handshake refused", "remote", r.RemoteAddr, "err", err)
		return nil, "", ""
	}
	ws.SetReadLimit(s.opts.ReadLimit)

	sess, token, follow := s.newSessionFrom(id.Subject, adm.ip)
	c = newConn(s, ws, up.conn, id.Subject)
	c.expires = id.Expires
	c.attach(sess)
	s.mu.Lock()
	if s.closed || s.draining.Load() {
		s.mu.Unlock()
		ws.Close(websocket.StatusServiceRestart, "server restarting")
		s.dropSession(sess)
		return nil, "", ""
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.obs.ConnOpened()
	c.logger().Info("connection opened", "remote", r.RemoteAddr)
	return c, token, follow
}

// serve attaches c to its fresh session and reads it until it ends.
func (c *conn) serve(token, follow string) {
	s := c.srv
	opened := time.Now()
	c.startPings()
	c.startExpiry()
	c.sess.attachFresh(c, token, follow) // in the store once a frame needs it (record.go)
	err := c.readLoop()

	if c.remote != nil {
		c.remote.stop()
	}
	c.stop()
	c.sess.detach(c.id)
	if c.sess.provisional && c.remote == nil {
		s.dropSession(c.sess) // it never resumed: nothing else holds it
	} else {
		s.detachShared(c)
	}
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	end, status, kind := c.ended(err)
	s.obs.ConnClosed(kind)
	// The log names the session the connection ended on (a resume moves it).
	c.logger().Info("connection closed", "duration_ms", time.Since(opened).Milliseconds(),
		"end", end, "close_status", int(status), "frames", c.frames)
}

// authenticate runs Options.Authenticate on a handshake and returns the
// identity; when it fails, the request is answered 401 with a Bearer
// challenge (RFC 6750 §3) and ok is false. The log says why, never with
// the credential.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (id auth.Identity, ok bool) {
	if s.opts.Authenticate == nil {
		return auth.Identity{}, true
	}
	id, err := s.opts.Authenticate(r)
	if err == nil {
		return id, true
	}
	challenge, msg := `Bearer realm="baton"`, "authentication required: send a bearer token"
	if !errors.Is(err, auth.ErrNoCredential) {
		challenge, msg = `Bearer realm="baton", error="invalid_token"`, "invalid or expired credential"
	}
	s.log.Info("websocket handshake unauthenticated", "remote", r.RemoteAddr, "err", err)
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, msg, http.StatusUnauthorized)
	return auth.Identity{}, false
}

// Close closes every connection with 1012, then cancels every run and
// session, and waits for all their goroutines. Drain first to let runs
// finish, or, with a Cluster, hand them over. ctx bounds the whole wait,
// whatever the store does: if it ends first, connections still closing
// are dropped without a handshake, the store calls in flight are
// cancelled, and Close returns — with ctx's error — without waiting for
// runs whose model or tool has not returned since it was cancelled, nor
// for rings still flushing to a store that does not answer; those end on
// their own (the store's flush timeout), their events going nowhere.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	stop := context.AfterFunc(ctx, s.endFinal)
	defer func() {
		stop()
		s.endFinal()
	}()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	for _, c := range conns {
		c.closeWith(websocket.StatusServiceRestart, "server restarting")
	}
	var errs []error
	if err := waitCtx(ctx, &s.connWG); err != nil {
		errs = append(errs, fmt.Errorf("close connections: %w", err))
		for _, c := range conns {
			c.ws.CloseNow()
		}
		s.connWG.Wait() // CloseNow ends every read at once
	}

	// The janitors stop whatever the store does: a sweep of thousands of
	// expired sessions from an unreachable Redis would otherwise take a
	// store timeout per session.
	s.endJanitors()
	s.janitorWG.Wait()
	if s.opts.Cluster != nil {
		// Seal every session before its run stops, so that nothing the
		// run does while stopping reaches the store: it stays as the last
		// checkpoint left it, to be continued by another server.
		if err := s.freeSessions(ctx); err != nil {
			errs = append(errs, fmt.Errorf("seal the sessions: %w", err))
		}
		if err := s.opts.Cluster.Leave(ctx); err != nil {
			errs = append(errs, fmt.Errorf("leave the cluster: %w", err))
		}
	}
	s.cancel(ErrServerClosed)
	s.clusterWG.Wait()
	s.closePeers()
	if err := waitCtx(ctx, &s.runWG); err != nil {
		errs = append(errs, fmt.Errorf("close runs: %w", err))
	}
	if err := s.freeSessions(ctx); err != nil {
		errs = append(errs, fmt.Errorf("free the sessions: %w", err))
	}
	return errors.Join(errs...)
}

// freeSessions closes and releases every session, all at once, each
// ring's flush in parallel (with a store that does not answer, each
// waits the store's flush timeout), waited for until ctx ends.
func (s *Server) freeSessions(ctx context.Context) error {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	clear(s.sessions)
	clear(s.owned)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, sess := range sessions {
		if sess.markClosed() {
			wg.Go(sess.release)
		}
	}
	return waitCtx(ctx, &wg)
}

// waitCtx waits for wg, or until ctx is done and returns its error then.
// The goroutine that waits ends with wg's work, also when ctx ended first.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sweep expires sessions that have had no connection for their TTL:
// SessionTTL, or IdleSessionTTL for a session that never sequenced an
// event.
func (s *Server) sweep() {
	defer s.janitorWG.Done()
	every := min(max(s.opts.IdleSessionTTL/8, 5*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.janitors.Done():
			return
		case now := <-t.C:
			if s.opts.Cluster != nil {
				s.recordIdle(now)
			}
			var expired []*session
			s.mu.Lock()
			for _, sess := range s.sessions {
				if at := sess.detachedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= sess.ttl() {
					expired = append(expired, sess)
				}
			}
			s.mu.Unlock()
			for _, sess := range expired {
				if s.janitors.Err() != nil {
					return // the rest are swept by whoever holds them next
				}
				if s.opts.Cluster != nil && sess.unrecorded.Load() {
					sess.expire(now) // the store knows nothing of it (record.go)
					continue
				}
				if s.opts.Cluster != nil {
					// Attached elsewhere, or left there later than here: its
					// TTL runs from then (CompareAndSwap: a resume here may
					// have attached it meanwhile).
					at := sess.detachedAt.Load()
					if left := s.leftShared(sess.id, now); !left.IsZero() && at != 0 && left.UnixNano() > at {
						sess.detachedAt.CompareAndSwap(at, left.UnixNano())
						continue
					}
				}
				if sess.expire(now) && s.opts.Cluster != nil {
					s.forgetShared(sess.id)
				}
			}
		}
	}
}
