package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// The Redis faults of issue 24, one test each. Every Baton node is a real
// process that talks to a real redis-server through a fault proxy of its
// own (internal/faultproxy), so a fault may hit one node or all of them;
// the client is the Go client, resuming on the other node when its
// connection drops. Each task calls a tool of a test MCP server that
// records every execution in a file of its node, so a run that goes on in
// two places at once shows.

// faultNode is a Baton process behind its fault proxy.
type faultNode struct {
	*node
	proxy *faultproxy.Proxy
	ran   string // the file its tool executions are recorded in
}

// faultTool is the test MCP server's tool the tasks call: it runs without
// asking (readOnlyHint) and records each execution.
const faultTool = "ft__read_only"

// startFaultNode starts a Baton process on rds through a new fault proxy,
// with extra flags. The proxy is closed after the process is killed.
func startFaultNode(t *testing.T, name string, rds *redistest.Server, extra ...string) *faultNode {
	t.Helper()
	p, err := faultproxy.Start(rds.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close %s's proxy: %v", name, err)
		}
	})
	ran := filepath.Join(t.TempDir(), name+".ran")
	args := append([]string{"--mcp", mcptestServer(t, "ft", "-tools", "consent", "-ran", ran)}, extra...)
	n := startNode(t, name, "127.0.0.1:0", "redis://"+p.Addr()+"/0", args...)
	return &faultNode{node: n, proxy: p, ran: ran}
}

// executions is how many times the node has run the tool.
func (n *faultNode) executions(t *testing.T) int { return len(ran(t, n.ran)) }

// toolTasks are n tasks in a chain, each calling the tool calls times over
// about a second.
func toolTasks(n, calls int) []wsproto.Task {
	tasks := slowTasks(n)
	for i := range tasks {
		tasks[i].Description = strings.Repeat("[sim:tool="+faultTool+" {}] ", calls) + "[sim:sleep=1s]"
	}
	return tasks
}

// faultRun is one fault case: a two-node cluster, a client on A that
// resumes on B, and a run in flight.
type faultRun struct {
	t      *testing.T
	ctx    context.Context
	rds    *redistest.Server
	a, b   *faultNode
	cl     *client.Client
	errs   frameLog
	tasks  int
	calls  int
	killed int // pub/sub connections killed
}

// proxies are every node's proxy, for a fault of Redis itself.
func (r *faultRun) proxies() []*faultproxy.Proxy {
	return []*faultproxy.Proxy{r.a.proxy, r.b.proxy}
}

// startFaultRun starts the cluster on rds with nodeArgs and a run of tasks
// tasks of calls tool calls each, and waits until its first task runs.
func startFaultRun(t *testing.T, rds *redistest.Server, tasks, calls int, nodeArgs ...string) *faultRun {
	t.Helper()
	return startFaultRunOn(t, rds, tasks, calls, false, nodeArgs...)
}

// startFaultRunOn is startFaultRun; with onB, the client resumes on B
// only (ten times before it would try A again), and sends no ack: nothing
// it sends makes B close its connection for a resume elsewhere.
func startFaultRunOn(t *testing.T, rds *redistest.Server, tasks, calls int, onB bool, nodeArgs ...string) *faultRun {
	t.Helper()
	r := &faultRun{t: t, ctx: context.Background(), rds: rds, tasks: tasks, calls: calls}
	r.a = startFaultNode(t, "A", rds, nodeArgs...)
	r.b = startFaultNode(t, "B", rds, nodeArgs...)
	urls, ackEvery := []string{r.a.url(), r.b.url()}, 3
	if onB {
		ackEvery = 0
		for range 9 {
			urls = append(urls, r.b.url())
		}
	}
	r.cl = clusterClient(t, r.ctx, urls, client.Options{AckEvery: ackEvery, OnConfirm: client.AgreeAll,
		OnEvent: func(f client.Frame) {
			if f.Event == wsproto.EventError {
				r.errs.add(f)
			}
		}})
	if err := r.cl.SolveTasks(r.ctx, toolTasks(tasks, calls)); err != nil {
		t.Fatal(err)
	}
	waitView(t, r.ctx, r.cl, "t1 running", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == tasks && v.Run.Tasks[0].Status == wsproto.TaskRunning
	})
	return r
}

