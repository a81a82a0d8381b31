package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// drainingServer is a server a test stops itself, as SIGTERM does (run's
// context ends), and whose end it watches.
type drainingServer struct {
	base    string
	log     *logSink
	stop    context.CancelFunc
	stopped chan struct{} // closed when run has returned
	err     error         // what run returned, once stopped
}

func startDraining(t *testing.T, args ...string) *drainingServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &drainingServer{log: &logSink{}, stop: cancel, stopped: make(chan struct{})}
	s.base = startServerCtx(t, ctx, done, s.log, args...)
	go func() { s.err = <-done; close(s.stopped) }()
	t.Cleanup(func() { cancel(); <-s.stopped })
	return s
}

// waitStopped waits until run has returned, within limit, and returns how
// long that took from since.
func (s *drainingServer) waitStopped(t *testing.T, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	select {
	case <-s.stopped:
	case <-time.After(limit):
		t.Fatalf("run did not return within %s of the stop", limit)
	}
	if s.err != nil {
		t.Errorf("run returned %v", s.err)
	}
	return time.Since(since)
}

// TestDrainLetsRunsFinish: with the memory store, a stop drains: /readyz
// turns 503, new WebSockets are refused, an idle client is closed with
// 1012 at once, and a client whose run is in flight gets the rest of it —
// pipeline.completed and the final answer — then 1012; Baton then exits.
func TestDrainLetsRunsFinish(t *testing.T) {
	t.Parallel()
	s := startDraining(t, "--drain-timeout", "30s")
	if code, _ := readyz(t, s.base); code != http.StatusOK {
		t.Fatalf("/readyz %d before the stop, want 200", code)
	}
	busy, _ := connect(t, s.base)
	idle, _ := connect(t, s.base)
	busy.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{sleepTask("a", "2s"), sleepTask("b", "1ms", "a")}})
	busy.until(wsproto.EventSolverStart)

	began := time.Now()
	s.stop()
	if code := idle.closeCode(); code != websocket.StatusServiceRestart {
		t.Errorf("the idle client was closed with %d, want 1012", code)
	}
	// Task a sleeps on: the drain goes on, and the server says so.
	if code, body := readyz(t, s.base); code != http.StatusServiceUnavailable || body["reason"] != "draining" {
		t.Errorf("/readyz while draining: %d %v, want 503 draining", code, body)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ws, resp, err := websocket.Dial(dctx, wsURL(s.base), nil); err == nil {
		ws.CloseNow()
		t.Errorf("a new WebSocket was accepted while draining")
	} else if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new WebSocket while draining: %v, want 503", err)
	}

	frames := busy.until(wsproto.EventFinalAnswer)
	var status string
	for _, f := range frames {
		if f.Event == wsproto.EventPipelineCompleted {
			status = meta[wsproto.PipelineCompleted](t, f).Status
		}
	}
	if status != wsproto.StatusSucceeded {
		t.Errorf("pipeline.completed status %q, want succeeded", status)
	}
	if code := busy.closeCode(); code != websocket.StatusServiceRestart {
		t.Errorf("the busy client was closed with %d after its run, want 1012", code)
	}
	s.waitStopped(t, began, 15*time.Second)
	for _, want := range []struct {
		msg   string
		attrs map[string]any
	}{
		{"draining: waiting for the runs in flight", map[string]any{"runs": 1, "connections": 2}},
		{"run ended", map[string]any{"outcome": "succeeded"}},
		{"drained: every run has ended", nil},
		{"stopped", nil},
	} {
		if s.log.find(t, want.msg, want.attrs) == nil {
			t.Errorf("no log %q %v", want.msg, want.attrs)
		}
	}
}

// TestDrainTimeout: a run that cannot finish within --drain-timeout is
// cancelled when it passes, its client closed with 1012, and Baton exits
// soon after.
func TestDrainTimeout(t *testing.T) {
	t.Parallel()
	const drain = 300 * time.Millisecond
	s := startDraining(t, "--drain-timeout", drain.String())
	c, _ := connect(t, s.base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{sleepTask("a", "60s")}})
	c.until(wsproto.EventSolverStart)

	began := time.Now()
	s.stop()
	if code := c.closeCode(); code != websocket.StatusServiceRestart {
		t.Errorf("the client was closed with %d, want 1012", code)
	}
	took := s.waitStopped(t, began, drain+closeGrace)
	if took < drain {
		t.Errorf("Baton exited %s after the stop, before the drain timeout (%s)", took, drain)
	}
	if bound := drain + 5*time.Second; took > bound {
		t.Errorf("Baton exited %s after the stop, want under %s", took, bound)
	}
	for _, want := range []struct {
		msg   string
		attrs map[string]any
	}{
		{"drain timed out; the runs left are cancelled", map[string]any{"runs_left": 1}},
		{"run ended", map[string]any{"outcome": "cancelled", "reason": "server_closed"}},
		{"stopped", nil},
	} {
		if s.log.find(t, want.msg, want.attrs) == nil {
			t.Errorf("no log %q %v", want.msg, want.attrs)
		}
	}
}

