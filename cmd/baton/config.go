package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/baton-run/baton/openai"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/wsproto"
)

// config is what the flags and environment say.
type config struct {
	addr           string
	debugAddr      string
	model          string
	simDelay       time.Duration
	logFormat      string
	logLevel       string
	allowedOrigins string
	store          string
	redisURL       string
	redisGiveUp    time.Duration // --redis-give-up: redisstore.ClusterOptions.GiveUpAfter
	leaseTTL       time.Duration // --lease-ttl: redisstore.ClusterOptions.LeaseTTL
	redisReplicas  int           // --redis-replicas: redisstore.ClusterOptions.Replicas, unless left unset (then replicasFor)
	drainTimeout   time.Duration
	openai         openai.Config
	opts           orchestrator.Options
	agent          agentConfig
	auth           authConfig
	myagent        myagentConfig
	edge           edgeConfig
	showVersion    bool     // --version: print it and exit
	envNames       []string // the BATON_* variables the flags are read from

	// from names where a flag's value came from, as an error about it
	// should name it: "--name", "BATON_NAME" or "OPENAI_BASE_URL". A flag
	// left at its default is absent.
	from map[string]string
}

// src is how an error names the setting of flag name.
func (c *config) src(name string) string {
	if s, ok := c.from[name]; ok {
		return s
	}
	return "--" + name
}

// fromEnv reports whether flag name is also read from the environment:
// every flag but --version, which only the command line asks for.
func fromEnv(name string) bool { return name != "version" }

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

const usageHeader = `Usage: baton [flags]

Baton serves plan → confirm → solve → aggregate pipelines over a WebSocket at /ws
(liveness at /healthz, readiness at /readyz, Prometheus metrics at /metrics).

Every flag but --version can also be set in the environment as BATON_<NAME>, upper
snake case (BATON_SESSION_TTL=10m sets --session-ttl); a flag on the command line
wins. A BATON_* variable that names no flag is warned about at start.
With --model openai the API key is read from OPENAI_API_KEY (never a flag), and
OPENAI_BASE_URL is the endpoint when --openai-base-url (or BATON_OPENAI_BASE_URL)
is not set.

Flags:
`

