package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/wsproto"
)

// A resume storm (-storm N): N sessions connect to the first -url and each
// starts a planned run, which then waits for its plan to be confirmed: every
// run is in flight. Then every connection is dropped at once (no close
// handshake) — or, with -storm-kill, the server they are on is killed — and
// every session resumes at once, on the same server or (-resume-elsewhere)
// on the next -url. The storm is measured from the drop until the last
// session has resumed. Then each session confirms its plan and its run must
// end in a final answer, every event delivered exactly once across the drop
// (the client's checks, as in every load).

// StormReport is the outcome of a resume storm.
type StormReport struct {
	Sessions int `json:"sessions"`
	// Resumed counts the sessions that resumed within -storm-timeout.
	Resumed int `json:"resumed"`
	// ResumeP50MS.. are the times from the drop until each session had
	// resumed; SecondsToAll is the time until every one had.
	ResumeP50MS  float64 `json:"resume_p50_ms"`
	ResumeP99MS  float64 `json:"resume_p99_ms"`
	ResumeMaxMS  float64 `json:"resume_max_ms"`
	SecondsToAll float64 `json:"seconds_to_all_resumed"`
	// ConnectSeconds is how long the N sessions took to connect and start
	// their runs, before the storm.
	ConnectSeconds float64 `json:"connect_seconds"`
	Resyncs        int     `json:"resyncs"`
	Rejections     int     `json:"rejections"`
	// ServerErrors counts the system.error frames the sessions got (a
	// resume the server could not make now counts here, and is retried).
	ServerErrors int `json:"server_errors"`
	// Runs counts the runs that ended in a final answer after the storm.
	Runs   int `json:"runs"`
	Events int `json:"events"`
	// ServerCPUSeconds is the server's CPU time (user and system) from the
	// drop until every session had resumed: -server-pid's, else the
	// -debug-addr servers'. ServerPeakRSSMB is -server-pid's peak resident
	// memory over the same window, ServerRSSBeforeMB its resident memory
	// just before the drop; 0 without -server-pid.
	ServerCPUSeconds  float64 `json:"server_cpu_seconds,omitempty"`
	ServerRSSBeforeMB float64 `json:"server_rss_before_mb,omitempty"`
	ServerPeakRSSMB   float64 `json:"server_peak_rss_mb,omitempty"`
	// ToolCPUSeconds is the tool's own CPU time over the same window (its
	// 10,000 clients reconnecting are work too, on the same machine).
	ToolCPUSeconds float64 `json:"tool_cpu_seconds"`
	// ListenOverflows counts the connections the kernel dropped over the
	// same window because a listen queue was full (TcpExt ListenOverflows
	// of /proc/net/netstat, the whole machine's; Linux): each costs its
	// client a SYN retransmission, 1 s then doubling.
	ListenOverflows int64    `json:"listen_overflows"`
	Violations      []string `json:"violations"`
	ViolationsNum   int      `json:"violation_count"`
}

// stormSession is one session of a storm.
type stormSession struct {
	cl     *client.Client
	runs   *runs
	events atomic.Int64

	mu       sync.Mutex // guards the fields below
	pending  string     // the open plan confirmation's step id
	released bool       // the storm is over: confirmations are answered
	answered string     // the step answered by release
}

// onConfirm holds the plan's confirmation open until the storm is over:
// the run stays in flight across the drop. A confirmation the run asks
// after that is answered at once.
func (s *stormSession) onConfirm(c wsproto.UserConfirm) *client.Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.released {
		s.pending = c.StepID
		return nil
	}
	if c.StepID == s.answered { // a resync's snapshot shows it open still
		return nil
	}
	return client.AgreeAll(c)
}

func (s *stormSession) pendingStep() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending
}

// release answers the held confirmation; an answer lost with a connection
// is sent again by the client after its resume.
func (s *stormSession) release(ctx context.Context) error {
	s.mu.Lock()
	s.released, s.answered = true, s.pending
	step := s.pending
	s.mu.Unlock()
	yes := true
	for {
		resumes := s.cl.View().Stats.Resumes
		err := s.cl.Respond(ctx, step, client.Answer{Confirmed: &yes})
		if err == nil || errors.Is(err, client.ErrClosed) {
			return err
		}
		if err := s.cl.Wait(ctx, func(v client.View) bool { return v.Stats.Resumes > resumes }); err != nil {
			return err
		}
	}
}

