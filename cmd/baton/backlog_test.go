package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestDurableBacklog: with the Redis store a client gets events once Redis
// holds them, so a stall of Redis piles a run's events up, and they become
// durable together, in one flight. A client reading at full speed then
// gets them all, in order: the backlog is the store's, not the client's,
// and is no reason to close it as too slow (1013).
func TestDurableBacklog(t *testing.T) {
	rds := redistest.Start(t)
	// A ring of 16: the send queue holds 80 frames, and the store gives
	// up on a ring after 1,024 waiting entries; the run makes between.
	// 101 tasks: more than the default cap.
	base := startServer(t, "--store", "redis", "--redis-url", rds.URL(), "--buffer-size", "16", "--sim-delay", "0", "--max-tasks", "101")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	var seqs []uint64
	started := make(chan struct{}, 1)
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{OnEvent: func(f client.Frame) {
		mu.Lock()
		defer mu.Unlock()
		if f.Seq != 0 {
			seqs = append(seqs, f.Seq)
		}
		if f.Event == wsproto.EventSolverStart {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// The run starts (which writes to Redis), its first task takes a
	// while, and Redis stalls meanwhile: the 100 tasks that wait for the
	// first run during the stall.
	tasks := []wsproto.Task{sleepTask("first", "1s")}
	for i := range 100 {
		tasks = append(tasks, wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Task", Description: "Do it.", DependsOn: []string{"first"}})
	}
	if err := cl.SolveTasks(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("no task started")
	}
	rds.Pause(t)
	paused := true
	defer func() {
		if paused {
			rds.Continue(t)
		}
	}()
	// Far more than the send queue holds wait for Redis.
	metricsReach(t, base, want{"baton_events_total", "", 200, false})
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
	if len(seqs) < 200 {
		t.Fatalf("got %d events, want the 200 or more the run made", len(seqs))
	}
}