// parseConfig reads flags, each of which falls back to BATON_<NAME> in the
// environment, then to its default. A value that does not parse or is out
// of range is an error naming the flag or variable it came from and the
// form expected; only -h and an unknown flag print the usage (to stderr).
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{from: map[string]string{}}
	fs := flag.NewFlagSet("baton", flag.ContinueOnError)
	o := &c.opts
	fs.StringVar(&c.addr, "addr", ":8080", "address to listen on (host:port; :8080 is every interface)")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "if set, serve /debug/pprof/ and /debug/vars here (keep it private, e.g. 127.0.0.1:6060)")
	fs.StringVar(&c.model, "model", "sim", "model backend: sim (built-in, no network) or openai (any OpenAI-compatible endpoint)")
	fs.StringVar(&c.openai.BaseURL, "openai-base-url", "", "OpenAI-compatible API root (default "+openai.OfficialBaseURL+"; also OPENAI_BASE_URL)")
	fs.StringVar(&c.openai.Model, "openai-model", openai.DefaultModel, "model name to ask the endpoint for")
	fs.IntVar(&c.openai.MaxOutputTokens, "max-output-tokens", 1024, "most tokens one completion may produce")
	fs.IntVar(&o.BufferSize, "buffer-size", 1000, "events kept per session for replay")
	fs.DurationVar(&o.SessionTTL, "session-ttl", 5*time.Minute, "how long a session outlives its last connection")
	fs.DurationVar(&o.IdleSessionTTL, "idle-session-ttl", 10*time.Second, "how long a session in which no run was started outlives its last connection (at most --session-ttl)")
	fs.DurationVar(&o.ConfirmTimeout, "confirm-timeout", 5*time.Minute, "how long a confirmation waits for its answer")
	fs.IntVar(&o.MaxParallel, "max-parallel", 4, "tasks of a run executing at once")
	fs.IntVar(&o.MaxRetries, "max-retries", 3, "retries of a failed task or plan after its first execution (3: at most 4 executions); the events' max_attempts")
	fs.IntVar(&o.MaxRetries, "max-attempts", 3, "the old name of --max-retries, kept for existing set-ups: it counts retries too")
	fs.DurationVar(&o.RetryBase, "retry-base", time.Second, "first retry delay (doubles each retry)")
	fs.DurationVar(&o.TaskTimeout, "task-timeout", 2*time.Minute, "longest one execution of a task may take (longer fails as a timeout)")
	fs.IntVar(&o.MaxTasks, "max-tasks", 50, "most tasks in a plan or task list")
	fs.BoolVar(&o.Adaptive, "adaptive", false, "make every plan-mode run adaptive: decide after each task whether to continue, adjust the plan, ask the user or synthesize")
	fs.StringVar(&o.DefaultMode, "default-mode", wsproto.ModePlan, "mode of a user.message that names none: plan (plan, confirm, solve, aggregate) or chat (one agent loop answers it directly)")
	fs.Int64Var(&o.ReadLimit, "read-limit", 65536, "largest client frame in bytes (larger closes with 1009)")
	fs.DurationVar(&c.simDelay, "sim-delay", 150*time.Millisecond, "pace of the simulated model's steps (0 for load tests)")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", "", "comma-separated Origin host patterns allowed besides the server's own host (path.Match syntax, port included: app.example.com, localhost:*)")
	fs.DurationVar(&o.PingInterval, "ping-interval", 25*time.Second, "how often the server pings each connection")
	fs.DurationVar(&o.PongTimeout, "pong-timeout", 10*time.Second, "how long a ping waits for its pong before the connection is dropped")
	fs.IntVar(&o.RateLimit, "rate-limit", 20, "client frames a second one connection may send on average; more are refused with rate_limited, and sustained, closed with 1008 (0: no limit)")
	fs.IntVar(&o.RateBurst, "rate-burst", 0, "client frames one connection may send at once above --rate-limit (0: twice --rate-limit)")
	fs.IntVar(&o.MaxSessions, "max-sessions", 10000, "most sessions this server holds; a new connection beyond it may only resume a session, else it is closed with 4029 (0: no limit)")
	fs.IntVar(&o.MaxSessionsPerSubject, "max-sessions-per-subject", 50, "most sessions one authenticated subject holds on this server; beyond it as --max-sessions (0: no limit)")
	fs.IntVar(&o.MaxSessionsPerIP, "max-sessions-per-ip", 200, "most sessions the anonymous clients of one IP (an IPv6 /64) hold on this server; beyond it as --max-sessions (0: no limit)")
	fs.IntVar(&o.MaxFollowers, "max-followers", 8, "most connections one session may have attached at once (a resume with metadata.follow adds one; on all servers); a follow beyond it is refused with follow_limit (0: no limit)")
	fs.IntVar(&o.MaxFrameBytes, "max-frame-bytes", 1<<20, "longest event frame sent, in bytes; a longer one has its long texts cut, marked truncated (0: no cap; else at least 4096)")
	fs.IntVar(&o.MaxResultBytes, "max-result-bytes", 128<<10, "longest text kept of what a model returns (a task's result, the plan's texts, the final answer), in bytes; longer is cut where it enters, marked truncated (at least 1024)")
	fs.IntVar(&o.HistoryBudget, "history-budget", orchestrator.DefaultHistoryBudget, "bytes of a session's earlier runs (requests and answers) given to the models of its next run; the oldest runs are left out first, never the current request (0: models see no earlier run)")
	fs.IntVar(&o.HistoryRuns, "history-runs", orchestrator.DefaultHistoryRuns, "finished runs a session keeps in its history (the snapshot's thread, in every checkpoint), the oldest dropped first (at least 1)")
	fs.StringVar(&c.store, "store", "memory", "where sessions live: memory (this process) or redis (shared by every Baton on the same Redis: any serves any session, runs survive a restart; needs --redis-url)")
	fs.StringVar(&c.redisURL, "redis-url", "", "Redis to keep sessions in with --store redis: one server (redis://[:password@]host:port/db) or a Sentinel setup (redis://[:password@]sentinel:port/db?master_name=NAME&addr=sentinel2:port, the master's name and each sentinel; Baton follows the master through a failover); rediss:// for TLS")
	fs.DurationVar(&c.redisGiveUp, "redis-give-up", 30*time.Second, "with --store redis, how long a session's writes are retried while Redis fails (stalls, is unreachable) before this node gives the session up; the client's resume adopts it again once Redis answers")
	fs.IntVar(&c.redisReplicas, "redis-replicas", 0, "with --store redis, N > 0 has a write count only once every replica of the master holds it, and at least N replicas (Redis WAIT): before a client receives an event, a run takes its next step, or a lease renewal holds; whichever replica a failover promotes then has everything Baton acted on (default 1 with a Sentinel --redis-url; on a Redis Cluster every replica of the master, none needed; else 0: the master's reply counts)")
	fs.IntVar(&o.MaxTakeovers, "max-takeovers", 32, "with --store redis, most sessions this node takes over from the store at once (the resumes of a dead node's sessions, its orphaned runs); a resume that waits 3 s for a slot in vain is answered busy with retry_after_ms")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", redisstore.DefaultLeaseTTL, "with --store redis, how long a node that stops renewing its liveness in Redis is still taken to be alive; then the other nodes take its runs over (renewed three times per TTL)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long runs in flight may take to finish (memory store) before they are cancelled, or with the redis store how long the whole stop may take (its runs are handed over at once); 0 cancels them at once")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "least severe log level written: debug, info, warn or error")
	fs.BoolVar(&c.showVersion, "version", false, "print the version (and the Go toolchain and commit it was built with) and exit")
	agentFlags(fs, &o.Loop, &c.agent)
	authFlags(fs, &c.auth, &o.Budget)
	myagentFlags(fs, &c.myagent)
	edgeFlags(fs, &c.edge)

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if !fromEnv(f.Name) {
			return
		}
		name := envName(f.Name)
		c.envNames = append(c.envNames, name)
		v := getenv(name)
		if v == "" || envErr != nil {
			return
		}
		if err := f.Value.Set(v); err != nil {
			envErr = notParsed(name, v, f.Value, err)
		}
		c.from[f.Name] = name
	})
	// The OpenAI SDKs' own variables, below Baton's flags and BATON_* ones.
	c.openai.APIKey = getenv("OPENAI_API_KEY")
	if c.openai.BaseURL == "" && getenv("OPENAI_BASE_URL") != "" {
		c.openai.BaseURL = getenv("OPENAI_BASE_URL")
		c.from["openai-base-url"] = "OPENAI_BASE_URL"
	}

	// The flag package would print its own message and the whole usage
	// after a bad value; the wrapper keeps the first bad value's error
	// instead, and the usage is printed only for -h and unknown flags.
	var bad error
	fs.VisitAll(func(f *flag.Flag) { f.Value = &reported{Value: f.Value, name: f.Name, bad: &bad} })
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		if bad == nil && envErr == nil {
			fmt.Fprint(stderr, usageHeader)
			printFlags(stderr, fs)
		}
	}
	err := fs.Parse(args)
	if err == nil && c.showVersion {
		return c, nil // whatever else the settings say: --version only prints
	}
	if envErr != nil {
		return c, envErr
	}
	if err != nil {
		if bad != nil {
			return c, bad
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
			return c, fmt.Errorf("unknown flag --%s (the flags are listed above)", name)
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q (every setting is a --flag)", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { c.from[f.Name] = "--" + f.Name })
	if err := c.alias("max-attempts", "max-retries"); err != nil {
		return c, err
	}
	return c, c.check(fs)
}

// alias resolves a flag's old name, which sets the same value as its new
// one: where the value came from is named by the new name from now on. A
// flag beats a variable as ever; both names at the same level is an error.
func (c *config) alias(old, name string) error {
	from, ok := c.from[old]
	if !ok {
		return nil
	}
	cur, both := c.from[name]
	isFlag := func(s string) bool { return strings.HasPrefix(s, "--") }
	switch {
	case !both || isFlag(from) && !isFlag(cur):
		c.from[name] = from
	case isFlag(from) == isFlag(cur):
		return fmt.Errorf("%s and %s: --%s is the old name of --%s; set one", from, cur, old, name)
	}
	return nil
}

// check validates what parses but may still be wrong: ranges, choices and
// Origin patterns.
func (c *config) check(fs *flag.FlagSet) error {
	for _, name := range []string{"buffer-size", "max-parallel", "max-tasks", "read-limit", "max-retries", "max-output-tokens",
		"max-rounds", "tool-result-limit", "max-context-bytes", "todo-complete-after", "todo-block-after", "history-runs", "max-takeovers"} {
		var n int64
		switch v := get(fs, name).(type) {
		case int:
			n = int64(v)
		case int64:
			n = v
		}
		if n < 1 {
			return fmt.Errorf("%s: must be at least 1 (got %d)", c.src(name), n)
		}
	}
	for _, name := range []string{"rate-limit", "rate-burst", "max-conns-per-ip", "max-sessions", "max-sessions-per-subject",
		"max-sessions-per-ip", "max-followers", "max-frame-bytes", "redis-replicas", "history-budget"} {
		if n := get(fs, name).(int); n < 0 {
			return fmt.Errorf("%s: must not be negative (got %d; 0 turns the limit off)", c.src(name), n)
		}
	}
	if n := c.opts.MaxFrameBytes; n > 0 && n < minFrameBytes {
		return fmt.Errorf("%s: must be 0 (no cap) or at least %d (got %d)", c.src("max-frame-bytes"), minFrameBytes, n)
	}
	if c.opts.HistoryBudget == 0 {
		c.opts.HistoryBudget = -1 // the option's 0 is its default; the flag's 0 is none
	}
	if n := c.opts.MaxResultBytes; n < minResultBytes {
		return fmt.Errorf("%s: must be at least %d (got %d)", c.src("max-result-bytes"), minResultBytes, n)
	}
	for _, name := range []string{"session-ttl", "idle-session-ttl", "confirm-timeout", "ping-interval", "pong-timeout", "task-timeout", "retry-base", "sim-delay", "tool-timeout", "drain-timeout",
		"redis-give-up", "lease-ttl", "body-timeout", "idle-timeout"} {
		d := get(fs, name).(time.Duration)
		zeroOK := name == "sim-delay" || name == "drain-timeout"
		switch {
		case zeroOK && d < 0:
			return fmt.Errorf("%s: must not be negative (got %s; use 0, 20ms, 1s)", c.src(name), d)
		case !zeroOK && d <= 0:
			return fmt.Errorf("%s: must be more than 0 (got %s; use 30s, 5m)", c.src(name), d)
		}
	}
	choices := []struct {
		name, value, what, want string
		ok                      bool
	}{
		{"model", c.model, "model", "sim or openai", c.model == "sim" || c.model == "openai"},
		{"store", c.store, "store", "memory or redis", c.store == "memory" || c.store == "redis"},
		{"default-mode", c.opts.DefaultMode, "mode", "plan or chat", c.opts.DefaultMode == wsproto.ModePlan || c.opts.DefaultMode == wsproto.ModeChat},
		{"log-format", c.logFormat, "log format", "text or json", c.logFormat == "text" || c.logFormat == "json"},
		{"log-level", c.logLevel, "log level", "debug, info, warn or error", new(slog.Level).UnmarshalText([]byte(c.logLevel)) == nil},
	}
	for _, ch := range choices {
		if !ch.ok {
			return fmt.Errorf("%s: %q is not a %s (use %s)", c.src(ch.name), ch.value, ch.what, ch.want)
		}
	}
	switch {
	case c.store == "redis" && c.redisURL == "":
		return fmt.Errorf("%s redis needs a Redis to use: set --redis-url or BATON_REDIS_URL (e.g. redis://127.0.0.1:6379/0)", c.src("store"))
	case c.store == "memory" && c.redisURL != "":
		return fmt.Errorf("%s is set but the store is memory: add --store redis to keep sessions in Redis", c.src("redis-url"))
	case c.store == "redis":
		if _, err := parseRedisURL(c.redisURL); err != nil {
			return fmt.Errorf("%s: %w (want %s)", c.src("redis-url"), err, redisURLForms)
		}
	}
	patterns, err := originPatterns(c.allowedOrigins)
	if err != nil {
		return fmt.Errorf("%s: %w", c.src("allowed-origins"), err)
	}
	c.opts.AllowedOrigins = patterns
	if err := c.myagent.check(c.src); err != nil {
		return err
	}
	if err := c.edge.check(c.src); err != nil {
		return err
	}
	return c.checkAuth()
}

// minFrameBytes is the smallest --max-frame-bytes: below it even ordinary
// events (a todo list, a short plan) would be cut or fail to fit.
const minFrameBytes = 4096

// minResultBytes is the smallest --max-result-bytes: a shorter cut would
// leave no answer to read.
const minResultBytes = 1024

// originPatterns splits and checks --allowed-origins. coder/websocket
// matches each pattern with path.Match, case-insensitively, against the
// Origin's host — with its port when the Origin has one — so a pattern is
// a host[:port] glob: no scheme, no path.
func originPatterns(list string) ([]string, error) {
	return hostPatterns(list, "a pattern is a host with its port when the page has one, e.g. app.example.com, localhost:3000, *.example.com")
}

// pathMatch checks pattern's syntax as path.Match does.
func pathMatch(pattern string) (bool, error) { return path.Match(pattern, "") }

// reported wraps a flag's value so that a command-line value that does not
// parse is reported once, naming the flag and the form expected.
type reported struct {
	flag.Value
	name string
	bad  *error // the first bad value's error
}

func (v *reported) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && *v.bad == nil {
		*v.bad = notParsed("--"+v.name, s, v.Value, err)
	}
	return err
}

