package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// slowSends is a node's cluster whose messages to one node (to) are
// published through another Redis connection (via's), one that passes a
// fault proxy: the connection that carries the node's replies to that one
// node is slow, and only it. In production every Send shares the node's
// pool; a pooled connection that stalls (a lost segment, a half-open
// connection behind a NAT) slows whichever destination's message it
// carries.
type slowSends struct {
	*redisstore.Cluster
	to  string
	via *redisstore.Node
}

func (s slowSends) Send(ctx context.Context, node string, msg []byte) (bool, error) {
	if node == s.to {
		return s.via.Send(ctx, node, msg)
	}
	return s.Cluster.Send(ctx, node, msg)
}

// TestClusterSlowPeerDelaysNoOther: three nodes share a real Redis; A owns
// every session, clients on B and on C are proxied to it. A's replies to
// B go through a fault proxy that adds a second of latency each way, and
// B's clients send commands. Until one of them has its answer — while A's
// reply to B is in flight — C's client's commands are answered
// promptly, a chat it starts streams its events to it, and its connection
// stays open: a slow reply to one node makes no other node's messages
// wait.
func TestClusterSlowPeerDelaysNoOther(t *testing.T) {
	const (
		latency = time.Second // each way: a publish to B takes two
		onB     = 3           // B's clients
		perB    = 3           // the commands each sends at once
		prompt  = time.Second // what C's commands must be answered within
	)
	ctx := context.Background()
	rds := redistest.Start(t)
	proxy, err := faultproxy.Start(rds.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	clA, clB, clC := joinCluster(t, rds), joinCluster(t, rds), joinCluster(t, rds)
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { slow.Close() })
	via, err := redisstore.Join(ctx, slow, "slowpath_"+clA.Node(), redisstore.NodeOptions{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.SetLatency(0)
		via.Leave(ctx)
	})
	// A pooled connection of the slow path, dialled before the latency:
	// A's first reply to B pays the latency, not a handshake's round trips.
	if _, err := via.Send(ctx, "nobody", nil); err != nil {
		t.Fatal(err)
	}
	a := serveNode(t, slowSends{Cluster: clA, to: clB.Node(), via: via})
	b, c := serveNode(t, clB), serveNode(t, clC)

	bs := make([]*wsClient, onB)
	for i := range bs {
		bs[i] = proxied(t, a, b)
	}
	cc := proxied(t, a, c)
	if _, err := cc.command(5 * time.Second); err != nil {
		t.Fatalf("C's command before the fault: %v", err)
	}

	proxy.SetLatency(latency)
	began := time.Now()
	for _, bc := range bs {
		for range perB {
			bc.sendResponse()
		}
	}
	// Each of B's clients reports how its first command went: the first
	// report comes once A has published a reply to B, the slow way.
	type answer struct {
		took time.Duration
		err  error
	}
	firstB := make(chan answer, onB)
	for _, bc := range bs {
		go func() { // owned by the deferred wait below
			d, err := bc.answered(3 * storeTimeout)
			firstB <- answer{d, err}
		}()
	}
	reported := 0
	defer func() {
		for _, bc := range bs {
			bc.WS().CloseNow() // ends the waits at once
		}
		for ; reported < onB; reported++ {
			<-firstB
		}
	}()

	tick := time.NewTicker(50 * time.Millisecond) // C's pace
	defer tick.Stop()
	var took []time.Duration
	var b0 answer
	for reported == 0 {
		d, err := cc.command(2 * storeTimeout)
		if err != nil {
			t.Fatalf("C's command %d (%v into B's slowness): %v; answered before: %v",
				len(took)+1, time.Since(began).Round(time.Millisecond), err, took)
		}
		took = append(took, d)
		select {
		case b0 = <-firstB:
			reported++
		case <-tick.C:
		}
	}
	if b0.err != nil {
		t.Fatalf("B's first answer: %v", b0.err)
	}
	if b0.took < latency {
		t.Fatalf("B's first answer came in %v, under the latency (%v): the test proves nothing", b0.took, latency)
	}
	worst := slices.Max(took)
	t.Logf("while B's first answer took %v, C's %d commands were answered in at most %v", b0.took, len(took), worst)
	if worst > prompt {
		t.Errorf("C's slowest command took %v, want at most %v: it waited for A's replies to B", worst, prompt)
	}

	// A's replies to B's other commands are still on the slow path: C's
	// run streams meanwhile.
	sent := time.Now()
	cc.SendFrame(map[string]any{"event": wsproto.EventUserMessage, "content": "Say hello",
		"metadata": map[string]any{"mode": wsproto.ModeChat}})
	if _, err := cc.next(wsproto.EventPipelineCompleted, 3*time.Second); err != nil {
		t.Fatalf("C's chat: %v", err)
	}
	t.Logf("C's chat streamed to its end in %v", time.Since(sent).Round(time.Millisecond))
	if code := cc.closed(); code != -1 {
		t.Errorf("C's connection closed with %d", code)
	}
}

// storeTimeout is the orchestrator's bound on a forwarded command.
const storeTimeout = 5 * time.Second

