package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// countTool is the tool of lapseTasks: it counts its executions on one
// node and tells each on called; with block, an execution returns only
// when its ctx ends, as a long tool call does.
type countTool struct {
	block  bool
	calls  atomic.Int32
	called chan struct{} // one value per execution (buffered)
}

const countToolName = "lapse_count"

func newCountTool(block bool) *countTool {
	return &countTool{block: block, called: make(chan struct{}, 16)}
}

func (*countTool) Spec() tool.Spec {
	return tool.Spec{Name: countToolName, Description: "Counts its calls."}
}

func (c *countTool) Call(ctx context.Context, _ json.RawMessage) (string, error) {
	c.calls.Add(1)
	c.called <- struct{}{}
	if c.block {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "counted", nil
}

// waitCall waits for an execution of the tool.
func (c *countTool) waitCall(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.called:
	case <-time.After(60 * time.Second):
		t.Fatalf("no execution of the tool: %s", what)
	}
}

// lapseNode is a Baton node in this process on a shared Redis, with the
// count tool, whose lease renewals the test can cut (RenewHook).
type lapseNode struct {
	name string
	base string
	log  *logWatch
	tool *countTool
	cut  atomic.Bool // while set, the node's lease renewals fail
	stop func()      // shuts the node down and waits for it; idempotent
}

var errRenewalCut = errors.New("the test cut this node's lease renewals")

// startLapseNode starts a node on rds; hook, if set, is its AdoptHook.
func startLapseNode(t *testing.T, name string, rds *redistest.Server, blockingTool bool,
	hook func(context.Context, string), extra ...string) *lapseNode {
	t.Helper()
	n := &lapseNode{name: name, log: newLogWatch(), tool: newCountTool(blockingTool)}
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, tuneKey{}, func(o *orchestrator.Options, c *redisstore.ClusterOptions) {
		if err := o.Loop.Tools.Add(n.tool); err != nil {
			t.Errorf("node %s: add the count tool: %v", name, err)
		}
		o.AdoptHook = hook
		c.RenewHook = func(context.Context) error {
			if n.cut.Load() {
				return errRenewalCut
			}
			return nil
		}
	})
	done := make(chan error, 1)
	args := append([]string{"--store", "redis", "--redis-url", rds.URL(), "--log-level", "debug"}, extra...)
	n.base = startServerCtx(t, ctx, done, io.MultiWriter(n.log), args...)
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node %s: run returned %v", name, err)
			}
		})
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			t.Logf("node %s's log:\n%s", name, n.log.buf.String())
		}
	})
	return n
}

// waitForAny waits until the log holds one of ss, and returns it.
func (l *logWatch) waitForAny(t *testing.T, ss ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		l.mu.Lock()
		log, more := l.buf.String(), l.more
		l.mu.Unlock()
		for _, s := range ss {
			if strings.Contains(log, s) {
				return s
			}
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("the log never said any of %q", ss)
		}
	}
}

// TestLapseDuringAdoption: node A takes over a session whose node (C)
// left during a tool call, and its lease lapses while the takeover is
// under way — claimed, not started (an AdoptHook holds it). A must start
// no run then: another node may claim the session from it at any moment
// (B does, once A's lease has lapsed in Redis), and a run started on A
// would make the call again while B makes it too. The session's next
// tool call — C's, made again as a retry after the takeover — runs
// exactly once, on B, and the run ends there.
func TestLapseDuringAdoption(t *testing.T) {
	rds := redistest.Start(t)

	// C runs the session into its tool call, and leaves: the call began
	// and never returned, so whoever continues the run makes it again.
	c := startLapseNode(t, "C", rds, true, nil)
	ws, _ := connect(t, c.base)
	ws.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		{ID: "t1", Title: "Count", Description: "[sim:tool=" + countToolName + " {}]"}}})
	c.tool.waitCall(t, "C's run never called the tool")
	ws.ws.CloseNow() // gone with C, without waiting for C's close handshake
	c.stop()

	// A's hunt claims the session from C, and is held there.
	hold, adopting, release := holdFirstAdoption()
	a := startLapseNode(t, "A", rds, true, hold, "--lease-ttl", "1s")
	select {
	case <-adopting:
	case <-time.After(60 * time.Second):
		t.Fatal("A never took the session over")
	}
	// A's lease lapses (its renewals fail from now on, its other traffic
	// flows), and A is told: then the takeover goes on.
	a.cut.Store(true)
	a.log.waitFor(t, `"msg":"lease lapsed: giving every session up"`)
	close(release)
	const started, abandoned = `"msg":"session taken over"`, `"msg":"takeover abandoned`
	if a.log.waitForAny(t, started, abandoned) == started {
		// The run went on on A: let it reach its tool call before B
		// is there to claim the session from it, as a run started after
		// the lapse may.
		a.tool.waitCall(t, "A's run, started after its lease lapsed, never called the tool")
	}

	// B finds A's lease lapsed in Redis, claims the session and runs it
	// to its end.
	b := startLapseNode(t, "B", rds, false, nil)
	b.tool.waitCall(t, "B never made the session's next tool call")
	b.log.waitFor(t, `"msg":"run ended"`)
	if onA, onB := a.tool.calls.Load(), b.tool.calls.Load(); onA != 0 || onB != 1 {
		t.Errorf("the session's next tool call ran %d times on A, whose lease lapsed during its takeover, and %d on B; want once, on B",
			onA, onB)
	}
}
