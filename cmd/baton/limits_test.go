package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestRateLimit: a frame over the rate is not applied and is answered
// rate_limited; more than the burst refused closes the connection with
// 1008. The session survives, and a new connection has a fresh allowance.
// (Which refusals are answered is orchestrator's TestAdmitFrame.)
func TestRateLimit(t *testing.T) {
	t.Parallel()
	// One frame a second, three at once. The test's frames go out within
	// milliseconds, so no token comes back meanwhile — unless a loaded
	// machine holds them up past a second (the frame then let through is
	// not the server's fault): a try that took that long and saw otherwise
	// is made again; the outcome of one that did not must be exact.
	base := startServer(t, "--rate-limit", "1", "--rate-burst", "3")
	for try := 1; ; try++ {
		began := time.Now()
		c, hello := connect(t, base)
		err := rateLimitFlood(c)
		if err != nil && time.Since(began) > 900*time.Millisecond && try < 5 {
			t.Logf("try %d took %v: %v; again", try, time.Since(began), err)
			c.ws.CloseNow()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := resume(t, base, hello, 0, "")
		if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed || m.LastSeq != 0 {
			t.Fatalf("resume after 1008: %+v (a refused message started a run?)", m)
		}
		r.message("now applied")
		r.expect(wsproto.EventPlanStart)
		return
	}
}

// rateLimitFlood is TestRateLimit's flood on c and what it must get:
// three frames allowed and answered (unknown_type), the first refused
// answered rate_limited (with a message and no ref_type: the frame is not
// read), the fourth refused closing with 1008 and nothing before it.
func rateLimitFlood(c *conn) error {
	for i := range 4 {
		code := wsproto.CodeUnknownType
		if i < 3 {
			c.send("user.dance", nil) // allowed, and answered: the allowance is spent
		} else {
			code = wsproto.CodeRateLimited
			c.message("not applied")
		}
		f, err := c.read(10 * time.Second)
		var e wsproto.Error
		if err == nil && f.Event == wsproto.EventError {
			err = json.Unmarshal(f.Metadata, &e)
		}
		if err != nil || f.Event != wsproto.EventError || e.Code != code {
			return fmt.Errorf("got %s %s %v, want system.error %s", f.Event, f.Metadata, err, code)
		}
		if code == wsproto.CodeRateLimited && (e.RefType != "" || e.Message == "") {
			return fmt.Errorf("rate_limited %+v: want a message and no ref_type (the frame is not read)", e)
		}
	}
	for range 3 { // the fourth refusal is one too many
		c.message("not applied either")
	}
	if f, err := c.read(10 * time.Second); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		return fmt.Errorf("after the flood: %s %v, want the close 1008 and nothing before it", f.Event, err)
	}
	return nil
}

// TestRateLimitSparesAClient: at the default limits, a client that acks
// every 20 events (as the load tool does by default) and answers every
// confirmation runs three planned runs back to back without one frame
// refused.
func TestRateLimitSparesAClient(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	yes := true
	var answers atomic.Int32
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{AckEvery: 20,
		OnConfirm: func(wsproto.UserConfirm) *client.Answer { return &client.Answer{Confirmed: &yes} },
		OnEvent: func(f client.Frame) {
			if f.Event == wsproto.EventFinalAnswer {
				answers.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range int32(3) {
		if err := cl.Message(ctx, fmt.Sprintf("Plan a trip, part %d", i+1)); err != nil {
			t.Fatal(err)
		}
		if err := cl.Wait(ctx, func(client.View) bool { return answers.Load() > i }); err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if s := cl.View().Stats; s.Errors != 0 || s.Resumes != 0 || len(s.Violations) != 0 {
		t.Fatalf("stats %+v: want no error, no reconnection", s)
	}
}

// TestConnectionLimits: connections from one address beyond
// --max-conns-per-ip are refused with 429 before the upgrade, with a
// Retry-After; a place freed is taken again. (Every connection counts,
// not only WebSockets: edge_test.go. The session caps, which upgrade a
// connection to let it resume, are lockout_test.go's.)
func TestConnectionLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		status int
	}{
		{"per address", []string{"--max-conns-per-ip", "2"}, http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			first, _ := connect(t, base)
			connect(t, base)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, wsURL(base), nil)
			if err == nil {
				ws.CloseNow()
				t.Fatal("a connection beyond the limit was upgraded")
			}
			if resp == nil || resp.StatusCode != tt.status || resp.Header.Get("Retry-After") != "5" {
				t.Fatalf("response %v, want %d with Retry-After: 5", resp, tt.status)
			}
			first.ws.Close(websocket.StatusNormalClosure, "")
			// Its place is given back once the server has closed its end.
			eventually(t, "the first connection's place to be free", func() bool {
				ws, _, err := websocket.Dial(ctx, wsURL(base), nil)
				if err != nil {
					return false
				}
				ws.CloseNow()
				return true
			})
		})
	}
}

