package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/clustertest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/wsproto"
)

// watched is a test connection read on a goroutine of its own until it
// ends, so that it answers the server's pings (the token's commit waits
// for its pong) while the test looks on.
type watched struct {
	c         *conn
	connected chan wsproto.Connected // the resume's answer, if any (cap 1)
	errors    chan wsproto.Error     // the system.errors it was sent (cap 8)
	closed    chan websocket.StatusCode
}

func watch(c *conn, answered func()) *watched {
	w := &watched{c: c, connected: make(chan wsproto.Connected, 1), errors: make(chan wsproto.Error, 8),
		closed: make(chan websocket.StatusCode, 1)}
	go func() {
		for {
			f, err := c.read(time.Minute)
			if err != nil {
				w.closed <- websocket.CloseStatus(err)
				return
			}
			if f.Event == wsproto.EventError {
				var e wsproto.Error
				json.Unmarshal(f.Metadata, &e)
				select {
				case w.errors <- e:
				default:
				}
			}
			if f.Event == wsproto.EventConnected {
				var m wsproto.Connected
				if json.Unmarshal(f.Metadata, &m) == nil && m.Resumed {
					w.connected <- m
					answered()
				}
			}
		}
	}()
	return w
}

// TestClusterResumeOrder: two resumes with one token, one on the session's
// owner (A) and one on another node (B), forced through each interleaving
// of their rotations, their attaches in the store and the attach message
// B sends A (internal/clustertest). Whatever the order, exactly one of the
// two connections is left open — the one whose rotation the store
// numbered last — and it holds the token the store accepts; the other is
// closed with 4000 (given no token when it lost before its answer went
// out); the session's earlier connection is closed with 4000; and once the
// winner's client has read its token, the token both presented is refused.
func TestClusterResumeOrder(t *testing.T) {
	rds := redistest.Start(t)
	var seq atomic.Pointer[clustertest.Sequence]
	clusters := map[string]orchestrator.Cluster{}
	start := func(label string) string {
		ctx, cancel := context.WithCancel(context.Background())
		// The owner's handling of an attach message is a step of its own:
		// the Receive loop only queues it (peers.go).
		ctx = context.WithValue(ctx, tuneKey{}, func(o *orchestrator.Options, _ *redisstore.ClusterOptions) {
			o.PeerHook = func(kind, session string) {
				if s := seq.Load(); s != nil && session == s.Session() {
					s.Mark(label + " handled " + kind)
				}
			}
		})
		ctx = context.WithValue(ctx, wrapClusterKey{}, func(cl orchestrator.Cluster) orchestrator.Cluster {
			w := clustertest.Wrap(cl, label, func(c clustertest.Call) {
				if s := seq.Load(); s != nil {
					s.Hook(c)
				}
			})
			clusters[label] = w
			return w
		})
		done := make(chan error, 1)
		logs := &logSink{}
		base := startServerCtx(t, ctx, done, logs, "--store", "redis", "--redis-url", rds.URL(), "--log-level", "debug")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s's log:\n%s", label, logs)
			}
		})
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run %s: %v", label, err)
			}
		})
		return base
	}
	bases := map[string]string{"A": start("A"), "B": start("B")}

	tests := []struct {
		name    string
		steps   []string
		winner  string
		noToken bool // the loser lost before its answer went out
		// stagger sends A's resume more than orchestrator.RotationSkew
		// before B's, instead of both at once.
		stagger bool
	}{
		{
			name:   "the owner answered, then the other node",
			steps:  []string{"A Rotate done", "A Attach done", "A answered", "B Rotate", "B Rotate done", "A Commit"},
			winner: "B",
		},
		{
			name: "the other node answered, then the owner; B's attach message reaches A last",
			steps: []string{"B Rotate done", "B Attach done", "B Send attach done", "A Rotate", "A Rotate done", "B Commit",
				"A Attach done", "A answered", "A Receive attach"},
			winner: "A",
		},
		{
			name:    "B rotated first, A attached first",
			steps:   []string{"B Rotate done", "A Rotate", "A Attach done", "A answered", "B Attach"},
			winner:  "A",
			noToken: true,
		},
		{
			name:    "A rotated first, B's attach message reached A before A attached",
			steps:   []string{"A Rotate done", "B Rotate", "B Attach done", "B Send attach", "A handled attach", "A Attach"},
			winner:  "B",
			noToken: true,
		},
		{
			name: "A rotated first and attached first, B's attach message reached A before A's lock",
			steps: []string{"A Rotate done", "B Rotate", "B Rotate done", "A Attach", "A Attach returned",
				"B Attach", "B Attach done", "B Send attach", "A handled attach", "A Attach done"},
			winner:  "B",
			noToken: true,
		},
		{
			name: "B attached between A's attach and A's lock, its attach message reached A after",
			steps: []string{"A Rotate done", "B Rotate", "B Rotate done", "A Attach", "A Attach returned",
				"B Attach", "B Attach done", "A Attach done", "A Receive attach"},
			winner: "B",
		},
		{
			// The loaded machine's case: a resume carried out after its
			// client gave it up and resumed again elsewhere.
			name:    "A's resume arrived first but rotated after B's was answered",
			steps:   []string{"B Rotate done", "B Attach done", "B answered", "A Rotate", "A Rotate done", "B Commit"},
			stagger: true,
			winner:  "B",
			noToken: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, hello := connectStored(t, bases["A"])
			firstW := watch(first, func() {})
			s := clustertest.NewSequence(hello.SessionID, tt.steps...)
			s.Timeout = 5 * time.Second
			seq.Store(s)
			defer seq.Store(nil)

			resumes := map[string]*watched{}
			for _, label := range []string{"A", "B"} {
				c, _ := connect(t, bases[label])
				resumes[label] = watch(c, func() { s.Mark(label + " answered") })
			}
			req := map[string]any{"session_id": hello.SessionID, "resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""}
			frame, _ := json.Marshal(map[string]any{"event": "user.reconnect_with_state", "metadata": req})
			// Both sent at once: neither waits for the other's answer.
			// Or, staggered, A's first and B's once the time between their
			// arrivals exceeds the skew (a wait for time to pass, which the
			// rule is about: no order hangs on it).
			wrote := make(chan error, 2)
			for _, label := range []string{"A", "B"} {
				if tt.stagger && label == "B" {
					time.Sleep(orchestrator.RotationSkew + 250*time.Millisecond)
				}
				go func() { // owned by the receives from wrote below
					wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					wrote <- resumes[label].c.ws.Write(wctx, websocket.MessageText, frame)
				}()
			}
			for range 2 {
				if err := <-wrote; err != nil {
					t.Fatalf("send the resume: %v", err)
				}
			}
			loser := map[string]string{"A": "B", "B": "A"}[tt.winner]
			win, lose := resumes[tt.winner], resumes[loser]

			// The loser is closed with 4000; the winner answered.
			var got wsproto.Connected
			select {
			case got = <-win.connected:
			case code := <-win.closed:
				t.Fatalf("the winner %s closed with %d", tt.winner, code)
			case e := <-win.errors:
				t.Fatalf("the winner %s was answered %+v", tt.winner, e)
			case <-time.After(20 * time.Second):
				t.Fatalf("the winner %s did not answer", tt.winner)
			}
			select {
			case code := <-lose.closed:
				if code != wsproto.CloseSessionReplaced {
					t.Fatalf("the loser %s closed with %d, want %d", loser, code, wsproto.CloseSessionReplaced)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("the loser %s is still open", loser)
			}
			if len(lose.connected) > 0 && tt.noToken {
				t.Errorf("the loser %s was given a token", loser)
			}
			if len(lose.errors) > 0 {
				t.Errorf("the loser %s was answered %+v", loser, <-lose.errors)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			if code := <-firstW.closed; code != wsproto.CloseSessionReplaced {
				t.Fatalf("the session's earlier connection closed with %d", code)
			}

			// The winner holds the token the store accepts, and its client
			// read it: the token presented is retired.
			want := sha256.Sum256([]byte(got.ResumeToken))
			var rec orchestrator.Record
			eventually(t, "the rotation committed", func() bool {
				var err error
				rec, err = clusters["A"].Lookup(ctx, hello.SessionID)
				return err == nil && rec.TokenHash == want && rec.PrevTokenHash == [32]byte{}
			})
			if err := win.c.ws.Ping(ctx); err != nil {
				t.Fatalf("the winner %s: %v", tt.winner, err)
			}
			for _, base := range bases {
				resumeWith(t, base, hello.SessionID, hello.ResumeToken, 0).expectError(wsproto.CodeResumeRejected)
			}
			// A resume with the winner's token takes the session over from it.
			next := resumeWith(t, bases[loser], hello.SessionID, got.ResumeToken, 0)
			if m := meta[wsproto.Connected](t, next.expect(wsproto.EventConnected)); !m.Resumed {
				t.Fatalf("resume with the winner's token: %+v", m)
			}
			if code := <-win.closed; code != wsproto.CloseSessionReplaced {
				t.Fatalf("the winner %s closed with %d once replaced", tt.winner, code)
			}
		})
	}
}
