// Command baton serves Baton's WebSocket endpoint: plan → confirm → solve →
// aggregate pipelines with per-session replay buffers and resume.
//
//	go run ./cmd/baton                 # :8080, simulated model
//	go run ./cmd/baton --help          # every flag; each is also BATON_<NAME>
//	go run ./cmd/baton --version       # baton 0.1.0+dev (go1.26.8, commit abc1234)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/agui"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/openai"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
)

func main() {
	ctx := withEnviron(context.Background(), os.Environ())
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(1)
	}
}

// openableAddr is the listener's address as a person can open it: an
// unspecified host (listening on every interface) becomes localhost.
func openableAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("localhost", strconv.Itoa(tcp.Port))
}

func models(c config) (orchestrator.Models, error) {
	switch c.model {
	case "sim":
		return orchestrator.Models{
			Planner:    &planner.Sim{Delay: c.simDelay},
			Solver:     &solver.Sim{Delay: c.simDelay},
			Aggregator: &aggregator.Sim{Delay: c.simDelay},
		}, nil
	case "openai":
		client, err := openai.New(c.openai)
		if errors.Is(err, openai.ErrBaseURL) {
			return orchestrator.Models{}, fmt.Errorf("%s: %q is not an http(s) URL (e.g. http://localhost:11434/v1)",
				c.src("openai-base-url"), c.openai.BaseURL)
		}
		if err != nil {
			return orchestrator.Models{}, err
		}
		return orchestrator.Models{Planner: client, Solver: client, Aggregator: client}, nil
	}
	return orchestrator.Models{}, fmt.Errorf("--model %q: want sim or openai", c.model)
}

// endpointChecker is a model whose endpoint can be checked at start.
type endpointChecker interface {
	CheckModel(ctx context.Context) error
}

// endpointCheckTimeout bounds the check of the model endpoint at start.
const endpointCheckTimeout = 5 * time.Second

// checkEndpoint asks the model endpoint whether it serves the configured
// model and logs what it finds: a warning when it cannot be reached or
// does not list the model. Baton starts either way, since a local server
// may come up later.
func checkEndpoint(ctx context.Context, log *slog.Logger, ck endpointChecker, cfg openai.Config) {
	ctx, cancel := context.WithTimeout(ctx, endpointCheckTimeout)
	defer cancel()
	base := cfg.BaseURL
	if base == "" {
		base = openai.OfficialBaseURL
	}
	if u, err := url.Parse(base); err == nil {
		base = u.Redacted() // no password of a user:password@host URL in the log
	}
	err := ck.CheckModel(ctx)
	var notListed *openai.NotListedError
	switch {
	case err == nil:
		log.Info("model endpoint ready", "base_url", base, "model", cfg.Model)
	case errors.As(err, &notListed):
		shown := notListed.Available
		if len(shown) > 20 {
			shown = shown[:20]
		}
		log.Warn("the model endpoint does not list the configured model; runs will fail unless it serves it anyway (check --openai-model)",
			"base_url", base, "model", cfg.Model, "available", strings.Join(shown, ","))
	default:
		log.Warn("the model endpoint could not be checked; starting anyway (runs fail until it answers)",
			"base_url", base, "model", cfg.Model, "problem", failure.Public(err), "err", err)
	}
}

// wrapHandlerKey is a test seam: when run's ctx carries a
// func(http.Handler) http.Handler under it, Baton serves through that. The
// end-to-end tests record every WebSocket frame this way, to check each
// against docs/asyncapi.yaml (wire_test.go).
type wrapHandlerKey struct{}

// tuneKey is a test seam: with --store redis, when run's ctx carries a
// func(*orchestrator.Options, *redisstore.ClusterOptions) under it, Baton
// calls it with its options before it joins the cluster. The stall tests
// shorten how long a session's writes are retried, and hold an adoption
// open (stall_test.go).
type tuneKey struct{}

// wrapClusterKey is a test seam: with --store redis, when run's ctx
// carries a func(orchestrator.Cluster) orchestrator.Cluster under it, the
// orchestrator uses the cluster it returns (internal/clustertest wraps it
// to force an order on two servers' calls).
type wrapClusterKey struct{}

// dialRedisKey is a test seam: with --store redis, when run's ctx carries
// a func(ctx context.Context, network, addr string) (net.Conn, error)
// under it, every connection to Redis is dialled through it. A test cuts
// one in-process node off from every node of a Redis Cluster with it
// (rediscluster_test.go).
type dialRedisKey struct{}