// ended waits for the run's final answer and checks what every fault
// must keep: the client saw each seq once and in order (a resync is
// allowed), every task completed, and neither node panicked.
func (r *faultRun) ended() client.View {
	t := r.t
	t.Helper()
	v := waitView(t, r.ctx, r.cl, "the run's final answer", func(v client.View) bool {
		return finished(v) || v.Stats.Rejected > 0
	})
	if v.Stats.Rejected > 0 {
		t.Fatalf("the session was rejected (%d) before the run ended", v.Stats.Rejected)
	}
	clean(t, v)
	for _, task := range v.Run.Tasks {
		if task.Status != wsproto.TaskCompleted {
			t.Errorf("task %s ended %s", task.ID, task.Status)
		}
	}
	for _, n := range []*faultNode{r.a, r.b} {
		log := n.log.String()
		for _, bad := range []string{"panic:", "fatal error:", "WARNING: DATA RACE"} {
			if strings.Contains(log, bad) {
				t.Errorf("node %s's log says %q", n.name, bad)
			}
		}
	}
	for _, f := range r.errs.all() {
		t.Logf("system.error: %s %s", f.Content, f.Metadata)
	}
	t.Logf("resumes %d, resyncs %d, errors %d; tool executions A %d, B %d",
		v.Stats.Resumes, v.Stats.Resyncs, v.Stats.Errors, r.a.executions(t), r.b.executions(t))
	return v
}

// executedOnce checks that each tool call of the run was executed once,
// on whichever node: no fault that moves no run may repeat one.
func (r *faultRun) executedOnce() {
	r.t.Helper()
	if got, want := r.a.executions(r.t)+r.b.executions(r.t), r.tasks*r.calls; got != want {
		r.t.Errorf("tool executions %d (A %d, B %d), want %d: each once", got,
			r.a.executions(r.t), r.b.executions(r.t), want)
	}
}

// stormPubSub kills every pub/sub connection of the real Redis, over and
// over, until wait is called.
func (r *faultRun) stormPubSub() (wait func()) {
	kills := r.rds.Client(r.t)
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owned by wait
		defer wg.Done()
		for ctx.Err() == nil {
			if n, err := kills.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Int(); err == nil {
				r.killed += n
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// TestRedisFaults: a run goes on through each fault of Redis that leaves
// the node its lease — latency, a stall shorter than the give-up time,
// connection resets, pub/sub connections killed, a crash of a Redis that
// persists (AOF, fsync always) — and ends for a client whose seqs have no
// gap and no duplicate, with every tool call executed once.
func TestRedisFaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		aof  bool     // Redis persists with appendfsync always
		args []string // node flags
		// fault is injected while t1 runs; it returns once it is over.
		fault func(r *faultRun)
	}{
		{
			name: "latency",
			fault: func(r *faultRun) {
				for _, p := range r.proxies() {
					p.SetLatency(50 * time.Millisecond)
				}
				// A resume through the slow Redis, then the rest of t1.
				r.cl.Drop()
				waitView(r.t, r.ctx, r.cl, "a resume on B and t1 completed", func(v client.View) bool {
					return v.Stats.Resumes >= 1 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
				})
				for _, p := range r.proxies() {
					p.SetLatency(0)
				}
			},
		},
		{
			name: "stall shorter than the give-up",
			args: []string{"--redis-give-up", "10s", "--lease-ttl", "10s"},
			fault: func(r *faultRun) {
				for _, p := range r.proxies() {
					p.Stall()
				}
				stalled := time.NewTimer(2 * time.Second) // the fault's length, not a wait for anything
				defer stalled.Stop()
				<-stalled.C
				for _, p := range r.proxies() {
					p.Unstall()
				}
			},
		},
		{
			name: "connection resets",
			fault: func(r *faultRun) {
				for i := 0; i < 5; i++ {
					seq := r.cl.View().LastSeq
					for _, p := range r.proxies() {
						p.Reset()
					}
					// The next reset once the run has written again.
					waitView(r.t, r.ctx, r.cl, "an event after the reset", func(v client.View) bool { return v.LastSeq > seq })
				}
			},
		},
		{
			name: "pub/sub connections killed",
			fault: func(r *faultRun) {
				wait := r.stormPubSub()
				r.cl.Drop()
				waitView(r.t, r.ctx, r.cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes >= 1 })
				wait()
				if r.killed == 0 {
					r.t.Fatal("no subscription was killed: the test proves nothing")
				}
			},
		},
		{
			name: "Redis restarted with AOF",
			aof:  true,
			fault: func(r *faultRun) {
				r.rds.Restart(r.t)
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rds *redistest.Server
			if tt.aof {
				rds = redistest.StartAOF(t, "always")
			} else {
				rds = redistest.Start(t)
			}
			r := startFaultRun(t, rds, 2, 3, tt.args...)
			tt.fault(r)
			r.ended()
			r.executedOnce()
			if log := r.b.log.String(); strings.Contains(log, "session taken over") {
				t.Errorf("B took the session over from a live A")
			}
		})
	}
}

