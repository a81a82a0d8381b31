package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

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

// runSession drives one session through its runs.
func runSession(ctx context.Context, cfg config, i int, l *shared) (res sessionResult) {
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
	fail := func(format string, args ...any) {
		res.violations = append(res.violations, fmt.Sprintf("session %d: ", i)+fmt.Sprintf(format, args...))
	}

	tracked := newRuns()
	// A run start sent again (below) that the server had after all is
	// answered busy: the tool knows it re-sent it, so that reply is not
	// one of the server's errors. busyOwed counts the starts re-sent
	// whose reply has not come.
	var busyOwed, busyPaid atomic.Int64
	onEvent := func(f client.Frame) {
		tracked.frame(f)
		if f.Event == wsproto.EventError {
			if code, _ := f.MetaString("code"); code == wsproto.CodeBusy && takeOne(&busyOwed) {
				busyPaid.Add(1)
			}
		}
		if !wsproto.Sequenced(f.Event) {
			return
		}
		l.events.Add(1)
		if !f.Replayed {
			l.latency.record(f.Received.Sub(f.Timestamp))
		}
	}
	first := i % len(cfg.urls)
	var elsewhere []string
	if cfg.elsewhere {
		for k := 1; k < len(cfg.urls); k++ {
			elsewhere = append(elsewhere, cfg.urls[(first+k)%len(cfg.urls)])
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.Dial(dctx, cfg.urls[first], &client.Options{Resume: true, ResumeDelay: cfg.resumeDelay, AckEvery: cfg.ackEvery, OnEvent: onEvent, OnConfirm: client.AgreeAll,
		Elsewhere: elsewhere, Token: cfg.token(i), SkipState: true})
	cancel()
	if err != nil {
		// Not a violation: nothing was delivered wrong. run says it.
		res.connectErr = fmt.Errorf("%s: %w", cfg.urls[first], err)
		return res
	}
	defer func() {
		cl.Close()
		res.stats = cl.View().Stats
		res.resentStarts = int(busyPaid.Load())
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
					l.drops.Add(1)
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
		if !l.deadline.IsZero() && time.Now().After(l.deadline) || ctx.Err() != nil {
			break
		}
		kind := kinds[rng.IntN(len(kinds))]
		w := workloads[kind](rng)
		if l.pace != nil && !l.pace.slot(ctx, kind, l.deadline) {
			break
		}
		// A paced load learns how many events each kind of run brings.
		before := cl.View().Stats.Events
		finish := func() {
			if l.pace != nil {
				l.pace.done(kind, cl.View().Stats.Events-before)
			}
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
		// Start the run; a start lost with a dropped connection is sent again.
		for sent := false; ; {
			resumes := cl.View().Stats.Resumes
			if sent {
				busyOwed.Add(1) // before the send: its reply may come at once
			}
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
				finish()
				fail("run %d: the client closed", r+1)
				return res
			}
			if serr != nil {
				if sent {
					takeOne(&busyOwed) // no reply will come
				}
				// The frame did not leave: the client is between connections.
				// Send it again once it has resumed (or give up with the run).
				if cl.Wait(rctx, func(v client.View) bool { return v.Stats.Resumes > resumes }) != nil {
					break
				}
				continue
			}
			// Sent, but it may be lost with a connection dropped before the
			// server read it: sent again when the run has not started.
			sent = true
			sctx, scancel := context.WithTimeout(rctx, 2*time.Second)
			werr := cl.Wait(sctx, func(client.View) bool { started, _ := tracked.counts(); return started > r })
			scancel()
			if werr == nil || rctx.Err() != nil {
				break
			}
		}
		err = cl.Wait(rctx, func(client.View) bool { _, ended := tracked.counts(); return ended > r })
		cancel()
		finish()
		reason := tracked.lastReason()
		switch {
		case err != nil:
			fail("run %d did not end: %v", r+1, err)
			return res
		case reason != "":
			fail("run %d ended without a final answer: %s", r+1, reason)
		}
		res.runs++
		l.runs.Add(1)
	}
	return res
}

// takeOne takes one from n if it is above zero, and reports whether it did.
func takeOne(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}