// run is the whole program: it serves until ctx is cancelled or a SIGINT or
// SIGTERM arrives, then shuts down gracefully. When it is listening it
// writes "baton listening on ws://HOST:PORT/ws (health: http://HOST:PORT/healthz)"
// to stdout; with --version it writes the version line there and returns.
// When ctx carries the environment's variable names (withEnviron, as main
// gives it), a BATON_* one that names no setting is warned about.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("configure: %w", err)
	}
	if c.showVersion {
		fmt.Fprintln(stdout, currentBuild())
		return nil
	}
	var level slog.Level
	level.UnmarshalText([]byte(c.logLevel)) // checked by parseConfig
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(h)
	c.opts.Logger = log
	warnUnknownEnv(ctx, log, c.envNames)

	m, err := models(c)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if ck, ok := m.Planner.(endpointChecker); ok {
		checkEndpoint(ctx, log, ck, c.openai)
	}
	set, closeTools, err := tools(ctx, c.agent, log)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	defer closeTools.Close()
	// stopBy is when the shutdown must have ended, set by shutdown with
	// the Redis store; zero until then, and on the paths that end run
	// otherwise, where each step keeps its own bound.
	var stopBy time.Time
	calls := &tool.Group{}
	defer waitCalls(log, calls, &stopBy) // before the tools are closed
	c.opts.Loop.Tools, c.opts.Loop.Calls = set, calls
	var pingStore func(context.Context) error // with --store redis: for /readyz
	var threads agui.Store                    // AG-UI's threads: in Redis with --store redis, for every node
	if c.store == "redis" {
		copt := redisstore.ClusterOptions{Capacity: c.opts.BufferSize, TTL: max(2*c.opts.SessionTTL, time.Hour),
			SessionTTL: c.opts.SessionTTL, Logger: log, GiveUpAfter: c.redisGiveUp, LeaseTTL: c.leaseTTL}
		if tune, ok := ctx.Value(tuneKey{}).(func(*orchestrator.Options, *redisstore.ClusterOptions)); ok {
			tune(&c.opts, &copt)
		}
		cl, closeCluster, rdb, err := joinCluster(ctx, c, copt, log)
		if err != nil {
			return fmt.Errorf("configure: %w", err)
		}
		// After the orchestrator's Close, which leaves the cluster; by
		// the shutdown's end.
		defer func() {
			if err := closeWithin(stopBy, closeCluster); err != nil {
				log.Warn("close the Redis store", "err", err)
			}
		}()
		c.opts.Cluster, threads = cl, agui.NewRedisStore(rdb)
		if wrap, ok := ctx.Value(wrapClusterKey{}).(func(orchestrator.Cluster) orchestrator.Cluster); ok {
			c.opts.Cluster = wrap(cl)
		}
		pingStore = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	met := metrics.New()
	c.opts.Observer = met
	orch, err := orchestrator.New(m, &c.opts)
	if err != nil {
		return err
	}
	met.WatchRings(orch.RingFill)

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		orch.Close(context.Background())
		return fmt.Errorf("listen on %s %q: %w", c.src("addr"), c.addr, err)
	}
	// AG-UI over SSE, a client of /ws in process; its streams end when
	// the server shuts down (after the drain), as /ws connections do.
	ag := agui.New(orch, &agui.Options{Authenticate: c.opts.Authenticate, AllowedOrigins: c.opts.AllowedOrigins,
		Store: threads, ThreadTTL: max(2*c.opts.SessionTTL, time.Hour), Logger: log})
	defer ag.Close()
	dialect := newMyagent(orch, c, log)
	defer dialect.Close() // its connections' sessions stay the orchestrator's
	handler := routes(orch, ag, met.Handler(), readiness(orch, pingStore, log), currentBuild().Version, dialect, c.myagent.path)
	if wrap, ok := ctx.Value(wrapHandlerKey{}).(func(http.Handler) http.Handler); ok {
		handler = wrap(handler)
	}
	handler = checkHosts(handler, c, log) // before any upgrade, stream or run
	// ReadTimeout bounds a request and its body; net/http clears the
	// deadline once the body has been read to its end and when it hands a
	// connection to a WebSocket, so it cuts neither a stream nor a
	// WebSocket. IdleTimeout applies between requests only.
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: min(10*time.Second, c.edge.bodyTimeout),
		ReadTimeout:       c.edge.bodyTimeout,
		IdleTimeout:       c.edge.idleTimeout,
		ErrorLog:          slog.NewLogLogger(h, slog.LevelWarn),
	}
	srv.RegisterOnShutdown(func() { ag.Close() })
	served := make(chan error, 1)
	el := listenEdge(ln, c, log)
	go func() { served <- srv.Serve(el) }()
	if c.debugAddr != "" {
		dln, err := net.Listen("tcp", c.debugAddr)
		if err != nil {
			srv.Close()
			<-served
			orch.Close(context.Background())
			return fmt.Errorf("listen on %s %q: %w", c.src("debug-addr"), c.debugAddr, err)
		}
		dsrv := &http.Server{Handler: debugRoutes(), ReadHeaderTimeout: 10 * time.Second}
		debugServed := make(chan struct{})
		go func() { dsrv.Serve(dln); close(debugServed) }()
		defer func() { dsrv.Close(); <-debugServed }()
		log.Info("debug endpoints", "addr", dln.Addr().String())
	}
	log.Info("listening", "addr", ln.Addr().String(), "model", c.model)
	logAuth(log, ln.Addr(), c)
	host := openableAddr(ln.Addr())
	fmt.Fprintf(stdout, "baton listening on ws://%s/ws (health: http://%s/healthz)\n", host, host)
	fmt.Fprintf(stdout, "open http://%s/ in a browser for the UI\n", host)

	select {
	case err = <-served:
		orch.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return shutdown(log, orch, srv, served, c.drainTimeout, c.opts.Cluster != nil, &stopBy)
}

