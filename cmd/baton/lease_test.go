package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestClusterPubSubBlink: Redis drops the nodes' subscriptions (CLIENT
// KILL TYPE pubsub, over and over) while a client of A's resumes on B.
// A's lease holds, so B proxies to A: the run is not cancelled on A and
// restarted on B, and no task runs twice.
func TestClusterPubSubBlink(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()

	cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll})
	if err := cl.SolveTasks(ctx, slowTasks(3)); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cl, "t1 running", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == 3 && v.Run.Tasks[0].Status == wsproto.TaskRunning
	})

	// The kills go on until the resume is answered: A's subscription,
	// which go-redis makes again after each, is missing most of the time.
	kills := rds.Client(t)
	stormCtx, stopStorm := context.WithCancel(ctx)
	var storm sync.WaitGroup
	var killed int
	storm.Add(1)
	go func() {
		defer storm.Done()
		for stormCtx.Err() == nil {
			if n, err := kills.Do(stormCtx, "CLIENT", "KILL", "TYPE", "pubsub").Int(); err == nil {
				killed += n
			}
		}
	}()
	cl.Drop()
	waitView(t, ctx, cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes >= 1 })
	stopStorm()
	storm.Wait()
	if killed == 0 {
		t.Fatal("no subscription was killed: the test proves nothing")
	}

	v := waitView(t, ctx, cl, "the final answer", finished)
	clean(t, v)
	for _, task := range v.Run.Tasks {
		if task.Status != wsproto.TaskCompleted || task.Attempt != 1 {
			t.Errorf("task %s ended %s at attempt %d; want completed at its first", task.ID, task.Status, task.Attempt)
		}
	}
	if !strings.Contains(b.log.String(), "session resumed from the store") {
		t.Errorf("B did not serve the resume from the store")
	}
	if strings.Contains(b.log.String(), "session taken over") {
		t.Errorf("B took the session over from a live A")
	}
}

// TestClusterGoneOrphanForgotten: a dead node's runs set names a session
// whose keys are gone from Redis. The hunt forgets it once: the entry
// leaves the set, the dead node leaves the node list, and no node tries to
// claim it again.
func TestClusterGoneOrphanForgotten(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	ctx := context.Background()
	rdb := rds.Client(t)

	forgotten := func(session string) int {
		n := 0
		for line := range strings.Lines(a.log.String()) {
			if strings.Contains(line, "orphaned run forgotten") && strings.Contains(line, session) {
				n++
			}
		}
		return n
	}
	// dead plants a node that died with a run in a session Redis no
	// longer holds, and waits until the hunt has forgotten it (in Redis,
	// and in A's log, written after).
	dead := func(node, session string) {
		t.Helper()
		if err := rdb.SAdd(ctx, "baton:{nodes}:"+node+":runs", session).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SAdd(ctx, "baton:{nodes}", node).Err(); err != nil {
			t.Fatal(err)
		}
		eventually(t, node+" forgotten", func() bool {
			listed, err := rdb.SIsMember(ctx, "baton:{nodes}", node).Result()
			runs, err2 := rdb.Exists(ctx, "baton:{nodes}:"+node+":runs").Result()
			return err == nil && err2 == nil && !listed && runs == 0 && forgotten(session) > 0
		})
	}
	dead("node_dead1", "sess_gone1")
	// A second one, forgotten by a later hunt: by then the first has had
	// its chance to be tried again.
	dead("node_dead2", "sess_gone2")

	for _, s := range []string{"sess_gone1", "sess_gone2"} {
		if n := forgotten(s); n != 1 {
			t.Errorf("%s forgotten %d times, want once", s, n)
		}
	}
	if strings.Contains(a.log.String(), "take an orphaned run over") {
		t.Errorf("the hunt failed to take a run over:\n%s", a.log.String())
	}
}
