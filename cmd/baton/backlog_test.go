package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/metricstest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestDurableBacklog: with the Redis store a client gets events once Redis
// holds them, so a stall of Redis piles a run's events up, and they become
// durable together. A client reading at full speed then gets them all, in
// order: the backlog is the store's, not the client's, and is no reason to
// close it as too slow (1013).
//
// The agent loop asks the model and runs a tool only once the store holds
// what came before (the round journal), so a stall stops each task at its
// next call: what piles up is what the tasks in flight say until then. 100
// tasks at once, each in a model call when Redis stalls, say two events
// each when the call returns (its progress and its first tool call): 200,
// far more than the send queue's 80.
func TestDurableBacklog(t *testing.T) {
	rds := redistest.Start(t)
	// A ring of 16: the send queue holds 80 frames, and the store gives
	// up on a ring after 1,024 waiting entries; the stall makes between.
	// Each of the 100 tasks takes 12 s in three model calls of 4 s. A
	// lease of 30 s: the node gives its sessions up when it could not
	// renew its lease for four fifths of it, and the stall here lasts
	// until a model call ends.
	base := startServer(t, "--store", "redis", "--redis-url", rds.URL(), "--buffer-size", "16", "--sim-delay", "0",
		"--max-tasks", "100", "--max-parallel", "100", "--lease-ttl", "30s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var seqs []uint64
	running := map[string]bool{}
	allRunning := make(chan struct{})
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{OnEvent: func(f client.Frame) {
		mu.Lock()
		defer mu.Unlock()
		if f.Seq != 0 {
			seqs = append(seqs, f.Seq)
		}
		if id, ok := f.MetaString("task_id"); ok && f.Event == wsproto.EventSolverStart && len(running) < 100 {
			running[id] = true
			if len(running) == 100 {
				close(allRunning)
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	tasks := make([]wsproto.Task, 100)
	for i := range tasks {
		tasks[i] = sleepTask(fmt.Sprintf("t%d", i+1), "12s")
	}
	if err := cl.SolveTasks(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	// Every task has started, and the client has every event the run
	// made: Redis holds them all, so each task is in a model call (4 s),
	// which a stall of the store does not hold up.
	select {
	case <-allRunning:
	case <-ctx.Done():
		t.Fatal("the 100 tasks did not all start")
	}
	var before float64
	for {
		before, _ = metricstest.Scrape(t, base+"/metrics").Sum("baton_events_total", "")
		mu.Lock()
		got := len(seqs)
		mu.Unlock()
		if float64(got) == before {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the client has %d events of the run's %v", got, before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	rds.Pause(t)
	paused := true
	defer func() {
		if paused {
			rds.Continue(t)
		}
	}()
	// Far more than the send queue holds wait for Redis.
	for {
		n, _ := metricstest.Scrape(t, base+"/metrics").Sum("baton_events_total", "")
		if n >= before+150 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%v events made while Redis stalled: want 150 or more", n-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rds.Continue(t)
	paused = false

	if err := cl.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
		t.Fatalf("the run did not reach its final answer on the client: %v (client: %v)", err, cl.Err())
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("event %d has seq %d: want every event, in order", i+1, s)
		}
	}
	if len(seqs) < int(before)+150 {
		t.Fatalf("got %d events, want the %v or more the run made", len(seqs), before+150)
	}
}

// TestDurableSlowReader: the room a durable delivery has beyond the send
// queue (TestDurableBacklog) is the store's bound on what may wait for it,
// not a way out of being judged slow: a client that never reads, on a
// session kept in Redis, still overflows its queue (and is closed with
// 1013), with no more queued for it than its queue and that bound.
func TestDurableSlowReader(t *testing.T) {
	rds := redistest.Start(t)
	logs := &logSink{}
	// A ring of 16: the send queue holds 80 frames and the store lets
	// 1,024 entries wait; the run makes some 3,900 events of up to 8 KB.
	// A write may take 5 minutes: the queue, not the write's deadline,
	// must end this.
	base := startServerLogging(t, logs, "--store", "redis", "--redis-url", rds.URL(), "--buffer-size", "16",
		"--ping-interval", "1h", "--pong-timeout", "5m", "--workspace", bigWorkspace(t),
		"--max-rounds", "16", "--tool-result-limit", "8000", "--max-tasks", "100", "--sim-delay", "0")
	// Some 2,700 events must be made before the queue overflows (the
	// socket's 4 MiB, a writer's batch and the queue, each up to 1,104
	// frames); a machine under load makes them in 10 to 60 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slow, hello := dialNoRead(t, base)
	tasks := make([]wsproto.Task, 100)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Read",
			Description: strings.Repeat(`[sim:tool=read_file {"path":"big.txt"}] `, 12), DependsOn: []string{}}
	}
	slow.send("user.solve_tasks", map[string]any{"tasks": tasks})
	// The close follows once the writer's blocked write gives up (5
	// minutes here); the overflow is what ends the connection.
	var overflow map[string]any
	for overflow == nil {
		if ctx.Err() != nil {
			ev, _ := metricstest.Scrape(t, base+"/metrics").Sum("baton_events_total", "")
			t.Fatalf("the slow client's queue did not overflow; the run made %v events", ev)
		}
		time.Sleep(10 * time.Millisecond)
		overflow = logs.find(t, "send queue overflow; closing slow client", map[string]any{"session": hello.SessionID})
	}
	if q, _ := overflow["queued"].(float64); q > 80+1024 {
		t.Fatalf("%v frames were queued for the slow client: want at most its queue (80) and the store's backlog bound (1,024)", q)
	}
}