// closeGrace bounds what a shutdown does after the drain: cancelling the
// runs left and waiting for every goroutine. With the Redis store, whose
// drain hands the runs over at once, the whole shutdown keeps to the
// drain timeout instead (stopBy), whatever Redis does.
const closeGrace = 10 * time.Second

// shutdown drains the orchestrator — /readyz answers 503 and new WebSocket
// connections are refused (503) from now on, while /healthz, /readyz and
// /metrics keep answering — for drainTimeout at most, then stops the HTTP
// server and closes the orchestrator within closeGrace more. With a
// cluster (handsOver) the drain ends at once, and the close and what run
// does after it (stopBy: the store's close) end by drainTimeout, or
// closeGrace when that is 0: the store's close has the last quarter, or
// 2 s at most.
func shutdown(log *slog.Logger, orch *orchestrator.Server, srv *http.Server, served <-chan error, drainTimeout time.Duration,
	handsOver bool, stopBy *time.Time) error {
	log.Info("shutting down: draining", "drain_timeout", drainTimeout.String())
	deadline := time.Now().Add(drainTimeout)
	drainCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	orch.Drain(drainCtx) // a timeout is not an error: Close cancels the runs left
	closeBy, waitBy := deadline.Add(closeGrace), time.Time{}
	if handsOver {
		end := deadline
		if drainTimeout == 0 {
			end = closeBy
		}
		*stopBy = end
		reserve := min(time.Until(end)/4, 2*time.Second)
		// Close keeps to its ctx as far as the Redis client lets it (a
		// read waits its read timeout); past waitBy it is not waited for.
		closeBy, waitBy = end.Add(-reserve), end.Add(-reserve/2)
	}
	closeCtx, cancelClose := context.WithDeadline(context.Background(), closeBy)
	defer cancelClose()
	err := srv.Shutdown(closeCtx) // stops accepting; WebSockets are the orchestrator's
	<-served
	if cerr := closeWithin(waitBy, func() error { return orch.Close(closeCtx) }); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// closeWithin runs close and returns its error, waiting for it until by
// (forever when by is zero): a store that does not answer must not keep
// a stopping node from exiting. What close did not finish by then ends
// with the process (or, in a test, within the store's timeouts).
func closeWithin(by time.Time, close func() error) error {
	done := make(chan error, 1)
	go func() { done <- close() }()
	var expired <-chan time.Time
	if !by.IsZero() {
		t := time.NewTimer(time.Until(by))
		defer t.Stop()
		expired = t.C
	}
	select {
	case err := <-done:
		return err
	case <-expired:
		return errNotClosed
	}
}

var errNotClosed = errors.New("not closed by the drain timeout: left to end with the process")

// joinTimeout bounds joining the cluster once Redis answered.
const joinTimeout = 20 * time.Second

// joinCluster connects to the Redis of --redis-url (one server, or the
// master of a Sentinel setup) and joins the cluster of Batons using it, as
// copt says, and returns its client too.
func joinCluster(ctx context.Context, c config, copt redisstore.ClusterOptions, log *slog.Logger) (cl *redisstore.Cluster, closeCluster func() error,
	rdb redis.UniversalClient, err error) {
	rc, err := parseRedisURL(c.redisURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w (want %s)", c.src("redis-url"), err, redisURLForms)
	}
	logRedisTo(log)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if rc, err = reach(pctx, rc); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", c.src("redis-url"), err)
	}
	if dial, ok := ctx.Value(dialRedisKey{}).(func(context.Context, string, string) (net.Conn, error)); ok {
		rc = rc.dialling(dial)
	}
	rdb = rc.client()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, nil, nil, fmt.Errorf("reach Redis at %s: %w", rc, err)
	}
	copt.Failover, copt.Shards = rc.failover, rc.cluster
	copt.Replicas, copt.EveryReplica = c.replicasFor(rc)
	// Joining may wait for the replicas to hold the first lease renewal
	// (--redis-replicas): after a failover, until the old master is back
	// as a replica. Redis answers meanwhile: wait rather than exit.
	jctx, cancelJoin := context.WithTimeout(ctx, joinTimeout)
	defer cancelJoin()
	cl, err = redisstore.NewCluster(jctx, rdb, copt)
	if err != nil {
		rdb.Close()
		return nil, nil, nil, fmt.Errorf("join the cluster on %s: %w", rc, err)
	}
	log.Info("joined the cluster", "node", cl.Node(), "redis", rc.String())
	return cl, func() error { return errors.Join(cl.Close(), rdb.Close()) }, rdb, nil
}
