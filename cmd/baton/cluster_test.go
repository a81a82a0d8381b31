package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// The cluster tests run Baton as real processes sharing a real
// redis-server: a process can then be killed with SIGKILL mid-run, as a
// node dies.

// startNode starts a Baton process on addr with --store redis, and waits
// until it listens.
func startNode(t *testing.T, name, addr, redisURL string, extra ...string) *node {
	t.Helper()
	args := append([]string{"--addr", addr, "--store", "redis", "--redis-url", redisURL,
		"--sim-delay", "30ms", "--retry-base", "20ms", "--log-level", "debug"}, extra...)
	return startBaton(t, name, args...)
}

// clusterClient dials the first URL and resumes on the others in turn.
func clusterClient(t *testing.T, ctx context.Context, urls []string, opts client.Options) *client.Client {
	t.Helper()
	opts.Resume = true
	opts.Elsewhere = urls[1:]
	cl, err := client.Dial(ctx, urls[0], &opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func waitView(t *testing.T, ctx context.Context, cl *client.Client, what string, cond func(client.View) bool) client.View {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := cl.Wait(wctx, cond); err != nil {
		v := cl.View()
		t.Fatalf("waiting for %s: %v (phase %q, seq %d, stats %+v)", what, err, v.Phase, v.LastSeq, v.Stats)
	}
	return cl.View()
}

func finished(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }

// clean fails t if the client saw anything but a contiguous, checked
// stream of events.
func clean(t *testing.T, v client.View) {
	t.Helper()
	if len(v.Stats.Violations) > 0 || v.Stats.Duplicates > 0 {
		t.Errorf("violations %q, duplicates %d", v.Stats.Violations, v.Stats.Duplicates)
	}
}

// slowTasks are tasks the simulated model takes a while over.
func slowTasks(n int) []wsproto.Task {
	tasks := make([]wsproto.Task, n)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: fmt.Sprintf("Task %d", i+1),
			Description: "Work through it [sim:sleep=1s]"}
		if i > 0 {
			tasks[i].DependsOn = []string{tasks[i-1].ID}
		}
	}
	return tasks
}

// TestClusterResumeOnAnotherNode: a run starts on A; the client drops and
// resumes on B, which replays what it missed from Redis; it confirms the
// plan through B, A runs the tasks, and the client gets every event
// through B, once each and in order.
func TestClusterResumeOnAnotherNode(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()

	var errs frameLog
	cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 5, OnEvent: func(f client.Frame) {
		if f.Event == wsproto.EventError {
			errs.add(f)
		}
	}})
	if err := cl.Message(ctx, "Compare three databases for a small team"); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, ctx, cl, "the plan's confirmation", func(v client.View) bool {
		return v.Run != nil && len(v.Run.PendingConfirm) == 1
	})
	stepID := v.Run.PendingConfirm[0].StepID
	cl.Drop()
	waitView(t, ctx, cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes == 1 })
	yes := true
	if err := cl.Respond(ctx, stepID, client.Answer{Confirmed: &yes}); err != nil {
		t.Fatal(err)
	}
	v = waitView(t, ctx, cl, "the final answer", finished)
	clean(t, v)
	if v.Stats.Resyncs != 0 || v.Stats.Errors != 0 {
		t.Errorf("resyncs %d, errors %d; want a plain replay and no error", v.Stats.Resyncs, v.Stats.Errors)
		for _, f := range errs.all() {
			t.Logf("error: %s %s", f.Content, f.Metadata)
		}
	}
	if !strings.Contains(b.log.String(), "session resumed from the store") {
		t.Errorf("B did not serve the resume from the store")
	}
	// The session B made for the connection before it resumed is gone
	// from Redis: only the resumed one is left.
	if keys, err := rds.Client(t).Keys(ctx, "baton:{*}:meta").Result(); err != nil || len(keys) != 1 {
		t.Errorf("sessions in Redis: %q (%v), want the resumed one only", keys, err)
	}
	if strings.Contains(b.log.String(), "session taken over") {
		t.Errorf("B took the session over while A lived")
	}
}

// TestClusterReplacedAcrossNodes: a resume on B closes the session's
// connection on A with 4000.
func TestClusterReplacedAcrossNodes(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())

	first, hello := connectStored(t, "http://"+a.addr)
	second := resume(t, "http://"+b.addr, hello, 0, "")
	second.expect(wsproto.EventConnected)
	if code := first.closeCode(); code != wsproto.CloseSessionReplaced {
		t.Errorf("A's connection ended with %d, want %d", code, wsproto.CloseSessionReplaced)
	}
}

