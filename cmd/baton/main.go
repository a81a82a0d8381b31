// Command baton serves Baton's WebSocket endpoint: plan → confirm → solve →
// aggregate pipelines with per-session replay buffers and resume.
//
//	go run ./cmd/baton                 # :8080, simulated model
//	go run ./cmd/baton --help          # every flag; each is also BATON_<NAME>
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
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/openai"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "baton:", err)
		os.Exit(1)
	}
}

// config is what the flags and environment say.
type config struct {
	addr           string
	debugAddr      string
	model          string
	simDelay       time.Duration
	logFormat      string
	logLevel       string
	allowedOrigins string
	openai         openai.Config
	opts           orchestrator.Options
	agent          agentConfig
}

// parseConfig reads flags, each of which falls back to BATON_<NAME> in the
// environment (upper snake case), then to its default.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("baton", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &c.opts
	fs.StringVar(&c.addr, "addr", ":8080", "address to listen on")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "if set, serve /debug/pprof/ and /debug/vars here (keep it private, e.g. 127.0.0.1:6060)")
	fs.StringVar(&c.model, "model", "sim", "model backend: sim (built-in, no network) or openai (any OpenAI-compatible endpoint)")
	fs.StringVar(&c.openai.BaseURL, "openai-base-url", "", "OpenAI-compatible API root (default "+openai.OfficialBaseURL+"; also OPENAI_BASE_URL)")
	fs.StringVar(&c.openai.Model, "openai-model", openai.DefaultModel, "model name to ask the endpoint for")
	fs.IntVar(&c.openai.MaxOutputTokens, "max-output-tokens", 1024, "most tokens one completion may produce")
	fs.IntVar(&o.BufferSize, "buffer-size", 1000, "events kept per session for replay")
	fs.DurationVar(&o.SessionTTL, "session-ttl", 5*time.Minute, "how long a session outlives its last connection")
	fs.DurationVar(&o.ConfirmTimeout, "confirm-timeout", 5*time.Minute, "how long a confirmation waits for its answer")
	fs.IntVar(&o.MaxParallel, "max-parallel", 4, "tasks of a run executing at once")
	fs.IntVar(&o.MaxAttempts, "max-attempts", 3, "retries of a failed task")
	fs.DurationVar(&o.RetryBase, "retry-base", time.Second, "first retry delay (doubles each retry)")
	fs.DurationVar(&o.TaskTimeout, "task-timeout", 2*time.Minute, "longest one execution of a task may take (longer fails as a timeout)")
	fs.IntVar(&o.MaxTasks, "max-tasks", 50, "most tasks in a plan or task list")
	fs.BoolVar(&o.Adaptive, "adaptive", false, "make every run adaptive: decide after each task whether to continue, adjust the plan, ask the user or synthesize")
	fs.Int64Var(&o.ReadLimit, "read-limit", 65536, "largest client frame in bytes (larger closes with 1009)")
	fs.DurationVar(&c.simDelay, "sim-delay", 150*time.Millisecond, "pace of the simulated model's steps")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", "", "comma-separated Origin host patterns allowed besides the server's own host")
	fs.DurationVar(&o.PingInterval, "ping-interval", 25*time.Second, "how often the server pings each connection")
	fs.DurationVar(&o.PongTimeout, "pong-timeout", 10*time.Second, "how long a ping waits for its pong before the connection is dropped")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "least severe log level written: debug, info, warn or error")
	agentFlags(fs, &o.Loop, &c.agent)

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "BATON_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	// The OpenAI SDKs' own variables, below Baton's flags and BATON_* ones.
	c.openai.APIKey = getenv("OPENAI_API_KEY")
	if c.openai.BaseURL == "" {
		c.openai.BaseURL = getenv("OPENAI_BASE_URL")
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, p := range strings.Split(c.allowedOrigins, ",") {
		if p = strings.TrimSpace(p); p != "" {
			o.AllowedOrigins = append(o.AllowedOrigins, p)
		}
	}
	switch {
	case o.BufferSize < 1, o.MaxParallel < 1, o.MaxTasks < 1, o.ReadLimit < 1, o.MaxAttempts < 1, c.openai.MaxOutputTokens < 1:
		return c, errors.New("--buffer-size, --max-parallel, --max-tasks, --read-limit, --max-attempts and --max-output-tokens must be at least 1")
	case o.SessionTTL <= 0, o.ConfirmTimeout <= 0, o.PingInterval <= 0, o.PongTimeout <= 0, o.TaskTimeout <= 0, o.RetryBase <= 0, c.simDelay < 0:
		return c, errors.New("durations must be positive (--sim-delay may be 0)")
	}
	if err := checkAgent(o.Loop); err != nil {
		return c, err
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return c, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
	}
	if err := new(slog.Level).UnmarshalText([]byte(c.logLevel)); err != nil {
		return c, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	return c, nil
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
		if err != nil {
			return orchestrator.Models{}, err
		}
		return orchestrator.Models{Planner: client, Solver: client, Aggregator: client}, nil
	}
	return orchestrator.Models{}, fmt.Errorf("--model %q: want sim or openai", c.model)
}

// run is the whole program: it serves until ctx is cancelled or a SIGINT or
// SIGTERM arrives, then shuts down gracefully. When it is listening it
// writes "baton listening on ws://HOST:PORT/ws (health: http://HOST:PORT/healthz)"
// to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("configure: %w", err)
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

	m, err := models(c)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	set, closeTools, err := tools(c.agent)
	if err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	defer closeTools.Close()
	c.opts.Loop.Tools = set
	orch, err := orchestrator.New(m, &c.opts)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		orch.Close(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           routes(orch),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(h, slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if c.debugAddr != "" {
		dln, err := net.Listen("tcp", c.debugAddr)
		if err != nil {
			srv.Close()
			<-served
			orch.Close(context.Background())
			return fmt.Errorf("listen (debug): %w", err)
		}
		dsrv := &http.Server{Handler: debugRoutes(), ReadHeaderTimeout: 10 * time.Second}
		debugServed := make(chan struct{})
		go func() { dsrv.Serve(dln); close(debugServed) }()
		defer func() { dsrv.Close(); <-debugServed }()
		log.Info("debug endpoints", "addr", dln.Addr().String())
	}
	log.Info("listening", "addr", ln.Addr().String(), "model", c.model)
	if c.model == "openai" {
		log.Info("model endpoint", "base_url", c.openai.BaseURL, "model", c.openai.Model)
	}
	host := openableAddr(ln.Addr())
	fmt.Fprintf(stdout, "baton listening on ws://%s/ws (health: http://%s/healthz)\n", host, host)

	select {
	case err = <-served:
		orch.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx) // stops accepting; WebSockets are the orchestrator's
	<-served
	if cerr := orch.Close(shutdownCtx); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}