// eachParallel runs fn for 0..n-1 on at most width goroutines at once.
func eachParallel(n, width int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func storm(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	n := cfg.storm
	rep := StormReport{Sessions: n, Violations: []string{}}
	var elsewhere []string
	if cfg.elsewhere {
		elsewhere = cfg.urls[1:]
	}
	sessions := make([]*stormSession, n)
	defer func() {
		eachParallel(n, 256, func(i int) {
			if s := sessions[i]; s != nil {
				s.cl.Close()
			}
		})
	}()
	progress := func(format string, args ...any) {
		if !cfg.quiet {
			fmt.Fprintf(stderr, format+"\n", args...)
		}
	}

	// Connect, and start a run in each session.
	began := time.Now()
	var connectErr atomic.Pointer[error]
	eachParallel(n, 64, func(i int) {
		if connectErr.Load() != nil || ctx.Err() != nil {
			return
		}
		s := &stormSession{runs: newRuns()}
		onEvent := func(f client.Frame) {
			s.runs.frame(f)
			if wsproto.Sequenced(f.Event) {
				s.events.Add(1)
			}
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cl, err := client.Dial(dctx, cfg.urls[0], &client.Options{Resume: true, ResumeDelay: cfg.resumeDelay, AckEvery: cfg.ackEvery, OnEvent: onEvent,
			OnConfirm: s.onConfirm, Elsewhere: elsewhere, Token: cfg.token(i), SkipState: true})
		if err != nil {
			err = fmt.Errorf("could not connect (storm session %d of %d): %s: %w", i+1, n, cfg.urls[0], err)
			connectErr.CompareAndSwap(nil, &err)
			return
		}
		s.cl = cl
		sessions[i] = s
		if err := cl.Message(dctx, fmt.Sprintf("Storm request %d", i)); err != nil {
			err = fmt.Errorf("storm session %d: start its run: %w", i+1, err)
			connectErr.CompareAndSwap(nil, &err)
			return
		}
		if err := cl.Wait(dctx, func(client.View) bool { return s.pendingStep() != "" }); err != nil {
			err = fmt.Errorf("storm session %d: its plan was not put to it: %w", i+1, err)
			connectErr.CompareAndSwap(nil, &err)
		}
	})
	if p := connectErr.Load(); p != nil {
		return *p
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rep.ConnectSeconds = time.Since(began).Seconds()
	progress("storm: %d sessions connected, each with a run waiting, in %.1fs", n, rep.ConnectSeconds)

	// The storm.
	resumesBefore := make([]int, n)
	for i, s := range sessions {
		resumesBefore[i] = s.cl.View().Stats.Resumes
	}
	var pidBefore pidStats
	var serverBefore serverStats
	var err error
	if cfg.serverPID > 0 {
		if pidBefore, err = readPID(cfg.serverPID, true); err != nil {
			return err
		}
	} else if len(cfg.debugAddrs) > 0 {
		if serverBefore, err = readServers(ctx, cfg.debugAddrs); err != nil {
			return err
		}
	}
	overflows := listenOverflows()
	dropped, toolCPU := time.Now(), proc.CPU()
	if cfg.stormKill > 0 {
		if err := syscall.Kill(cfg.stormKill, syscall.SIGKILL); err != nil {
			return fmt.Errorf("-storm-kill %d: %w", cfg.stormKill, err)
		}
	}
	for _, s := range sessions {
		s.cl.Drop()
	}
	var lat histogram
	var resumed, stopped atomic.Int64
	var last atomic.Int64 // ns after the drop
	sctx, cancel := context.WithTimeout(ctx, cfg.stormTimeout)
	eachParallel(n, n, func(i int) {
		cl := sessions[i].cl
		if cl.Wait(sctx, func(v client.View) bool { return v.Stats.Resumes > resumesBefore[i] }) != nil {
			if sctx.Err() == nil {
				stopped.Add(1) // rejected, or closed
			}
			return
		}
		d := time.Since(dropped)
		lat.record(d)
		resumed.Add(1)
		for m := last.Load(); int64(d) > m && !last.CompareAndSwap(m, int64(d)); m = last.Load() {
		}
	})
	cancel()
	rep.ToolCPUSeconds = (proc.CPU() - toolCPU).Seconds()
	rep.ListenOverflows = listenOverflows() - overflows
	if cfg.serverPID > 0 {
		after, err := readPID(cfg.serverPID, false)
		if err != nil {
			return err
		}
		rep.ServerCPUSeconds = (after.cpu - pidBefore.cpu).Seconds()
		rep.ServerRSSBeforeMB, rep.ServerPeakRSSMB = float64(pidBefore.rss)/(1<<20), float64(after.peak)/(1<<20)
	} else if len(cfg.debugAddrs) > 0 {
		if after, err := readServers(ctx, cfg.debugAddrs); err == nil {
			rep.ServerCPUSeconds = float64(after.CPUNs-serverBefore.CPUNs) / 1e9
		}
	}
	rep.Resumed = int(resumed.Load())
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rep.ResumeP50MS, rep.ResumeP99MS, rep.ResumeMaxMS = ms(lat.quantile(0.50)), ms(lat.quantile(0.99)), ms(lat.quantile(1))
	rep.SecondsToAll = time.Duration(last.Load()).Seconds()
	progress("storm: %d of %d resumed in %.2fs; confirming the plans", rep.Resumed, n, rep.SecondsToAll)

	// Every run must end in a final answer, with every event once.
	var fails sync.Mutex
	fail := func(format string, args ...any) {
		fails.Lock()
		defer fails.Unlock()
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	var runsDone atomic.Int64
	eachParallel(n, n, func(i int) {
		s := sessions[i]
		if s.cl.View().Stats.Resumes <= resumesBefore[i] {
			return // counted apart: not resumed
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
		defer cancel()
		if err := s.release(rctx); err != nil {
			fail("session %d: confirm its plan: %v", i, err)
			return
		}
		if err := s.cl.Wait(rctx, func(client.View) bool { _, ended := s.runs.counts(); return ended > 0 }); err != nil {
			fail("session %d: its run did not end: %v", i, err)
			return
		}
		if why := s.runs.lastReason(); why != "" {
			fail("session %d: its run ended without a final answer: %s", i, why)
			return
		}
		runsDone.Add(1)
	})
	rep.Runs = int(runsDone.Load())
	eachParallel(n, 256, func(i int) { sessions[i].cl.Close() })
	for i, s := range sessions {
		st := s.cl.View().Stats
		rep.Resyncs += st.Resyncs
		rep.Rejections += st.Rejected
		rep.ServerErrors += st.Errors
		rep.Events += int(s.events.Load())
		for _, v := range st.Violations {
			fail("session %d: %s", i, v)
		}
	}
	rep.ViolationsNum = len(rep.Violations)
	if len(rep.Violations) > 20 {
		rep.Violations = rep.Violations[:20]
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printStorm(stdout, rep)
	}
	var errs []error
	if rep.ViolationsNum > 0 {
		errs = append(errs, errViolations)
	}
	if rep.Resumed < n {
		errs = append(errs, fmt.Errorf("%d of %d sessions did not resume within -storm-timeout %v (%d stopped: rejected or closed)",
			n-rep.Resumed, n, cfg.stormTimeout, stopped.Load()))
	}
	return errors.Join(errs...)
}

func printStorm(w io.Writer, r StormReport) {
	fmt.Fprintf(w, "storm: %d sessions (connected with runs waiting in %.1fs), %d resumed; all in %.2fs: p50 %.0fms  p99 %.0fms  max %.0fms\n",
		r.Sessions, r.ConnectSeconds, r.Resumed, r.SecondsToAll, r.ResumeP50MS, r.ResumeP99MS, r.ResumeMaxMS)
	if r.ServerCPUSeconds > 0 {
		fmt.Fprintf(w, "server: CPU %.2fs", r.ServerCPUSeconds)
		if r.ServerPeakRSSMB > 0 {
			fmt.Fprintf(w, ", RSS %.0f MB before, peak %.0f MB", r.ServerRSSBeforeMB, r.ServerPeakRSSMB)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "load tool: CPU %.2fs  listen queue overflows (the machine's) %d\n", r.ToolCPUSeconds, r.ListenOverflows)
	fmt.Fprintf(w, "resyncs %d  rejections %d  server errors %d  runs ended %d  events %d\n",
		r.Resyncs, r.Rejections, r.ServerErrors, r.Runs, r.Events)
	fmt.Fprintf(w, "violations %d\n", r.ViolationsNum)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}
