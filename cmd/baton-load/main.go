// Command baton-load drives any Baton with many sessions and checks, with
// zero tolerance, that no event is lost, duplicated, reordered or sent to
// the wrong session: every session's seqs must be contiguous with no seq
// delivered twice, every frame must carry the session's own session_id,
// every replay must be exactly the events after the client's last seq,
// every resume's checksum must equal the server's, and every run must end
// in agent.final_answer (the client package records the first four as
// violations). A resync's snapshot stands for the events it replaces: a run
// it shows is started, and one it shows over has ended. It answers
// confirmations itself, drops connections at random to exercise resume,
// and reports throughput and delivery latency.
//
//	go run ./cmd/baton-load -url ws://localhost:8080/ws -sessions 100 -runs 5 -drop-rate 6
//
// It exits 1 on any violation.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/wsproto"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "baton-load:", err)
		os.Exit(1)
	}
}

type urls []string

func (u *urls) String() string     { return strings.Join(*u, ",") }
func (u *urls) Set(s string) error { *u = append(*u, s); return nil }

type config struct {
	urls       urls
	tokens     urls // bearer tokens, one per subject; sessions take them in turn
	elsewhere  bool
	sessions   int
	runs       int
	ramp       time.Duration
	duration   time.Duration
	dropRate   float64
	ackEvery   int
	mix        map[string]int
	runTimeout time.Duration
	json       bool
	seed       uint64
	quiet      bool
	idle       int
	hold       time.Duration
	cpuProfile string // a CPU profile of the tool itself is written here
}

// token is session i's bearer token, "" when none was given.
func (c *config) token(i int) string {
	if len(c.tokens) == 0 {
		return ""
	}
	return c.tokens[i%len(c.tokens)]
}

// workload is a run to start: a request to plan, or tasks to solve.
type workload struct {
	request  string
	tasks    []wsproto.Task
	adaptive bool // the decide step after each task (§11)
}

// workloads are the kinds of run a session can start.
var workloads = map[string]func(rng *rand.Rand) workload{
	// plan: a request planned by the model and confirmed.
	"plan": func(rng *rand.Rand) workload {
		return workload{request: fmt.Sprintf("Load request %d", rng.IntN(1000))}
	},
	// tasks: a diamond of client-supplied tasks.
	"tasks": func(*rand.Rand) workload {
		return workload{tasks: []wsproto.Task{task("a", ""), task("b", ""), task("c", "", "a", "b"), task("d", "", "c")}}
	},
	// flaky: a task that fails once with a network error and recovers.
	"flaky": func(*rand.Rand) workload {
		return workload{tasks: []wsproto.Task{task("a", "[sim:fail=network*1]"), task("b", "", "a")}}
	},
	// agent: tasks whose agent loop asks the user (answered by the tool)
	// and calls a tool with bad arguments (a failed result, not a failed task).
	"agent": func(*rand.Rand) workload {
		return workload{tasks: []wsproto.Task{task("a", "[sim:ask=Which option?]"),
			task("b", `[sim:tool=todo_update {"id":"none","status":"completed"}]`), task("c", "", "a", "b")}}
	},
	// failing: a permanent failure; the tool answers skip, the run ends partial.
	"failing": func(*rand.Rand) workload {
		return workload{tasks: []wsproto.Task{task("a", "[sim:fail=permanent*1]"), task("b", "", "a"), task("c", "")}}
	},
	// adaptive: a planned run with the decide step, whose first decision
	// asks the user (the tool answers), grows the plan by a task (the tool
	// approves), synthesizes or continues.
	"adaptive": func(rng *rand.Rand) workload {
		decide := []string{"request_input:Which option?", "adjust_plan:+Double-check", "synthesize", "continue"}[rng.IntN(4)]
		return workload{request: fmt.Sprintf("Adaptive request %d [sim:decide=%s]", rng.IntN(1000), decide), adaptive: true}
	},
}