// TestOutboundFrameCap: a task whose result is far past --max-frame-bytes
// yields frames within the cap, their texts cut and marked truncated; a
// replay repeats the cut frames byte for byte, and a resync's snapshot
// holds the same state as the client that saw every event.
func TestOutboundFrameCap(t *testing.T) {
	t.Parallel()
	const limit = 32 << 10
	base := startServer(t, "--max-frame-bytes", "32768")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var live frameLog // every frame as the client received it
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{OnEvent: live.add})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	hello := cl.View()
	c := dial(t, base) // a second connection, raw, resumes the session below
	c.expect(wsproto.EventConnected)
	err = cl.SolveTasks(ctx, []wsproto.Task{
		{ID: "big", Title: "Big", Description: "[sim:result_bytes=200000]", DependsOn: []string{}},
		{ID: "small", Title: "Small", DependsOn: []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
		t.Fatal(err)
	}
	seen := cl.View()

	// The whole session again, as a replay: every frame within the cap,
	// the big texts cut.
	c.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID, "resume_token": hello.ResumeToken,
		"last_seq": 0, "state_checksum": ""})
	replay := meta[wsproto.Connected](t, c.expect(wsproto.EventConnected))
	if replay.Resync || replay.LastSeq != seen.LastSeq {
		t.Fatalf("resume %+v, want a replay up to %d", replay, seen.LastSeq)
	}
	sent := map[uint64]client.Frame{}
	for _, f := range live.all() {
		sent[f.Seq] = f
	}
	cut := map[string]bool{}
	for seq := uint64(1); seq <= seen.LastSeq; seq++ {
		_, b, err := c.ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var f client.Frame
		var m struct {
			Truncated     bool   `json:"truncated"`
			OriginalBytes int    `json:"original_bytes"`
			TaskID        string `json:"task_id"`
		}
		if err := json.Unmarshal(b, &f); err != nil || json.Unmarshal(f.Metadata, &m) != nil {
			t.Fatalf("frame %.200s: %v", b, err)
		}
		if len(b) > limit {
			t.Errorf("%s (seq %d) is %d bytes, over the cap", f.Event, f.Seq, len(b))
		}
		if was := sent[f.Seq]; f.Seq != seq || f.EventID != was.EventID || f.Content != was.Content || string(f.Metadata) != string(was.Metadata) {
			t.Fatalf("replayed seq %d (%s) differs from the live frame of seq %d", f.Seq, f.Event, seq)
		}
		if m.Truncated && f.Event != wsproto.EventToolResult {
			cut[f.Event] = true
			if m.OriginalBytes <= limit || m.TaskID == "small" {
				t.Errorf("%s cut: original_bytes %d, task %q", f.Event, m.OriginalBytes, m.TaskID)
			}
		}
	}
	for _, event := range []string{wsproto.EventSolverCompleted, wsproto.EventAggregateProgress, wsproto.EventFinalAnswer} {
		if !cut[event] {
			t.Errorf("no %s was cut (cut: %v)", event, cut)
		}
	}
	var big, small wsproto.TaskState
	for _, task := range seen.Run.Tasks {
		if task.ID == "big" {
			big = task
		} else {
			small = task
		}
	}
	if !strings.HasSuffix(big.Result, wsproto.CutMarker) || len(big.Result) > limit || strings.HasSuffix(small.Result, wsproto.CutMarker) {
		t.Errorf("results in the client's state: big %d bytes, small %q", len(big.Result), small.Result)
	}
	if !strings.HasSuffix(*seen.Run.FinalAnswer, wsproto.CutMarker) {
		t.Errorf("final answer not cut: %.80q…", *seen.Run.FinalAnswer)
	}

	// A resync (a checksum that does not match): the snapshot is the
	// state the client built from the cut events.
	r := resume(t, base, wsproto.Connected{SessionID: hello.SessionID, ResumeToken: replay.ResumeToken}, seen.LastSeq, "wrong")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resync {
		t.Fatalf("resume %+v, want a resync", m)
	}
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	if a, b := roundTrip(t, snap.Run), roundTrip(t, seen.Run); a != b || snap.Phase != seen.Phase {
		t.Errorf("the snapshot differs from the client's state:\nsnapshot %.300s\nclient   %.300s", a, b)
	}
}

// roundTrip is a run's state as JSON, its empty lists [] whether nil or
// not (a client's copy of its state has nil where the server's has []).
func roundTrip(t *testing.T, r *wsproto.RunState) string {
	t.Helper()
	c := *r
	c.PendingConfirm = append([]wsproto.UserConfirm{}, r.PendingConfirm...)
	c.Answers = append([]wsproto.AnswerState{}, r.Answers...)
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