// IsBoolFlag keeps a boolean flag (--adaptive) usable without a value.
func (v *reported) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// String serves the flag package's zero-value probe, which calls it on a
// reported with no Value.
func (v *reported) String() string {
	if v == nil || v.Value == nil {
		return ""
	}
	return v.Value.String()
}

// notParsed is the error for a value of src that does not parse into v;
// err is what v said, which a flag of its own kind (--mcp) words itself.
func notParsed(src, value string, v flag.Value, err error) error {
	switch kind(v) {
	case "duration":
		return fmt.Errorf("%s: %q is not a duration (use 30s, 5m)", src, value)
	case "int":
		return fmt.Errorf("%s: %q is not a whole number", src, value)
	case "bool":
		return fmt.Errorf("%s: %q is not true or false", src, value)
	}
	return fmt.Errorf("%s: %q is not valid: %w", src, value, err)
}

// get returns flag name's current value.
func get(fs *flag.FlagSet, name string) any {
	v := fs.Lookup(name).Value
	if r, ok := v.(*reported); ok {
		v = r.Value
	}
	return v.(flag.Getter).Get()
}

// kind names the type of a flag's value as the usage shows it.
func kind(v flag.Value) string {
	if r, ok := v.(*reported); ok {
		v = r.Value
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return "value"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "duration"
	case int, int64:
		return "int"
	case bool:
		return "bool"
	}
	return "string"
}

// printFlags lists the flags as --name, the way the README writes them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s %s\n    \t%s", f.Name, kind(f.Value), f.Usage)
		switch {
		case f.DefValue == "":
		case kind(f.Value) == "string":
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