// TestClusterOwnerKilled: the node running a run dies (SIGKILL) mid-solve.
// The client, on the dead node or on the other one, ends with every event
// once and in order and the final answer; the tasks completed before the
// kill are not run again.
func TestClusterOwnerKilled(t *testing.T) {
	for _, tt := range []struct {
		name string
		// onB: the client is attached through B (a proxy) when A dies;
		// otherwise it is on A and resumes on B.
		onB bool
	}{
		{name: "client on the owner"},
		{name: "client on the other node", onB: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rds := redistest.Start(t)
			a := startNode(t, "A", "127.0.0.1:0", rds.URL())
			b := startNode(t, "B", "127.0.0.1:0", rds.URL())
			ctx := context.Background()

			cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll})
			if err := cl.SolveTasks(ctx, slowTasks(4)); err != nil {
				t.Fatal(err)
			}
			if tt.onB {
				waitView(t, ctx, cl, "the run's first event", func(v client.View) bool { return v.LastSeq > 0 })
				cl.Drop()
				waitView(t, ctx, cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes == 1 })
			}
			v := waitView(t, ctx, cl, "t1 completed and t2 running", func(v client.View) bool {
				return v.Run != nil && len(v.Run.Tasks) == 4 &&
					v.Run.Tasks[0].Status == wsproto.TaskCompleted && v.Run.Tasks[1].Status == wsproto.TaskRunning
			})
			if finished(v) {
				t.Fatal("the run ended before the kill: the test proves nothing")
			}
			a.kill(t)
			v = waitView(t, ctx, cl, "the final answer after the kill", finished)
			clean(t, v)
			for _, task := range v.Run.Tasks {
				if task.Status != wsproto.TaskCompleted {
					t.Errorf("task %s ended %s", task.ID, task.Status)
				}
			}
			if v.Run.Tasks[0].Attempt != 1 {
				t.Errorf("t1 ran %d times; a completed task must not run again", v.Run.Tasks[0].Attempt)
			}
			if !strings.Contains(b.log.String(), "session taken over") {
				t.Errorf("B did not take the session over")
			}
		})
	}
}

// TestRestartLosesNothing: a single Baton with --store redis is stopped
// mid-run (SIGTERM, or SIGKILL) and started again on the same address; the
// client resumes exactly where it was, and the run finishes.
func TestRestartLosesNothing(t *testing.T) {
	for _, tt := range []struct {
		name string
		stop func(*node, *testing.T)
	}{
		{"SIGTERM", (*node).stop},
		{"SIGKILL", (*node).kill},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rds := redistest.Start(t)
			addr := freeAddr(t)
			first := startNode(t, "first", addr, rds.URL())
			ctx := context.Background()
			cl := clusterClient(t, ctx, []string{first.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll})
			if err := cl.SolveTasks(ctx, slowTasks(3)); err != nil {
				t.Fatal(err)
			}
			waitView(t, ctx, cl, "t1 completed", func(v client.View) bool {
				return v.Run != nil && len(v.Run.Tasks) == 3 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
			})
			tt.stop(first, t)
			again := startNode(t, "again", addr, rds.URL())
			v := waitView(t, ctx, cl, "the final answer after the restart", finished)
			clean(t, v)
			if v.Stats.Resyncs != 0 || v.Stats.Rejected != 0 {
				t.Errorf("resyncs %d, rejected %d; want plain replays", v.Stats.Resyncs, v.Stats.Rejected)
			}
			if v.Run.Tasks[0].Attempt != 1 {
				t.Errorf("t1 ran %d times; a completed task must not run again", v.Run.Tasks[0].Attempt)
			}
			if !strings.Contains(again.log.String(), "session taken over") {
				t.Errorf("the restarted node did not take the session over")
			}
		})
	}
}

// TestRedisRestart: Redis restarts empty under a running Baton. Sessions
// are gone: the client learns it from resume_rejected, never from a gap.
func TestRedisRestart(t *testing.T) {
	rds := redistest.Start(t)
	n := startNode(t, "A", "127.0.0.1:0", rds.URL())
	ctx := context.Background()
	cl := clusterClient(t, ctx, []string{n.url()}, client.Options{OnConfirm: client.AgreeAll})
	if err := cl.SolveTasks(ctx, slowTasks(2)); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cl, "the run's first events", func(v client.View) bool { return v.LastSeq >= 2 })
	rds.Restart(t)
	v := waitView(t, ctx, cl, "the outcome of the lost session", func(v client.View) bool {
		return v.Stats.Rejected > 0 || v.Stats.Resyncs > 0
	})
	clean(t, v)
	select {
	case <-cl.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not stop after resume_rejected")
	}
	if v.Stats.Rejected != 1 {
		t.Errorf("rejected %d, resyncs %d; want the session rejected", v.Stats.Rejected, v.Stats.Resyncs)
	}
	// The server keeps serving: a new session works.
	cl2 := clusterClient(t, ctx, []string{n.url()}, client.Options{OnConfirm: client.AgreeAll})
	if err := cl2.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A", Description: "quick"}}); err != nil {
		t.Fatal(err)
	}
	clean(t, waitView(t, ctx, cl2, "a new session's answer", finished))
}
