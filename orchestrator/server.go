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
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

// Options configure a Server. A nil *Options means all defaults; New never
// modifies the caller's struct.
type Options struct {
	// BufferSize is each session's ring capacity. Defaults to 1000.
	BufferSize int
	// SessionTTL is how long a session outlives its last connection.
	// Defaults to 5m.
	SessionTTL time.Duration
	// IdleSessionTTL is how long a session that has never sequenced an
	// event (no run was started in it) outlives its last connection:
	// resuming it gains nothing over a fresh session, so it is not kept
	// for SessionTTL. Defaults to 10s, and is never more than SessionTTL.
	IdleSessionTTL time.Duration
	// ConfirmTimeout is how long a confirmation waits for its answer.
	// Defaults to 5m.
	ConfirmTimeout time.Duration
	// MaxParallel is how many tasks of a run may execute at once. Defaults to 4.
	MaxParallel int
	// MaxRetries is how many retries follow a failed first execution of a
	// task or of the planning, per retry budget: the events' max_attempts
	// (the contract's name for it). Defaults to 3.
	MaxRetries int
	// RetryBase is the first backoff delay. Defaults to 1s.
	RetryBase time.Duration
	// TaskTimeout bounds one execution of a task; longer fails as a
	// timeout. Defaults to 2m.
	TaskTimeout time.Duration
	// MaxTasks is the longest task list accepted, also after an
	// adjustment. Defaults to 50.
	MaxTasks int
	// Adaptive makes every plan-mode run adaptive (§11), as
	// metadata.adaptive does for one. Defaults to false.
	Adaptive bool
	// DefaultMode is the mode of a user.message that names none:
	// wsproto.ModePlan or wsproto.ModeChat. Defaults to ModePlan.
	DefaultMode string
	// ReadLimit is the largest client frame in bytes; a larger one closes
	// the connection with 1009. Defaults to 65536.
	ReadLimit int64
	// AllowedOrigins are host patterns (path.Match syntax) accepted in the
	// Origin header besides the request's own host. Defaults to none.
	AllowedOrigins []string
	// PingInterval is how often the server pings. Defaults to 25s.
	PingInterval time.Duration
	// PongTimeout is how long a ping waits for its pong, and how long one
	// write may take. Defaults to 10s.
	PongTimeout time.Duration
	// WriteTimeout bounds the writing of one batch of queued frames (all
	// that were waiting when the writer woke). Defaults to PongTimeout.
	WriteTimeout time.Duration
	// SendQueue is the most frames a connection may have waiting to be
	// written before it is closed as too slow (1013). Defaults to
	// BufferSize + 64, so a full-ring replay always fits.
	SendQueue int
	// RateLimit is how many frames a second a connection may send, on
	// average; RateBurst how many at once. A frame over the limit is not
	// applied (rate_limited), and more than RateBurst refused within 10 s
	// close the connection with 1008. RateLimit defaults to 0: no limit;
	// RateBurst to twice RateLimit.
	RateLimit int
	RateBurst int
	// MaxConnsPerIP is the most connections one client address (an IPv6
	// /64: addrKey) may have open; more are refused with 429 before the
	// upgrade. Leave it 0 behind an edge.Listener that counts every TCP
	// connection (cmd/baton does): a WebSocket would count twice, and the
	// in-process connections of agui and myagent, which carry their
	// client's address, once more besides their client's own. Defaults
	// to 0: no limit.
	MaxConnsPerIP int
	// MaxSessions is the most sessions this server holds;
	// MaxSessionsPerSubject the most one authenticated subject holds on
	// it, and MaxSessionsPerIP the most the anonymous clients of one
	// address (an IPv6 /64) hold on it. A connection beyond one of them is
	// upgraded with a provisional session that is not counted and is good
	// only for resuming a session (sessioncap.go): any other first frame,
	// or a resume that fails, closes it with 4029. A resume is never
	// refused for a cap, nor is a session taken over from a failed
	// server. All default to 0: no limit.
	MaxSessions           int
	MaxSessionsPerSubject int
	MaxSessionsPerIP      int
	// MaxFollowers is the most connections one session may have attached
	// at once, on all servers (§3.6): a follow beyond it is refused with
	// follow_limit and changes nothing. Defaults to 0: no limit.
	MaxFollowers int
	// MaxFrameBytes caps the frames of sequenced events: a longer one has
	// its texts cut to fit (wsproto.FitFrame). Defaults to 0: no cap.
	MaxFrameBytes int
	// MaxResultBytes bounds each text a model returns — a task's result,
	// the plan's summary and task texts, the final answer and summary —
	// where it enters the run: a longer one is cut and marked truncated,
	// before the state, the ring or a checkpoint holds it. Defaults to
	// solver.DefaultMaxResultBytes (128 KiB).
	MaxResultBytes int
	// HistoryBudget bounds the conversation before a run that its models
	// see, in bytes of earlier requests and answers: the oldest runs are
	// left out first, never the current request (history.go). Defaults to
	// DefaultHistoryBudget (16 KiB); negative: models see no earlier run.
	HistoryBudget int
	// HistoryRuns is how many finished runs a session keeps in its
	// history (the snapshot's and the checkpoint's), oldest dropped first;
	// each entry's answer is the run's final answer, already within
	// MaxResultBytes. Defaults to DefaultHistoryRuns (10).
	HistoryRuns int
	// Loop tunes each task's agent loop: the tools offered (besides the
	// built-in todo_write, todo_update and ask_user), rounds, budgets and
	// the todo tracking thresholds. Its zero value is the solver's
	// defaults.
	Loop solver.Loop
	// NewRing makes a session's ring. Defaults to buffer.NewMemory.
	// Unused with a Cluster, whose store makes the rings.
	NewRing func(capacity int) buffer.Ring
	// Cluster shares sessions with other servers through a store (Redis).
	// Nil: sessions live in this server's memory only.
	Cluster Cluster
	// Authenticate decides who opens a connection, before the upgrade: it
	// returns the identity the request's credential names, or an error,
	// and the handshake is then refused with 401 (auth.ErrNoCredential:
	// none given; anything else: a bad one). A session belongs to the
	// subject that created it and only that subject can resume it. A
	// connection is closed with 4001 (token expired) when its identity's
	// Expires passes; its session stays for a resume with a fresh
	// credential. Defaults to nil: every connection is let in as the
	// anonymous subject "", for good.
	Authenticate func(r *http.Request) (auth.Identity, error)
	// Budget caps each subject's run starts and model tokens, counted on
	// this server (package budget). Defaults to no limits.
	Budget budget.Limits
	// Logger receives the server's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer is told what happens, for metrics (package metrics).
	// Defaults to observing nothing.
	Observer Observer
	// AdoptHook is a test seam: with a Cluster, it is called when this
	// server has claimed a session in the store and before it restores
	// it (adopt.go), on the goroutine adopting it; ctx bounds the
	// adoption. Tests hold an adoption open with it. Defaults to nil.
	AdoptHook func(ctx context.Context, session string)
	// MaxTakeovers bounds the sessions this server takes over from the
	// store at once (the resumes of a dead server's sessions, and the
	// orphaned runs it continues). After a node's death every one of its
	// clients resumes within a second or two; unbounded, thousands of
	// takeovers would share the store's connections, miss their deadlines
	// together and start over. A takeover beyond the bound waits up to
	// TakeoverWait for a slot; a resume that waited in vain is answered
	// system.error busy with retry_after_ms (adopt.go). Cluster only.
	// Defaults to 32.
	MaxTakeovers int
	// TakeoverWait is how long a takeover waits for one of the MaxTakeovers
	// slots. Defaults to 3s.
	TakeoverWait time.Duration
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&c.BufferSize, buffer.DefaultCapacity)
	def(&c.SessionTTL, 5*time.Minute)
	defInt(&c.MaxTakeovers, 32)
	def(&c.TakeoverWait, 3*time.Second)
	def(&c.IdleSessionTTL, 10*time.Second)
	c.IdleSessionTTL = min(c.IdleSessionTTL, c.SessionTTL)
	def(&c.ConfirmTimeout, 5*time.Minute)
	defInt(&c.MaxParallel, 4)
	defInt(&c.MaxRetries, 3)
	def(&c.RetryBase, time.Second)
	def(&c.TaskTimeout, 2*time.Minute)
	defInt(&c.MaxTasks, 50)
	defInt(&c.MaxResultBytes, solver.DefaultMaxResultBytes)
	if c.HistoryBudget == 0 {
		c.HistoryBudget = DefaultHistoryBudget
	}
	defInt(&c.HistoryRuns, DefaultHistoryRuns)
	if c.ReadLimit <= 0 {
		c.ReadLimit = 65536
	}
	def(&c.PingInterval, 25*time.Second)
	def(&c.PongTimeout, 10*time.Second)
	def(&c.WriteTimeout, c.PongTimeout)
	defInt(&c.SendQueue, c.BufferSize+64)
	if c.RateLimit > 0 {
		defInt(&c.RateBurst, 2*c.RateLimit)
	}
	if c.NewRing == nil {
		c.NewRing = func(n int) buffer.Ring { return buffer.NewMemory(n) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	c.AllowedOrigins = append([]string(nil), c.AllowedOrigins...)
	return c
}

func (o *Options) retryPolicy() failure.Policy {
	return failure.Policy{MaxRetries: o.MaxRetries, Base: o.RetryBase}
}

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

	mu       sync.Mutex // guards sessions, owned, making, conns, closed, replies, adoptions
	sessions map[string]*session
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
	// by message id (remote.go). Guarded by mu.
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
	stopSweep chan struct{}
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
		stopSweep: make(chan struct{}),
		runEnded:  make(chan struct{}, 1),
	}
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

	sess, token, follow, err := s.newSessionFrom(r.Context(), id.Subject, adm.ip)
	if err != nil {
		s.log.Error("new session", "err", err)
		ws.Close(websocket.StatusTryAgainLater, "cannot create a session now")
		return nil, "", ""
	}
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
	c.sess.attachFresh(c, token, follow)
	if !c.sess.provisional {
		s.attachShared(c, c.sess.id, true)
	}
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
// finish, or, with a Cluster, hand them over. ctx bounds the whole wait:
// if it ends first, connections still closing are dropped without a
// handshake, and Close returns — with ctx's error — without waiting for
// runs whose model or tool has not returned since it was cancelled; those
// end on their own, their events going nowhere.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
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

	close(s.stopSweep)
	s.janitorWG.Wait()
	if s.opts.Cluster != nil {
		// Seal every session before its run stops, so that nothing the
		// run does while stopping reaches the store: it stays as the last
		// checkpoint left it, to be continued by another server.
		s.freeSessions()
		if err := s.opts.Cluster.Leave(ctx); err != nil {
			errs = append(errs, fmt.Errorf("leave the cluster: %w", err))
		}
	}
	s.cancel(ErrServerClosed)
	s.clusterWG.Wait()
	if err := waitCtx(ctx, &s.runWG); err != nil {
		errs = append(errs, fmt.Errorf("close runs: %w", err))
	}
	s.freeSessions()
	return errors.Join(errs...)
}

// freeSessions closes and releases every session.
func (s *Server) freeSessions() {
	s.mu.Lock()
	sessions := make([]*session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	clear(s.sessions)
	clear(s.owned)
	s.mu.Unlock()
	for _, sess := range sessions {
		if sess.markClosed() {
			sess.release()
		}
	}
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
		case <-s.stopSweep:
			return
		case now := <-t.C:
			var expired []*session
			s.mu.Lock()
			for _, sess := range s.sessions {
				if at := sess.detachedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= sess.ttl() {
					expired = append(expired, sess)
				}
			}
			s.mu.Unlock()
			for _, sess := range expired {
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