func task(id, desc string, deps ...string) wsproto.Task {
	if deps == nil {
		deps = []string{}
	}
	return wsproto.Task{ID: id, Title: "Load task " + id, Description: desc, DependsOn: deps}
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("baton-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&c.urls, "url", "a Baton WebSocket URL; repeat to spread sessions across servers (default ws://localhost:8080/ws)")
	fs.Func("token", "a bearer token for a server with authentication on; repeat (or give @FILE, the server's SUBJECT=TOKEN file) to spread sessions over several subjects", func(v string) error {
		if !strings.HasPrefix(v, "@") {
			return c.tokens.Set(v)
		}
		pairs, err := auth.LoadPairs(v)
		for _, p := range pairs {
			c.tokens.Set(p.Token)
		}
		return err
	})
	fs.BoolVar(&c.elsewhere, "resume-elsewhere", false, "resume each session on the next -url in turn after a drop (servers sharing a --store redis)")
	fs.IntVar(&c.sessions, "sessions", 10, "concurrent sessions")
	fs.IntVar(&c.runs, "runs", 3, "runs per session")
	fs.DurationVar(&c.ramp, "ramp", time.Second, "time over which sessions start")
	fs.DurationVar(&c.duration, "duration", 0, "stop starting runs after this long (0: run -runs runs)")
	fs.Float64Var(&c.dropRate, "drop-rate", 0, "random connection kills per session per minute")
	fs.IntVar(&c.ackEvery, "ack-every", 20, "ack after this many events (0: never)")
	mix := fs.String("mix", "plan=1,tasks=2,flaky=1,failing=1,agent=1,adaptive=1", "weights of the run kinds: plan, tasks, flaky, failing, agent, adaptive")
	fs.DurationVar(&c.runTimeout, "run-timeout", 2*time.Minute, "a run not ended by then is a violation")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress line")
	fs.IntVar(&c.idle, "idle", 0, "instead of runs: open this many idle sessions, hold them for -hold, and close them")
	fs.DurationVar(&c.hold, "hold", 10*time.Second, "how long -idle sessions stay connected")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the tool itself (not the server) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if len(c.urls) == 0 {
		c.urls = urls{"ws://localhost:8080/ws"}
	}
	if c.sessions < 1 || c.runs < 1 || c.dropRate < 0 || c.ackEvery < 0 {
		return c, errors.New("-sessions and -runs must be at least 1, -drop-rate and -ack-every not negative")
	}
	c.mix = map[string]int{}
	for _, part := range strings.Split(*mix, ",") {
		name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(w)
		if _, known := workloads[name]; !ok || err != nil || n < 0 || !known {
			return c, fmt.Errorf("-mix %q: want name=weight pairs of %v", *mix, slices.Sorted(func(yield func(string) bool) {
				for k := range workloads {
					if !yield(k) {
						return
					}
				}
			}))
		}
		c.mix[name] = n
	}
	return c, nil
}

// Report is the outcome of a load run.
type Report struct {
	Sessions     int     `json:"sessions"`
	Runs         int     `json:"runs"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	LatencyP50MS float64 `json:"latency_p50_ms"`
	LatencyP95MS float64 `json:"latency_p95_ms"`
	LatencyP99MS float64 `json:"latency_p99_ms"`
	LatencyMaxMS float64 `json:"latency_max_ms"`
	Drops        int     `json:"drops"`
	Resumes      int     `json:"resumes"`
	Resyncs      int     `json:"resyncs"`
	Duplicates   int     `json:"duplicates_dropped"`
	ServerErrors int     `json:"server_errors"`
	// ClientCPUPerEvent is the tool's own CPU time (user and system, of the
	// whole process: an in-process server counts too) per event received.
	ClientCPUPerEvent float64  `json:"client_cpu_us_per_event"`
	Violations        []string `json:"violations"`
	ViolationsNum     int      `json:"violation_count"`
}

// errViolations makes run (and so main) fail when the load found any.
var errViolations = errors.New("violations found")

// counters are shared by every session for the progress line.
type counters struct {
	events, runs, drops atomic.Int64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.idle > 0 {
		return idle(ctx, cfg, stdout)
	}

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	var cnt counters
	start, cpuStart := time.Now(), proc.CPU()
	var deadline time.Time
	if cfg.duration > 0 {
		deadline = start.Add(cfg.duration)
	}
	results := make([]sessionResult, cfg.sessions)
	var wg sync.WaitGroup
	for i := range cfg.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			delay := time.Duration(0)
			if cfg.sessions > 1 {
				delay = cfg.ramp * time.Duration(i) / time.Duration(cfg.sessions)
			}
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			results[i] = runSession(ctx, cfg, i, deadline, &cnt)
		}()
	}

	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	if !cfg.quiet {
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			var last int64
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
					ev := cnt.events.Load()
					fmt.Fprintf(stderr, "\r%5.0fs  runs %d  events %d  (%d/s)  drops %d   ",
						time.Since(start).Seconds(), cnt.runs.Load(), ev, ev-last, cnt.drops.Load())
					last = ev
				}
			}
		}()
	}
	wg.Wait()
	close(progressDone)
	progressWG.Wait()
	if !cfg.quiet {
		fmt.Fprintln(stderr)
	}

	rep := report(cfg, results, time.Since(start))
	if rep.Events > 0 {
		rep.ClientCPUPerEvent = float64(proc.CPU()-cpuStart) / float64(time.Microsecond) / float64(rep.Events)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printReport(stdout, rep)
	}
	if rep.ViolationsNum > 0 {
		return errViolations
	}
	return nil
}

type sessionResult struct {
	runs       int
	latencies  []time.Duration
	drops      int
	stats      client.Stats
	violations []string
}

// runSession drives one session through its runs.
func runSession(ctx context.Context, cfg config, i int, deadline time.Time, cnt *counters) (res sessionResult) {
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
	fail := func(format string, args ...any) {
		res.violations = append(res.violations, fmt.Sprintf("session %d: ", i)+fmt.Sprintf(format, args...))
	}

	var mu sync.Mutex // guards res.latencies
	tracked := newRuns()
	onEvent := func(f client.Frame) {
		tracked.frame(f)
		if !wsproto.Sequenced(f.Event) {
			return
		}
		cnt.events.Add(1)
		if !f.Replayed {
			mu.Lock()
			res.latencies = append(res.latencies, f.Received.Sub(f.Timestamp))
			mu.Unlock()
		}
	}
	onConfirm := func(c wsproto.UserConfirm) *client.Answer {
		yes, text := true, "the first one"
		switch c.Kind {
		case wsproto.ConfirmTaskFailed:
			return &client.Answer{Action: "skip"}
		case wsproto.ConfirmTool:
			return &client.Answer{Approved: &yes}
		case wsproto.ConfirmInput:
			return &client.Answer{Text: &text}
		}
		return &client.Answer{Confirmed: &yes} // plan_confirm, plan_adjust
	}
	first := i % len(cfg.urls)
	var elsewhere []string
	if cfg.elsewhere {
		for k := 1; k < len(cfg.urls); k++ {
			elsewhere = append(elsewhere, cfg.urls[(first+k)%len(cfg.urls)])
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.Dial(dctx, cfg.urls[first], &client.Options{Resume: true, AckEvery: cfg.ackEvery, OnEvent: onEvent, OnConfirm: onConfirm,
		Elsewhere: elsewhere, Token: cfg.token(i), SkipState: true})
	cancel()
	if err != nil {
		fail("dial: %v", err)
		return res
	}
	defer func() {
		cl.Close()
		res.stats = cl.View().Stats
		for _, v := range res.stats.Violations {
			fail("%s", v)
		}
	}()

	// Random drops, a Poisson process of rate dropRate per minute.
	dropsDone := make(chan struct{})
	var dropWG sync.WaitGroup
	if cfg.dropRate > 0 {
		dropRNG := rand.New(rand.NewPCG(cfg.seed, uint64(i)+1<<32)) // its own: rng belongs to the session loop
		dropWG.Add(1)
		go func() {
			defer dropWG.Done()
			for {
				wait := time.Duration(dropRNG.ExpFloat64() / cfg.dropRate * float64(time.Minute))
				select {
				case <-dropsDone:
					return
				case <-time.After(wait):
					cl.Drop()
					res.drops++
					cnt.drops.Add(1)
				}
			}
		}()
	}
	defer func() { close(dropsDone); dropWG.Wait() }()

	kinds := make([]string, 0)
	for name, w := range cfg.mix {
		for range w {
			kinds = append(kinds, name)
		}
	}
	slices.Sort(kinds)
	for r := 0; r < cfg.runs; r++ {
		if !deadline.IsZero() && time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		w := workloads[kinds[rng.IntN(len(kinds))]](rng)
		rctx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
		// Start the run; a start lost with a dropped connection is sent again.
		for {
			resumes := cl.View().Stats.Resumes
			var serr error
			switch {
			case w.tasks != nil:
				serr = cl.SolveTasks(rctx, w.tasks)
			case w.adaptive:
				serr = cl.MessageAdaptive(rctx, w.request)
			default:
				serr = cl.Message(rctx, w.request)
			}
			if errors.Is(serr, client.ErrClosed) {
				cancel()
				fail("run %d: the client closed", r+1)
				return res
			}
			if serr != nil {
				// The frame did not leave: the client is between connections.
				// Send it again once it has resumed (or give up with the run).
				if cl.Wait(rctx, func(v client.View) bool { return v.Stats.Resumes > resumes }) != nil {
					break
				}
				continue
			}
			// Sent, but it may be lost with a connection dropped before the
			// server read it: sent again when the run has not started.
			sctx, scancel := context.WithTimeout(rctx, 2*time.Second)
			werr := cl.Wait(sctx, func(client.View) bool { started, _ := tracked.counts(); return started > r })
			scancel()
			if werr == nil || rctx.Err() != nil {
				break
			}
		}
		err = cl.Wait(rctx, func(client.View) bool { _, ended := tracked.counts(); return ended > r })
		cancel()
		reason := tracked.lastReason()
		switch {
		case err != nil:
			fail("run %d did not end: %v", r+1, err)
			return res
		case reason != "":
			fail("run %d ended without a final answer: %s", r+1, reason)
		}
		res.runs++
		cnt.runs.Add(1)
	}
	return res
}

func report(cfg config, results []sessionResult, took time.Duration) Report {
	rep := Report{Sessions: cfg.sessions, Seconds: took.Seconds(), Violations: []string{}}
	var lat []time.Duration
	for _, r := range results {
		rep.Runs += r.runs
		rep.Events += r.stats.Events
		rep.Drops += r.drops
		rep.Resumes += r.stats.Resumes
		rep.Resyncs += r.stats.Resyncs
		rep.Duplicates += r.stats.Duplicates
		rep.ServerErrors += r.stats.Errors
		rep.Violations = append(rep.Violations, r.violations...)
		lat = append(lat, r.latencies...)
	}
	rep.ViolationsNum = len(rep.Violations)
	if len(rep.Violations) > 20 {
		rep.Violations = rep.Violations[:20]
	}
	rep.EventsPerSec = float64(rep.Events) / took.Seconds()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))]) / float64(time.Millisecond)
	}
	rep.LatencyP50MS, rep.LatencyP95MS, rep.LatencyP99MS, rep.LatencyMaxMS = pct(0.50), pct(0.95), pct(0.99), pct(1)
	return rep
}

func printReport(w io.Writer, r Report) {
	fmt.Fprintf(w, "sessions %d  runs %d  events %d  in %.1fs  → %.0f events/s\n", r.Sessions, r.Runs, r.Events, r.Seconds, r.EventsPerSec)
	fmt.Fprintf(w, "delivery latency (live events, server timestamp → receipt): p50 %.2fms  p95 %.2fms  p99 %.2fms  max %.2fms\n",
		r.LatencyP50MS, r.LatencyP95MS, r.LatencyP99MS, r.LatencyMaxMS)
	fmt.Fprintf(w, "client CPU %.1fµs per event\n", r.ClientCPUPerEvent)
	fmt.Fprintf(w, "drops %d  resumes %d  resyncs %d  duplicates dropped %d  server errors %d\n",
		r.Drops, r.Resumes, r.Resyncs, r.Duplicates, r.ServerErrors)
	fmt.Fprintf(w, "violations %d\n", r.ViolationsNum)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// idle opens cfg.idle sessions that do nothing, holds them, and closes
// them: the connected-but-idle footprint is measured on the server side
// meanwhile. It prints "idle N connected" once all are up.
func idle(ctx context.Context, cfg config, stdout io.Writer) error {
	clients := make([]*client.Client, 0, cfg.idle)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := range cfg.idle {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := client.Dial(dctx, cfg.urls[i%len(cfg.urls)], &client.Options{Token: cfg.token(i)})
		cancel()
		if err != nil {
			return fmt.Errorf("idle session %d: %w", i, err)
		}
		clients = append(clients, c)
	}
	fmt.Fprintf(stdout, "idle %d connected\n", len(clients))
	select {
	case <-time.After(cfg.hold):
	case <-ctx.Done():
	}
	return nil
}