// TestClusterDrainHandsOver: with the Redis store, SIGTERM on the node
// running a run hands the run over at once: another node takes it over
// well before the stopped node's 3 s liveness lease could have lapsed —
// at once when the client, closed with 1012, resumes there, or on that
// node's next look for orphans when no client is attached — and the run
// finishes there. A logs the run's end here as handed_over.
func TestClusterDrainHandsOver(t *testing.T) {
	for _, tt := range []struct {
		name     string
		attached bool // a client is attached to the run's session on A
	}{
		{name: "client attached", attached: true},
		{name: "no client"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rds := redistest.Start(t)
			a := startNode(t, "A", "127.0.0.1:0", rds.URL())
			b := startNode(t, "B", "127.0.0.1:0", rds.URL())
			ctx := context.Background()

			var cl *client.Client
			if tt.attached {
				cl = clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll})
				if err := cl.SolveTasks(ctx, slowTasks(4)); err != nil {
					t.Fatal(err)
				}
				waitView(t, ctx, cl, "t1 completed and t2 running", func(v client.View) bool {
					return v.Run != nil && len(v.Run.Tasks) == 4 &&
						v.Run.Tasks[0].Status == wsproto.TaskCompleted && v.Run.Tasks[1].Status == wsproto.TaskRunning
				})
			} else {
				c, _ := connect(t, "http://"+a.addr)
				c.send("user.solve_tasks", map[string]any{"tasks": slowTasks(4)})
				c.until(wsproto.EventSolverCompleted) // t1
				c.ws.Close(websocket.StatusNormalClosure, "")
			}

			// A renewed its lease (3 s) less than a second before the
			// signal, so it could not lapse before 2 s after it: a
			// takeover sooner is the drain's doing.
			const lapse = 2 * time.Second
			began := time.Now()
			a.cmd.Process.Signal(syscall.SIGTERM)
			deadline := began.Add(10 * time.Second)
			for !strings.Contains(b.log.String(), "session taken over") {
				if time.Now().After(deadline) {
					t.Fatal("B did not take the run over within 10s of A's SIGTERM")
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(began)
			t.Logf("B took the run over %s after A's SIGTERM", took)
			if took >= lapse {
				t.Errorf("B took the run over %s after A's SIGTERM, want under %s (before A's lease could lapse)", took, lapse)
			}
			a.wait(t)
			if code := a.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("A exited with %d", code)
			}
			if tt.attached {
				v := waitView(t, ctx, cl, "the final answer on B", finished)
				clean(t, v)
				if v.Run.Tasks[0].Attempt != 1 {
					t.Errorf("t1 ran %d times; a completed task must not run again", v.Run.Tasks[0].Attempt)
				}
				if !strings.Contains(a.log.String(), "close_status=1012") {
					t.Errorf("A closed no client with 1012")
				}
			} else {
				eventually(t, "the run's end on B", func() bool {
					return strings.Contains(b.log.String(), `msg="run ended" outcome=succeeded`)
				})
			}
			// A logged (and counted) the run it stopped as handed over,
			// not as a cancelled one.
			for _, want := range []string{"draining: clients closed to resume elsewhere", `msg="run ended" outcome=handed_over`, "stopped"} {
				if !strings.Contains(a.log.String(), want) {
					t.Errorf("A's log lacks %q", want)
				}
			}
			if strings.Contains(a.log.String(), "outcome=cancelled") {
				t.Errorf("A logged a run as cancelled:\n%s", a.log.String())
			}
		})
	}
}