// joinCluster joins a new node to the cluster on rds, left and closed when
// t ends (after its server's Close, which is registered later).
func joinCluster(t *testing.T, rds *redistest.Server) *redisstore.Cluster {
	t.Helper()
	cl, err := redisstore.NewCluster(t.Context(), rds.Client(t), redisstore.ClusterOptions{Capacity: buffer.DefaultCapacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// serveNode serves an orchestrator on cl and returns its ws:// URL.
func serveNode(t *testing.T, cl orchestrator.Cluster) string {
	t.Helper()
	d := time.Millisecond
	orch, err := orchestrator.New(orchestrator.Models{
		Planner: &planner.Sim{Delay: d}, Solver: &solver.Sim{Delay: d}, Aggregator: &aggregator.Sim{Delay: d},
	}, &orchestrator.Options{Cluster: cl, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(orch)
	t.Cleanup(func() {
		srv.Close()
		orch.Close(context.Background())
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// wsClient is a WebSocket client of one node; its reader goroutine hands
// every frame to frames until the connection ends, then records why.
type wsClient struct {
	*wstest.Conn
	frames chan client.Frame // each Received when its reader read it
	done   chan struct{}     // closed when the reader ends
	err    error             // why it ended; read after done
	sent   []time.Time       // when each command was sent (sendResponse)
}

func dialNode(t *testing.T, url string) *wsClient {
	t.Helper()
	c := &wsClient{Conn: wstest.Dial(t, url, nil), frames: make(chan client.Frame, 64), done: make(chan struct{})}
	go c.read() // owned by the cleanup below, which waits for it
	t.Cleanup(func() {
		c.WS().CloseNow()
		<-c.done
	})
	return c
}

func (c *wsClient) read() {
	defer close(c.done)
	for {
		f, err := c.Read(context.Background())
		if err != nil {
			c.err = err
			return
		}
		select {
		case c.frames <- f:
		default: // a test that reads nothing more: drop
		}
	}
}

// next returns the next frame with event, skipping others, within d.
func (c *wsClient) next(event string, d time.Duration) (client.Frame, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case f := <-c.frames:
			if f.Event == event {
				return f, nil
			}
		case <-c.done:
			return client.Frame{}, fmt.Errorf("connection ended: %w", c.err)
		case <-t.C:
			return client.Frame{}, fmt.Errorf("no %s in %v", event, d)
		}
	}
}

// sendResponse sends a command the owner answers with an error at once
// (no confirmation has the step id) and changes nothing by: a round trip
// to the owner and back.
func (c *wsClient) sendResponse() {
	c.sent = append(c.sent, time.Now())
	c.SendFrame(map[string]any{"event": wsproto.EventUserResponse, "step_id": "no-such-step",
		"metadata": map[string]any{"confirmed": true}})
}

// answered waits for the answer to the oldest command sent and not yet
// answered, and returns how long it took.
func (c *wsClient) answered(d time.Duration) (time.Duration, error) {
	f, err := c.next(wsproto.EventError, d)
	if err != nil {
		return 0, err
	}
	if len(c.sent) == 0 {
		return 0, errors.New("an answer to no command")
	}
	sent := c.sent[0]
	c.sent = c.sent[1:]
	var e wsproto.Error
	if err := json.Unmarshal(f.Metadata, &e); err != nil || e.Code != wsproto.CodeStepIDMismatch {
		return 0, fmt.Errorf("answer %s (%v), want %s", f.Metadata, err, wsproto.CodeStepIDMismatch)
	}
	return f.Received.Sub(sent), nil
}

// command sends a command and waits up to d for its answer.
func (c *wsClient) command(d time.Duration) (time.Duration, error) {
	c.sendResponse()
	return c.answered(d)
}

// closed is the close code the connection ended with, -1 while it is open.
func (c *wsClient) closed() websocket.StatusCode {
	select {
	case <-c.done:
		return websocket.CloseStatus(c.err)
	default:
		return -1
	}
}

// proxied makes a session on owner and resumes it on node, which serves
// it from the store and forwards its commands to owner.
func proxied(t *testing.T, owner, node string) *wsClient {
	t.Helper()
	first := dialNode(t, owner)
	f, err := first.next(wsproto.EventConnected, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.command(5 * time.Second); err != nil { // the session is used: in the store
		t.Fatal(err)
	}
	var hello wsproto.Connected
	if err := json.Unmarshal(f.Metadata, &hello); err != nil {
		t.Fatal(err)
	}
	first.WS().Close(websocket.StatusNormalClosure, "")
	c := dialNode(t, node)
	if _, err := c.next(wsproto.EventConnected, 5*time.Second); err != nil { // its own fresh session
		t.Fatal(err)
	}
	c.SendFrame(map[string]any{"event": wsproto.EventUserReconnect, "metadata": map[string]any{
		"session_id": hello.SessionID, "resume_token": hello.ResumeToken, "last_seq": 0}})
	f, err = c.next(wsproto.EventConnected, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resumed wsproto.Connected
	if err := json.Unmarshal(f.Metadata, &resumed); err != nil || !resumed.Resumed || resumed.SessionID != hello.SessionID {
		t.Fatalf("resume on the other node: %s (%v)", f.Metadata, err)
	}
	return c
}
