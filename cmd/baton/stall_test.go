package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/wsproto"
)

// A Redis stall: redis-server is paused (SIGSTOP), its connections stay
// open and commands wait. Each command gives up after read_timeout, the
// session's ring after GiveUpAfter, and the node then holds the session no
// more while Redis still names it the owner.

// logWatch is a server's log, which a test waits on for a line.
type logWatch struct {
	mu   sync.Mutex // guards buf and more
	buf  bytes.Buffer
	more chan struct{} // closed and replaced on each write
}

func newLogWatch() *logWatch { return &logWatch{more: make(chan struct{})} }

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	close(l.more)
	l.more = make(chan struct{})
	return len(p), nil
}

// waitFor waits until the log holds s.
func (l *logWatch) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		l.mu.Lock()
		found, more := strings.Contains(l.buf.String(), s), l.more
		l.mu.Unlock()
		if found {
			return
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("the log never said %q", s)
		}
	}
}

// startStalling runs Baton in this process on rds, giving its sessions'
// writes up after 300ms of failures (each command failing after 200ms),
// with tune applied to its options too.
func startStalling(t *testing.T, rds *redistest.Server, tune func(*orchestrator.Options)) (string, *logWatch) {
	t.Helper()
	log := newLogWatch()
	ctx, cancel := context.WithCancel(context.Background())
	ctx = context.WithValue(ctx, tuneKey{}, func(o *orchestrator.Options, c *redisstore.ClusterOptions) {
		c.GiveUpAfter = 300 * time.Millisecond
		if tune != nil {
			tune(o)
		}
	})
	done := make(chan error, 1)
	base := startServerCtx(t, ctx, done, io.MultiWriter(log), "--store", "redis",
		"--redis-url", rds.URL()+"?read_timeout=200ms", "--log-level", "debug")
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", log.buf.String())
		}
	})
	return base, log
}

// TestStallAdopted: a single node on Redis, a run in flight; Redis stalls
// until the node gives the session up. Once Redis answers again, the
// client's resume adopts the session on the node (it is still the owner
// in Redis) and the run goes on to its answer — no resume_rejected.
func TestStallAdopted(t *testing.T) {
	rds := redistest.Start(t)
	base, log := startStalling(t, rds, nil)
	ctx := context.Background()
	cl := clusterClient(t, ctx, []string{wsURL(base)}, client.Options{OnConfirm: client.AgreeAll})
	if err := cl.SolveTasks(ctx, slowTasks(3)); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cl, "the run's first events", func(v client.View) bool { return v.LastSeq >= 2 })
	rds.Pause(t)
	log.waitFor(t, `"msg":"session lost"`)
	rds.Continue(t)
	v := waitView(t, ctx, cl, "the run's answer or a rejection", func(v client.View) bool {
		return finished(v) || v.Stats.Rejected > 0
	})
	if v.Stats.Rejected > 0 {
		t.Fatalf("the resume after the stall was rejected (%d)", v.Stats.Rejected)
	}
	clean(t, v)
}

// holdFirstAdoption returns an AdoptHook that holds the first adoption
// until release is closed (or its ctx ends), having sent its session on
// adopting; the others go on.
func holdFirstAdoption() (hook func(context.Context, string), adopting chan string, release chan struct{}) {
	adopting, release = make(chan string, 1), make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, id string) {
		held := false
		once.Do(func() { held = true })
		if !held {
			return
		}
		adopting <- id
		select {
		case <-release:
		case <-ctx.Done():
		}
	}, adopting, release
}

// TestResumeDuringAdoption: a resume that arrives while the node is
// adopting the session — Redis names the node the owner already, the
// session is not registered yet — waits for the adoption and succeeds.
func TestResumeDuringAdoption(t *testing.T) {
	rds := redistest.Start(t)
	hold, adopting, release := holdFirstAdoption()
	base, log := startStalling(t, rds, func(o *orchestrator.Options) {
		o.AdoptHook = hold
	})
	c, hello := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": slowTasks(2)})
	c.until(wsproto.EventSolverStart)
	rds.Pause(t)
	log.waitFor(t, `"msg":"session lost"`)
	rds.Continue(t)

	first := resume(t, base, hello, 0, "") // adopts, and is held in the adoption
	select {
	case <-adopting:
	case <-time.After(30 * time.Second):
		t.Fatalf("no adoption began; the first resume got %+v", first.next())
	}
	second := resume(t, base, hello, 0, "")
	log.waitFor(t, `"msg":"waiting for the session's adoption under way"`)
	close(release)

	// Neither resume is rejected: each is answered system.connected, or
	// closed with 4000 by the other's attach first. (Which attach wins is
	// not ordered between memory and the store, so both may be replaced:
	// the run's completion after an adoption is TestStallAdopted's.)
	for i, r := range []*conn{second, first} {
		f, err := r.read(30 * time.Second)
		switch {
		case websocket.CloseStatus(err) == wsproto.CloseSessionReplaced:
		case err != nil:
			t.Fatalf("resume %d: read: %v", i, err)
		case f.Event != wsproto.EventConnected:
			t.Fatalf("resume %d answered %s %s, want %s", i, f.Event, f.Metadata, wsproto.EventConnected)
		}
	}
}

