// Command baton-load drives any Baton with many sessions and checks, with
// zero tolerance, that no event is lost, duplicated, reordered or sent to
// the wrong session: every session's seqs must be contiguous with no seq
// delivered twice, every frame must carry the session's own session_id,
// every replay must be exactly the events after the client's last seq,
// every resume's checksum must equal the server's, and every run must end
// in agent.final_answer (the client package records the first four as
// violations). What it sent again after a drop and the server already had
// is counted apart from the server's errors. A session that cannot
// connect at all is no violation: the tool exits 1 saying it could not
// connect. A resync's snapshot stands for the events it replaces: a run
// it shows is started, and one it shows over has ended. It answers
// confirmations itself, drops connections at random to exercise resume,
// and reports throughput, delivery latency and CPU per event (its own, and
// with -debug-addr the servers'). With -pace it offers a fixed rate of
// events instead of as many as the servers take (pace.go). With -storm N
// it makes a resume storm instead: N sessions with runs in flight, every
// connection dropped at once, every session resumed at once (storm.go).
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
	cpuProfile string  // a CPU profile of the tool itself is written here
	pace       float64 // events per second offered; 0 for as fast as it goes
	debugAddrs urls    // the servers' --debug-addr, for their CPU and write syscalls
	// A resume storm (storm.go): sessions, how long they have to resume,
	// the server to kill instead of dropping (0: none) and the server whose
	// CPU and memory to read from /proc (0: none).
	storm        int
	stormTimeout time.Duration
	stormKill    int
	resumeDelay  time.Duration
	serverPID    int
}

// token is session i's bearer token, "" when none was given.
func (c *config) token(i int) string {
	if len(c.tokens) == 0 {
		return ""
	}
	return c.tokens[i%len(c.tokens)]
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
	fs.Float64Var(&c.pace, "pace", 0, "offer this many events per second across all sessions, by pacing run starts (0: each session starts its next run at once)")
	fs.Var(&c.debugAddrs, "debug-addr", "a server's --debug-addr (host:port): report its CPU time and write syscalls per event; repeat for several servers (summed)")
	fs.IntVar(&c.storm, "storm", 0, "instead of runs: a resume storm of this many sessions (e.g. 10000): each starts a run that waits for its plan's confirmation, every connection is dropped at once and every session resumes at once; then the plans are confirmed and every run must end")
	fs.DurationVar(&c.stormTimeout, "storm-timeout", time.Minute, "-storm: sessions not resumed by then fail the storm")
	fs.IntVar(&c.stormKill, "storm-kill", 0, "-storm: SIGKILL this process (the server the sessions are on) instead of dropping the connections; use with -resume-elsewhere")
	fs.DurationVar(&c.resumeDelay, "resume-delay", 50*time.Millisecond, "each client's pause before its first reconnection after a drop, spread ±50 % (client.Options.ResumeDelay; the JS client's is 250ms)")
	fs.IntVar(&c.serverPID, "server-pid", 0, "-storm: read this server's CPU time and peak memory during the storm from /proc (Linux)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if len(c.urls) == 0 {
		c.urls = urls{"ws://localhost:8080/ws"}
	}
	if c.sessions < 1 || c.runs < 1 || c.dropRate < 0 || c.ackEvery < 0 || c.pace < 0 || c.storm < 0 {
		return c, errors.New("-sessions and -runs must be at least 1, -drop-rate, -ack-every, -pace and -storm not negative")
	}
	if c.stormKill > 0 && (!c.elsewhere || len(c.urls) < 2) {
		return c, errors.New("-storm-kill needs -resume-elsewhere and a second -url to resume on")
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

// errViolations makes run (and so main) fail when the load found any.
var errViolations = errors.New("violations found")

// shared is what every session of a load shares.
type shared struct {
	deadline time.Time // no run starts after it; zero for none (-duration)
	pace     *pacer    // nil unless -pace
	latency  histogram // of live events, server timestamp to receipt
	// events, runs and drops are counted for the progress line.
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
	if cfg.storm > 0 {
		return storm(ctx, cfg, stdout, stderr)
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
	var serverBefore serverStats
	if len(cfg.debugAddrs) > 0 {
		if serverBefore, err = readServers(ctx, cfg.debugAddrs); err != nil {
			return err
		}
	}

	l := &shared{}
	start, cpuStart := time.Now(), proc.CPU()
	if cfg.duration > 0 {
		l.deadline = start.Add(cfg.duration)
	}
	if cfg.pace > 0 {
		l.pace = newPacer(cfg.pace, start)
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
			results[i] = runSession(ctx, cfg, i, l)
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
					ev := l.events.Load()
					fmt.Fprintf(stderr, "\r%5.0fs  runs %d  events %d  (%d/s)  drops %d   ",
						time.Since(start).Seconds(), l.runs.Load(), ev, ev-last, l.drops.Load())
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

	took := time.Since(start)
	if l.pace != nil {
		// A paced load lasts until its last run's slot is over: a last
		// run quicker than its slot does not count as a burst.
		took = max(took, l.pace.end())
	}
	rep := report(cfg, results, &l.latency, took)
	var connectErr error
	if rep.ConnectFailures > 0 {
		for _, r := range results {
			if r.connectErr != nil {
				connectErr = fmt.Errorf("could not connect (%d of %d sessions): %w", rep.ConnectFailures, cfg.sessions, r.connectErr)
				break
			}
		}
		if rep.ConnectFailures == cfg.sessions {
			return connectErr // there is nothing to report
		}
	}
	cpu := proc.CPU() - cpuStart
	var serverErr error
	if len(cfg.debugAddrs) > 0 {
		var after serverStats
		if after, serverErr = readServers(ctx, cfg.debugAddrs); serverErr == nil {
			rep.ServerCPUPerEvent, rep.ServerWritesPerEvent = after.since(serverBefore, rep.Events)
		}
	}
	if rep.Events > 0 {
		rep.ClientCPUPerEvent = float64(cpu) / float64(time.Microsecond) / float64(rep.Events)
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printReport(stdout, rep)
	}
	if rep.ViolationsNum > 0 {
		return errors.Join(errViolations, connectErr)
	}
	return errors.Join(connectErr, serverErr)
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
		url := cfg.urls[i%len(cfg.urls)]
		c, err := client.Dial(dctx, url, &client.Options{Token: cfg.token(i)})
		cancel()
		if err != nil {
			return fmt.Errorf("could not connect (idle session %d of %d): %s: %w", i+1, cfg.idle, url, err)
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