// TestDrainCancelsRunsWaitingOnAbsentUsers: with the memory store, a run
// that waits on its user while no connection is attached cannot finish —
// no one can connect to answer — so the drain cancels it at once (reason
// user_absent) instead of waiting out --drain-timeout: when it already
// waits at the drain's start, when its client leaves during the drain,
// or when it comes to ask during the drain with no one attached. A run
// without a client that computes, or whose question expires within the
// drain, is waited for as before.
func TestDrainCancelsRunsWaitingOnAbsentUsers(t *testing.T) {
	t.Parallel()
	const drain = 30 * time.Second
	tests := []struct {
		name string
		args []string
		// before brings the run where the test wants it, then stops the
		// server; it returns the client if one is still attached.
		before func(t *testing.T, s *drainingServer, c *conn)
		// during acts on the drain once it has begun (nil: nothing).
		during           func(t *testing.T, s *drainingServer, c *conn)
		outcome, reason  string
		cancelsForAbsent bool // "draining: cancelling a run that waits on a user …" is logged
	}{
		{
			name: "waits at the drain's start",
			before: func(t *testing.T, s *drainingServer, c *conn) {
				runToConfirm(t, c, "Compare three databases")
				leave(t, s, c)
			},
			outcome: "cancelled", reason: "user_absent", cancelsForAbsent: true,
		},
		{
			name: "its client leaves during the drain",
			before: func(t *testing.T, s *drainingServer, c *conn) {
				runToConfirm(t, c, "Compare three databases")
			},
			during: func(t *testing.T, s *drainingServer, c *conn) {
				leave(t, s, c)
			},
			outcome: "cancelled", reason: "user_absent", cancelsForAbsent: true,
		},
		{
			name: "asks during the drain with no one attached",
			before: func(t *testing.T, s *drainingServer, c *conn) {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
					sleepTask("a", "300ms"), failTask("b", "[sim:fail=permanent*1]", "a")}})
				c.until(wsproto.EventSolverStart)
				leave(t, s, c)
			},
			outcome: "cancelled", reason: "user_absent", cancelsForAbsent: true,
		},
		{
			name: "computes with no one attached",
			before: func(t *testing.T, s *drainingServer, c *conn) {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{sleepTask("a", "300ms"), sleepTask("b", "1ms", "a")}})
				c.until(wsproto.EventSolverStart)
				leave(t, s, c)
			},
			outcome: "succeeded",
		},
		{
			name: "its question expires within the drain",
			args: []string{"--confirm-timeout", "500ms"},
			before: func(t *testing.T, s *drainingServer, c *conn) {
				runToConfirm(t, c, "Compare three databases")
				leave(t, s, c)
			},
			outcome: "confirm_timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startDraining(t, append([]string{"--drain-timeout", drain.String()}, tt.args...)...)
			c, _ := connect(t, s.base)
			tt.before(t, s, c)
			began := time.Now()
			s.stop()
			if tt.during != nil {
				eventually(t, "the drain to begin", func() bool { code, _ := readyz(t, s.base); return code == http.StatusServiceUnavailable })
				tt.during(t, s, c)
			}
			// Well before the drain timeout: each of these runs ends in
			// about a second at most.
			took := s.waitStopped(t, began, 10*time.Second)
			t.Logf("Baton exited %s after the stop (--drain-timeout %s)", took, drain)
			want := map[string]any{"outcome": tt.outcome}
			if tt.reason != "" {
				want["reason"] = tt.reason
			}
			if s.log.find(t, "run ended", want) == nil {
				t.Errorf("no log \"run ended\" %v:\n%s", want, s.log.String())
			}
			const cancelling = "draining: cancelling a run that waits on a user who is not connected"
			if got := s.log.find(t, cancelling, nil) != nil; got != tt.cancelsForAbsent {
				t.Errorf("logged %q: %v, want %v", cancelling, got, tt.cancelsForAbsent)
			}
			if s.log.find(t, "drained: every run has ended", nil) == nil {
				t.Errorf("the drain did not end with every run ended")
			}
		})
	}
}

// leave closes the client's connection and waits until the server has
// let it go.
func leave(t *testing.T, s *drainingServer, c *conn) {
	t.Helper()
	c.ws.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(10 * time.Second)
	for s.log.find(t, "connection closed", map[string]any{"end": "client closed"}) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the server to let the client go; its log:\n%s", s.log.String())
		}
		time.Sleep(5 * time.Millisecond) // polling a log line, which stays
	}
}

// TestStopWithRedisStalled: a node told to stop stops within its drain
// timeout whatever Redis does — here Redis stalls (SIGSTOP) while the
// node's expiry sweeper has sessions to delete from it, each call a store
// timeout unanswered, and while clients are attached to runs in flight,
// whose detaches, seals and flushes Redis never answers either. (A node
// once went on sweeping 10,000 such sessions for 40 minutes after
// SIGTERM; another took its drain timeout plus 10 s and more.)
func TestStopWithRedisStalled(t *testing.T) {
	tests := []struct {
		name string
		// load makes the node's work for Redis, and says what to wait for
		// once Redis stalls ("" for nothing).
		load func(t *testing.T, base string) (logged string)
	}{
		{name: "the sweeper has expired sessions to delete", load: func(t *testing.T, base string) string {
			for range 20 {
				c, _ := connectStored(t, base)
				c.ws.Close(websocket.StatusNormalClosure, "")
			}
			return "delete an expired session from the store" // one sweep timed out, others to do
		}},
		{name: "clients attached to runs in flight", load: func(t *testing.T, base string) string {
			for range 20 {
				c, _ := connect(t, base)
				c.message("plan a trip")
				c.until(wsproto.EventUserConfirm) // waiting on its user
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rds := redistest.Start(t)
			const drain = 2 * time.Second
			// A lease that outlasts the test: a lapse would give the
			// sessions up before they expire.
			n := startNode(t, "A", "127.0.0.1:0", rds.URL(), "--idle-session-ttl", "1s", "--drain-timeout", drain.String(),
				"--lease-ttl", "5m", "--max-sessions-per-ip", "0", "--rate-limit", "0")
			logged := tt.load(t, "http://"+n.addr)
			rds.Pause(t) // continued and killed when t ends
			if logged != "" {
				waitLog(t, n, logged)
			}
			began := time.Now()
			n.cmd.Process.Signal(syscall.SIGTERM)
			n.wait(t)
			// The drain timeout, and the process's exit on a loaded machine.
			if took, limit := time.Since(began), drain+time.Second; took > limit {
				t.Errorf("the node took %v to stop, past its drain timeout (%v)", took.Round(time.Millisecond), drain)
			} else {
				t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
			}
		})
	}
}
