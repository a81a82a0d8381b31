package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// Baton on a Redis Cluster (issue 33): two Baton processes on a real
// cluster of three masters, each with a replica; mid-run the cluster
// fails as it does in production, or a Baton node dies, and the run
// goes on, a resume works on either node, and the client gets every event
// once and in order.

// TestRedisClusterFaults: a run of four slow tasks on A; once t1 is done
// the fault strikes, the client drops and resumes on B, and the run ends
// with every task completed once (t1 not run again), through B.
func TestRedisClusterFaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		// fault strikes the cluster or the nodes; session is the run's.
		fault func(t *testing.T, rc *redistest.Cluster, a *node, session string)
		// takeover: B must take the session over.
		takeover bool
	}{
		{name: "the session's master killed", fault: func(t *testing.T, rc *redistest.Cluster, _ *node, session string) {
			masterOf(t, rc, session).Kill(t) // its replica is promoted by the cluster itself
		}},
		{name: "a manual failover of the session's master", fault: func(t *testing.T, rc *redistest.Cluster, _ *node, session string) {
			rc.Failover(t, rc.ReplicasOf(t, masterOf(t, rc, session))[0])
		}},
		{name: "the session's slot migrated", fault: func(t *testing.T, rc *redistest.Cluster, _ *node, session string) {
			from := masterOf(t, rc, session)
			for _, m := range rc.Masters(t) {
				if m != from {
					rc.MoveSlot(t, rc.KeySlot(t, metaKey(session)), m)
					return
				}
			}
		}},
		{name: "the owner killed", takeover: true, fault: func(t *testing.T, _ *redistest.Cluster, a *node, _ string) {
			a.kill(t)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := redistest.StartCluster(t, 3, 1)
			// A is given the cluster's URL, B one node's: it asks that
			// node and finds the cluster.
			a := startNode(t, "A", "127.0.0.1:0", rc.URL())
			b := startNode(t, "B", "127.0.0.1:0", rc.Nodes[len(rc.Nodes)-1].URL())
			ctx := context.Background()

			seqs := newSeqLog()
			cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll, OnEvent: seqs.add})
			if err := cl.SolveTasks(ctx, slowTasks(4)); err != nil {
				t.Fatal(err)
			}
			v := waitView(t, ctx, cl, "t1 completed", func(v client.View) bool {
				return v.Run != nil && len(v.Run.Tasks) == 4 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
			})
			if finished(v) {
				t.Fatal("the run ended before the fault: the test proves nothing")
			}
			tt.fault(t, rc, a, v.SessionID)
			cl.Drop()
			waitView(t, ctx, cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes >= 1 })
			v = waitView(t, ctx, cl, "the final answer after the fault", finished)
			clean(t, v)
			seqs.check(t)
			for _, task := range v.Run.Tasks {
				if task.Status != wsproto.TaskCompleted {
					t.Errorf("task %s ended %s", task.ID, task.Status)
				}
			}
			if v.Run.Tasks[0].Attempt != 1 {
				t.Errorf("t1 ran %d times; a completed task must not run again", v.Run.Tasks[0].Attempt)
			}
			for _, n := range []*node{a, b} {
				if !strings.Contains(n.log.String(), "the Redis Cluster of") {
					t.Errorf("%s did not join through the cluster", n.name)
				}
			}
			if took := strings.Contains(b.log.String(), "session taken over"); took != tt.takeover {
				t.Errorf("B took the session over: %v, want %v", took, tt.takeover)
			}
		})
	}
}

// metaKey is a session's meta hash in Redis.
func metaKey(session string) string { return "baton:{" + session + "}:meta" }

// masterOf is the master serving a session's slot.
func masterOf(t *testing.T, rc *redistest.Cluster, session string) *redistest.Server {
	t.Helper()
	return rc.Serving(t, rc.KeySlot(t, metaKey(session)))
}

// TestRedisClusterPartition: the node running a run (A, in process) is
// cut off from every node of the cluster (a fault proxy per Redis node,
// all partitioned); its lease lapses and it stops its run, B takes the
// run over, the client resumes on B and gets the rest once, and after
// the cut heals A writes nothing more to the session.
func TestRedisClusterPartition(t *testing.T) {
	rc := redistest.StartCluster(t, 3, 1)
	cut := &cutFrom{proxies: map[string]*faultproxy.Proxy{}}
	t.Cleanup(cut.close)
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, dialRedisKey{}, cut.dial)
	done := make(chan error, 1)
	aLog := &logSink{}
	aBase := startServerCtx(t, ctx, done, aLog, "--store", "redis", "--redis-url", rc.URL(), "--lease-ttl", "1s",
		"--redis-give-up", "10s", "--sim-delay", "30ms", "--retry-base", "20ms", "--log-level", "debug")
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run A: %v", err)
		}
		if t.Failed() {
			t.Logf("A's log:\n%s", aLog)
		}
	})
	b := startNode(t, "B", "127.0.0.1:0", rc.URL(), "--lease-ttl", "1s")
	aURL := "ws" + strings.TrimPrefix(aBase, "http") + "/ws"

	seqs := newSeqLog()
	cl := clusterClient(t, ctx, []string{aURL, b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll, OnEvent: seqs.add})
	if err := cl.SolveTasks(ctx, slowTasks(4)); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, ctx, cl, "t1 completed", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == 4 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
	})
	if finished(v) {
		t.Fatal("the run ended before the cut: the test proves nothing")
	}
	cut.partition()
	waitLog(t, b, "session taken over")
	cl.Drop()
	v = waitView(t, ctx, cl, "the final answer after the cut", finished)
	cut.heal()
	clean(t, v)
	seqs.check(t)
	if v.Stats.Resumes == 0 {
		t.Error("the client never resumed")
	}
	for _, task := range v.Run.Tasks {
		if task.Status != wsproto.TaskCompleted {
			t.Errorf("task %s ended %s", task.ID, task.Status)
		}
	}
	if v.Run.Tasks[0].Attempt != 1 {
		t.Errorf("t1 ran %d times; a completed task must not run again", v.Run.Tasks[0].Attempt)
	}
	// The store has the session B owns, up to what the client holds.
	meta, err := rc.Client(t).HMGet(ctx, metaKey(v.SessionID), "owner", "last_seq").Result()
	if err != nil {
		t.Fatal(err)
	}
	if owner, last := fmt.Sprint(meta[0]), fmt.Sprint(meta[1]); owner != nodeID(t, b) || last != fmt.Sprint(v.LastSeq) {
		t.Errorf("the store has the session owned by %s up to seq %s; want B (%s), up to the client's %d",
			owner, last, nodeID(t, b), v.LastSeq)
	}
}

// cutFrom dials an in-process node's Redis connections through a fault
// proxy per Redis address, made at its first dial, so that a test can cut
// the node off from every node of a cluster at once — replicas promoted
// later included.
type cutFrom struct {
	mu      sync.Mutex // guards the fields below
	proxies map[string]*faultproxy.Proxy
	cut     bool
}

func (c *cutFrom) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c.mu.Lock()
	p := c.proxies[addr]
	if p == nil {
		var err error
		if p, err = faultproxy.Start(addr); err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if c.cut {
			p.Partition()
		}
		c.proxies[addr] = p
	}
	c.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

func (c *cutFrom) partition() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = true
	for _, p := range c.proxies {
		p.Partition()
	}
}

func (c *cutFrom) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = false
	for _, p := range c.proxies {
		p.Heal()
	}
}

func (c *cutFrom) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.proxies {
		p.Close()
	}
}