// TestTakeoverBusy: with one takeover slot, a resume whose session must be
// taken over while another takeover holds the slot waits TakeoverWait,
// then is answered system.error busy with retry_after_ms, and changes
// nothing but the session's departure, which moves to now (its client is
// there): once the slot is free, the same resume — the same token — takes
// its session over.
func TestTakeoverBusy(t *testing.T) {
	rds := redistest.Start(t)
	hold, adopting, release := holdFirstAdoption()
	base, log := startStalling(t, rds, func(o *orchestrator.Options) {
		o.MaxTakeovers, o.TakeoverWait = 1, 200*time.Millisecond
		o.AdoptHook = hold
	})
	var hellos [2]wsproto.Connected
	for i := range hellos {
		c, hello := connect(t, base)
		c.send("user.solve_tasks", map[string]any{"tasks": slowTasks(2)})
		c.until(wsproto.EventSolverStart)
		hellos[i] = hello
	}
	rds.Pause(t)
	for _, h := range hellos {
		log.waitFor(t, `"msg":"session lost","session":"`+h.SessionID+`"`)
	}
	rds.Continue(t)

	// The node's hunt for orphaned runs, or a resume, takes one session
	// over and is held in it; the other's resume finds no slot.
	first := resumeWith(t, base, hellos[0].SessionID, hellos[0].ResumeToken, 0)
	var held string
	select {
	case held = <-adopting:
	case <-time.After(30 * time.Second):
		t.Fatalf("no takeover began; the first resume got %+v", first.next())
	}
	other := hellos[0]
	if other.SessionID == held {
		other = hellos[1]
	}
	// Its client left four minutes ago, as far as the store knows: a
	// minute before its session would expire (--session-ttl, 5 min).
	ctx := context.Background()
	key, left := "baton:{"+other.SessionID+"}:meta", time.Now().Add(-4*time.Minute).UnixMilli()
	if err := rds.Client(t).HSet(ctx, key, "detached", left).Err(); err != nil {
		t.Fatal(err)
	}
	rds.Client(t).HDel(ctx, key, "conn")
	asked := time.Now().Truncate(time.Millisecond)
	busy := resumeWith(t, base, other.SessionID, other.ResumeToken, 0)
	e := meta[wsproto.Error](t, busy.expect(wsproto.EventError))
	if e.Code != wsproto.CodeBusy || e.RefType != wsproto.EventUserReconnect || e.RetryAfterMS < 50 || e.RetryAfterMS > 15000 {
		t.Fatalf("a resume without a takeover slot was answered %+v; want busy, ref_type %s, retry_after_ms in [50, 15000]",
			e, wsproto.EventUserReconnect)
	}
	// The client is there, though refused: its session's TTL runs from
	// its resume, not from when it left.
	if at, err := rds.Client(t).HGet(ctx, key, "detached").Int64(); err != nil || at < asked.UnixMilli() {
		t.Errorf("after the busy answer the store has the client leaving at %v (%v), want at or after the resume (%v)",
			time.UnixMilli(at), err, asked)
	}
	close(release)

	again := resumeWith(t, base, other.SessionID, other.ResumeToken, 0)
	m := meta[wsproto.Connected](t, again.expect(wsproto.EventConnected))
	if !m.Resumed || m.SessionID != other.SessionID {
		t.Fatalf("the resume after the busy answer got %+v; want session %s resumed", m, other.SessionID)
	}
}

// TestRecordStalled: a connection's fresh session reaches Redis at its
// first frame that is not a resume. When Redis does not answer then, the
// frame is answered system.error internal and not applied — no run starts
// — and once Redis answers, the same frame sent again starts the run.
func TestRecordStalled(t *testing.T) {
	rds := redistest.Start(t)
	base, _ := startStalling(t, rds, nil)
	c, _ := connect(t, base) // its session is recorded at its first frame, or after a second of silence
	rds.Pause(t)
	c.message("A request while Redis stalls")
	e := c.expectError(wsproto.CodeInternal)
	if !strings.Contains(e.Message, "not applied") || e.RefType != wsproto.EventUserMessage {
		t.Fatalf("the unrecorded session's first frame was answered %+v; want internal, not applied, ref_type %s", e, wsproto.EventUserMessage)
	}
	rds.Continue(t)
	c.message("A request once Redis answers")
	c.until(wsproto.EventUserConfirm) // the run started: its plan is put to the user
}