// TestRedisStallPast: Redis stalls (both nodes' proxies hold every byte)
// past what a node waits for it — the give-up time of a session's writes,
// or its own lease — and A gives the session up and closes the client's
// connection. The client's resume, once Redis answers, finds the session
// adopted on A again, or taken over by B (whose hunt found A's lease
// lapsed), and the run ends there. It never runs in two places, and no
// tool call that returned before the stall runs again (the round journal).
func TestRedisStallPast(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		// said is what A's log says once the stall has reached it.
		said string
		// onB: the client resumes on B only, which proxies to A: A must
		// adopt the session it gave up by itself.
		onB bool
	}{
		{name: "give-up", args: []string{"--redis-give-up", "1s", "--lease-ttl", "30s"}, said: `msg="session lost"`},
		{name: "give-up, the client resuming on B", args: []string{"--redis-give-up", "1s", "--lease-ttl", "30s"},
			said: `msg="session lost"`, onB: true},
		{name: "lease", args: []string{"--redis-give-up", "30s", "--lease-ttl", "1s"}, said: `msg="lease lapsed: giving every session up"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rds := redistest.Start(t)
			r := startFaultRunOn(t, rds, 2, 3, tt.onB, tt.args...)
			for _, p := range r.proxies() {
				p.Stall()
			}
			waitLog(t, r.a.node, tt.said)
			for _, p := range r.proxies() {
				p.Unstall()
			}
			v := r.ended()
			if v.Stats.Resumes == 0 {
				t.Error("the client never resumed: the stall did not reach the session")
			}
			// The loop runs a tool only once the store holds its call, and
			// asks the model only once it holds the results: what the run
			// did before the stall is journaled, and only a call the stall
			// cut short runs again.
			if got, all := r.a.executions(t)+r.b.executions(t), r.tasks*r.calls; got < all || got > all+1 {
				t.Errorf("tool executions %d, want %d, or %d with the one the stall cut short again", got, all, all+1)
			}
		})
	}
}

// TestRedisPartition: A is cut off from Redis (its proxy resets every
// connection and refuses new ones) while B keeps it. A's lease lapses, B
// takes A's run over, and the client, resuming on B, gets the run's end
// there. A must stop the run itself, before B continues it: no tool
// execution of A's after B took over. Once healed, A's writes of the
// session are refused (fencing): the stream holds only what the client
// got.
func TestRedisPartition(t *testing.T) {
	rds := redistest.Start(t)
	// The give-up time is the default's ten times the lease: A cannot
	// count on it to stop in time.
	r := startFaultRun(t, rds, 3, 3, "--lease-ttl", "1s", "--redis-give-up", "10s")
	waitView(t, r.ctx, r.cl, "a first tool call", func(v client.View) bool { return r.a.executions(t) > 0 })
	r.a.proxy.Partition()
	waitLog(t, r.b.node, "session taken over")
	atTakeover := r.a.executions(t)
	r.cl.Drop() // the client, on A, resumes on B
	v := r.ended()
	if v.Stats.Resumes == 0 {
		t.Error("the client never resumed")
	}
	r.a.proxy.Heal()
	// A's run ends (it was stopped, or it finished on its own) and its
	// session is lost to B.
	waitLog(t, r.a.node, "run ended")
	if after := r.a.executions(t); after != atTakeover {
		t.Errorf("A executed the tool %d times after B took its run over; its run went on in two places", after-atTakeover)
	}
	if got, all := r.a.executions(t)+r.b.executions(t), r.tasks*r.calls; got < all || got > all+1 {
		t.Errorf("tool executions %d (A %d, B %d), want %d, or %d with the one the cut interrupted again",
			got, r.a.executions(t), r.b.executions(t), all, all+1)
	}
	meta, err := rds.Client(t).HMGet(r.ctx, "baton:{"+v.SessionID+"}:meta", "owner", "last_seq").Result()
	if err != nil {
		t.Fatal(err)
	}
	if owner, last := fmt.Sprint(meta[0]), fmt.Sprint(meta[1]); owner != nodeID(t, r.b.node) || last != fmt.Sprint(v.LastSeq) {
		t.Errorf("the store has the session owned by %s up to seq %s; want B (%s), up to the client's %d",
			owner, last, nodeID(t, r.b.node), v.LastSeq)
	}
}

// nodeID is n's id in the cluster, from its log.
func nodeID(t *testing.T, n *node) string {
	t.Helper()
	for line := range strings.Lines(n.log.String()) {
		if strings.Contains(line, "joined the cluster") {
			_, rest, _ := strings.Cut(line, " node=")
			id, _, _ := strings.Cut(rest, " ")
			return strings.TrimSpace(id)
		}
	}
	t.Fatalf("node %s never joined the cluster", n.name)
	return ""
}

// waitLog waits until n's log holds s.
func waitLog(t *testing.T, n *node, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(n.log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s's log never said %q", n.name, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
