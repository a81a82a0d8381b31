package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// maFrame is a frame of the myagent dialect, as decoded.
type maFrame map[string]any

func (f maFrame) event() string { s, _ := f["event"].(string); return s }
func (f maFrame) sid() string   { s, _ := f["session_id"].(string); return s }
func (f maFrame) meta() map[string]any {
	m, _ := f["metadata"].(map[string]any)
	return m
}
func (f maFrame) content() map[string]any {
	m, _ := f["content"].(map[string]any)
	return m
}

// maConn is a test client of the myagent dialect.
type maConn struct {
	t  *testing.T
	ws *websocket.Conn
}

// maURL is the dialect's URL on base: / (path "") or another path.
func maURL(base, path string) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/" + strings.TrimPrefix(path, "/")
}

// dialMA opens a dialect connection and reads its system.connected.
func dialMA(t *testing.T, url string) *maConn {
	t.Helper()
	c, resp, err := tryDialMA(t, url)
	if err != nil {
		t.Fatalf("dial %s: %v (%v)", url, err, resp)
	}
	if f := c.next(); f.event() != "system.connected" || f.meta()["connection_id"] == "" {
		t.Fatalf("first frame %v", f)
	}
	return c
}

func tryDialMA(t *testing.T, url string) (*maConn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(1 << 24)
	t.Cleanup(func() { ws.CloseNow() })
	return &maConn{t: t, ws: ws}, resp, nil
}

func (c *maConn) send(v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *maConn) next() maFrame {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var f maFrame
	d := json.NewDecoder(strings.NewReader(string(b)))
	if err := d.Decode(&f); err != nil {
		c.t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

// until reads until a frame of event (and of session sid when not "")
// arrives; it returns the frames read, that one last.
func (c *maConn) until(event, sid string) []maFrame {
	c.t.Helper()
	var seen []maFrame
	for {
		f := c.next()
		seen = append(seen, f)
		if f.event() == event && (sid == "" || f.sid() == sid) {
			return seen
		}
	}
}

// create creates a session and returns its id.
func (c *maConn) create() string {
	c.t.Helper()
	c.send(map[string]any{"event": "user.create_session", "content": map[string]any{"init": true}})
	f := c.next()
	if f.event() != "agent.session_created" || f.sid() == "" || f.meta()["agent_name"] != "baton" || f.meta()["connection_id"] == "" {
		c.t.Fatalf("create_session answered %v", f)
	}
	return f.sid()
}

// checkSeqs: every sequenced frame of sid in frames continues the one
// before it (from after), with the event id the dialect gives it.
func checkSeqs(t *testing.T, frames []maFrame, sid string, after int) int {
	t.Helper()
	for _, f := range frames {
		if f.sid() != sid {
			continue
		}
		n, ok := f["seq"].(float64)
		if !ok {
			continue
		}
		if int(n) != after+1 || f["event_id"] != fmt.Sprintf("%s-%d", sid, int(n)) {
			t.Fatalf("seq %v event_id %v after %d: %v", f["seq"], f["event_id"], after, f)
		}
		after = int(n)
	}
	return after
}

// TestMyagentMounts: the dialect answers the WebSocket upgrades of / and of
// --myagent-path; plain GETs of / stay the UI; /ws is Baton's protocol.
func TestMyagentMounts(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--myagent-path", "/myagent")
	if n := logs.count(t, noStateKey, nil); n != 1 {
		t.Errorf("the warning of a random state key logged %d times", n)
	}
	keyed := &logSink{}
	startServerLogging(t, keyed, "--state-key", "0123456789abcdef")
	if n := keyed.count(t, noStateKey, nil); n != 0 {
		t.Errorf("a keyed server warned of a random key")
	}
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, path := range []string{"", "/myagent"} {
		c := dialMA(t, maURL(base, path))
		if sid := c.create(); !strings.HasPrefix(sid, "sess_") {
			t.Errorf("%q: session id %q", path, sid)
		}
	}
	ws, _ := connect(t, base) // /ws: Baton's own system.connected
	ws.ws.CloseNow()
	if _, resp, err := tryDialMA(t, maURL(base, "/elsewhere")); err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("an upgrade elsewhere: %v %v", err, resp)
	}
	// The Origin check of /ws (§1): another site's page is refused, the
	// server's own is not.
	if _, resp, err := tryDialWithHeader(t, maURL(base, ""), http.Header{"Origin": {"http://evil.example"}}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin: %v %v", err, resp)
	}
	if _, _, err := tryDialWithHeader(t, maURL(base, ""), http.Header{"Origin": {base}}); err != nil {
		t.Errorf("the server's own origin: %v", err)
	}
}

// TestMyagentPlanRun: a plan run in myagent's shapes, the plan confirmed
// with an edited list in myagent's task fields (integer ids, name,
// objective, dependencies).
func TestMyagentPlanRun(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	c.send(map[string]any{"event": "user.message", "session_id": sid, "content": map[string]any{"question": "Compare Go and Rust", "template_name": "x"}})
	frames := c.until("agent.user_confirm", sid)
	if q := frames[0].content()["question"]; frames[0].event() != "plan.start" || q != "Compare Go and Rust" {
		t.Fatalf("first event %v", frames[0])
	}
	var plan maFrame
	for _, f := range frames {
		if f.event() == "plan.completed" {
			plan = f
		}
	}
	if tasks, _ := plan.content()["tasks"].([]any); len(tasks) < 2 || plan.content()["plan_summary"] == "" {
		t.Fatalf("plan.completed content %v", plan.content())
	}
	confirm := frames[len(frames)-1]
	m := confirm.meta()
	if m["requires_confirmation"] != true || m["scope"] != "plan" || m["plan_summary"] == nil || m["tasks"] == nil || confirm["step_id"] == "" {
		t.Fatalf("confirm %v", confirm)
	}
	edited := []any{
		map[string]any{"id": 1, "name": "Gather", "objective": "collect facts"},
		map[string]any{"id": 2, "title": "Write", "dependencies": []any{1}},
	}
	c.send(map[string]any{"event": "user.response", "session_id": sid, "step_id": confirm["step_id"],
		"content": map[string]any{"confirmed": true, "tasks": edited}})
	frames = append(frames, c.until("agent.final_answer", sid)...)
	checkSeqs(t, frames, sid, 0)
	got := map[string]maFrame{}
	for _, f := range frames {
		if f.sid() != sid {
			t.Fatalf("frame without its session: %v", f)
		}
		got[f.event()] = f
	}
	task, _ := got["solver.start"].content()["task"].(map[string]any)
	if task["id"] != float64(1) && task["id"] != float64(2) || task["name"] == nil {
		t.Errorf("solver.start content %v", got["solver.start"].content())
	}
	res, _ := got["solver.completed"].content()["result"].(map[string]any)
	if res["output"] == nil || res["summary"] == nil {
		t.Errorf("solver.completed content %v", got["solver.completed"].content())
	}
	if got["aggregate.completed"].content()["output"] == nil {
		t.Errorf("aggregate.completed content %v", got["aggregate.completed"].content())
	}
	if s, _ := got["agent.final_answer"]["content"].(string); !strings.Contains(s, "Gather") {
		t.Errorf("final answer %q", s)
	}
}

// TestMyagentSeveralSessions: sessions of one connection run side by side,
// each frame naming its own, each with its own seqs.
func TestMyagentSeveralSessions(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	a, b := c.create(), c.create()
	if a == b {
		t.Fatal("one session twice")
	}
	// Another connection cannot address them, knowing their ids.
	other := dialMA(t, maURL(base, ""))
	for _, ev := range []string{"user.message", "user.cancel", "user.request_state", "user.replan"} {
		other.send(map[string]any{"event": ev, "session_id": a, "content": "Take over"})
		if f := other.next(); f.event() != "agent.error" || f["content"] != "Session not found" || f.sid() != a {
			t.Fatalf("%s on another connection's session: %v", ev, f)
		}
	}
	for _, sid := range []string{a, b} {
		c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid,
			"content": []any{map[string]any{"id": 1, "title": "Only " + sid}}})
	}
	done, seqs := map[string]bool{}, map[string]int{}
	for len(done) < 2 {
		f := c.next()
		if f.sid() != a && f.sid() != b {
			t.Fatalf("frame of no session: %v", f)
		}
		seqs[f.sid()] = checkSeqs(t, []maFrame{f}, f.sid(), seqs[f.sid()])
		if f.event() == "solver.start" {
			if task, _ := f.content()["task"].(map[string]any); task["title"] != "Only "+f.sid() {
				t.Errorf("%s ran %v", f.sid(), task)
			}
		}
		if f.event() == "agent.final_answer" {
			done[f.sid()] = true
		}
	}
}

// waitConfirm starts a plan run in sid and returns its plan confirmation.
func (c *maConn) waitConfirm(sid, question string) maFrame {
	c.t.Helper()
	c.send(map[string]any{"event": "user.message", "session_id": sid, "content": question})
	frames := c.until("agent.user_confirm", sid)
	return frames[len(frames)-1]
}

// TestMyagentPlanEnds: a declined or timed-out plan ends in "Plan was
// declined by user."; a cancel, in agent.interrupted.
func TestMyagentPlanEnds(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--confirm-timeout", "300ms")
	for _, tt := range []struct {
		name   string
		answer func(c *maConn, sid string, confirm maFrame)
		last   string // the run's last event
		reason string
		text   string
	}{
		{"declined", func(c *maConn, sid string, confirm maFrame) {
			c.send(map[string]any{"event": "user.response", "session_id": sid, "step_id": confirm["step_id"], "content": map[string]any{"confirmed": false}})
		}, "agent.final_answer", "user_reject", "Plan was declined by user."},
		{"timed out", func(*maConn, string, maFrame) {}, "agent.final_answer", "confirm_timeout", "Plan was declined by user."},
		{"cancelled", func(c *maConn, sid string, _ maFrame) {
			c.send(map[string]any{"event": "user.cancel", "session_id": sid})
		}, "agent.interrupted", "user_cancel", "Execution interrupted"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialMA(t, maURL(base, ""))
			sid := c.create()
			tt.answer(c, sid, c.waitConfirm(sid, "Plan a trip"))
			frames := c.until(tt.last, sid)
			last := frames[len(frames)-1]
			if last["content"] != tt.text || last.meta()["reason"] != tt.reason {
				t.Errorf("last frame %v", last)
			}
			for _, f := range frames {
				if strings.HasPrefix(f.event(), "solver.") {
					t.Errorf("a task ran: %v", f)
				}
			}
		})
	}
}

// TestMyagentCancelDuringSolve: user.cancel while tasks run ends the run
// with pipeline.cancelled then agent.interrupted; the session takes a new
// run after it.
func TestMyagentCancelDuringSolve(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid,
		"content": map[string]any{"tasks": map[string]any{"id": 7, "title": "Slow", "description": "[sim:sleep=1m]"}, "question": "q"}})
	c.until("solver.start", sid)
	c.send(map[string]any{"event": "user.cancel", "session_id": sid})
	frames := c.until("agent.interrupted", sid)
	if prev := frames[len(frames)-2]; prev.event() != "pipeline.cancelled" {
		t.Errorf("before agent.interrupted: %v", prev)
	}
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "Quick"}}})
	c.until("agent.final_answer", sid)
}

// TestMyagentCancelPlanAndReplan: user.cancel_plan and user.replan, idle
// and while a plan waits.
func TestMyagentCancelPlanAndReplan(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	notice := func(action string, ok, mode any) maFrame {
		t.Helper()
		frames := c.until("system.notice", sid)
		n := frames[len(frames)-1]
		if n.meta()["action"] != action || n.meta()["ok"] != ok || n.meta()["mode"] != mode {
			t.Fatalf("notice %v", n)
		}
		return n
	}
	c.send(map[string]any{"event": "user.cancel_plan", "session_id": sid})
	notice("cancel_plan", false, nil)
	c.send(map[string]any{"event": "user.replan", "session_id": sid, "content": map[string]any{}})
	if f := c.next(); f.event() != "agent.error" || f["content"] != "Replan requires a question when session is idle" {
		t.Fatalf("replan with nothing to plan: %v", f)
	}

	c.waitConfirm(sid, "Plan a trip")
	c.send(map[string]any{"event": "user.replan", "session_id": sid, "content": map[string]any{"question": "shorter, please"}})
	notice("replan", true, "in_run")
	frames := c.until("agent.user_confirm", sid)
	if f := frames[0]; f.event() != "plan.start" || f.content()["feedback"] != "shorter, please" {
		t.Fatalf("replanning began with %v", f)
	}
	c.send(map[string]any{"event": "user.cancel_plan", "session_id": sid})
	notice("cancel_plan", true, nil)
	c.until("agent.interrupted", sid)

	c.send(map[string]any{"event": "user.replan", "session_id": sid}) // idle: the last request again
	n := notice("replan", nil, "restart")
	if n.meta()["question"] != "Plan a trip" {
		t.Errorf("restart notice %v", n)
	}
	frames = c.until("agent.user_confirm", sid)
	if q := frames[0].content()["question"]; q != "Plan a trip" {
		t.Errorf("replanned %v", frames[0])
	}
}

// TestMyagentBadInput: a bad frame is answered with agent.error and
// changes nothing: the session then runs as if it had not been sent.
func TestMyagentBadInput(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	for _, tt := range []struct {
		name  string
		frame string
		want  string // agent.error content (prefix)
	}{
		{"not JSON", `{"event":`, "Invalid JSON"},
		{"not an object", `[1,2]`, "Invalid JSON"},
		{"no event", `{"session_id":"` + sid + `"}`, "Missing event"},
		{"unknown event", `{"event":"user.dance","session_id":"` + sid + `"}`, "Unknown event type: user.dance"},
		{"no session", `{"event":"user.message","content":"hi"}`, "Missing session_id for user.message"},
		{"unknown session", `{"event":"user.message","session_id":"sess_nope","content":"hi"}`, "Session not found"},
		{"empty message", `{"event":"user.message","session_id":"` + sid + `","content":"  "}`, "Message content cannot be empty"},
		{"numeric message", `{"event":"user.message","session_id":"` + sid + `","content":42}`, "user.message content must be"},
		{"no tasks", `{"event":"user.solve_tasks","session_id":"` + sid + `","content":{"question":"q"}}`, "Missing tasks in user.solve_tasks content"},
		{"tasks not a list", `{"event":"user.solve_tasks","session_id":"` + sid + `","content":{"tasks":"t"}}`, "tasks must be a list"},
		{"task not an object", `{"event":"user.solve_tasks","session_id":"` + sid + `","content":["a"]}`, "task 0 is not an object"},
		{"invalid tasks", `{"event":"user.solve_tasks","session_id":"` + sid + `","content":[{"id":1,"title":"A","dependencies":[1]}]}`, "the task list has 1 problem"},
		{"response without step", `{"event":"user.response","session_id":"` + sid + `","content":{"confirmed":true}}`, "Missing step_id in user response"},
		{"response to nothing", `{"event":"user.response","session_id":"` + sid + `","step_id":"confirm_plan_x","content":{"confirmed":true}}`, ""},
		{"cancel_task without id", `{"event":"user.cancel_task","session_id":"` + sid + `","content":{}}`, "Missing task_id for cancel_task"},
		{"cancel with nothing to cancel", `{"event":"user.cancel","session_id":"` + sid + `"}`, ""},
		{"bad ack", `{"event":"user.ack","session_id":"` + sid + `","content":{"last_seq":-1}}`, "user.ack needs last_seq"},
		{"ack ahead", `{"event":"user.ack","session_id":"` + sid + `","content":{"last_seq":99}}`, ""},
	} {
		if err := c.ws.Write(context.Background(), websocket.MessageText, []byte(tt.frame)); err != nil {
			t.Fatal(err)
		}
		f := c.next()
		if s, _ := f["content"].(string); f.event() != "agent.error" || !strings.HasPrefix(s, tt.want) {
			t.Errorf("%s: answered %v", tt.name, f)
		}
	}
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "A"}}})
	frames := c.until("agent.final_answer", sid)
	checkSeqs(t, frames, sid, 0) // the bad frames sequenced nothing
}

// TestMyagentDrain: a server that stops closes the dialect's clients with
// 1012, as /ws's, and run leaves nothing running (TestMain's leak check).
func TestMyagentDrain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	base := startServerCtx(t, ctx, done, io.Discard)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "Slow", "description": "[sim:sleep=1m]"}}})
	c.until("solver.start", sid)
	cancel()
	for {
		rctx, rcancel := context.WithTimeout(context.Background(), 15*time.Second)
		_, _, err := c.ws.Read(rctx)
		rcancel()
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusServiceRestart {
				t.Errorf("closed with %v, want 1012", err)
			}
			break
		}
	}
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

// TestMyagentTaskCommands: user.cancel_task and user.restart_task by
// myagent's integer task ids.
func TestMyagentTaskCommands(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c := dialMA(t, maURL(base, ""))
	sid := c.create()
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": map[string]any{"tasks": []any{
		map[string]any{"id": 1, "title": "One", "description": "[sim:sleep=1m]"},
		map[string]any{"id": 2, "title": "Two", "description": "[sim:sleep=1m]"}}}})
	for started := 0; started < 2; {
		if f := c.next(); f.event() == "solver.start" {
			started++
		}
	}
	taskOf := func(f maFrame) any { task, _ := f.content()["task"].(map[string]any); return task["id"] }
	c.send(map[string]any{"event": "user.cancel_task", "session_id": sid, "content": map[string]any{"task_id": 1}})
	frames := c.until("solver.cancelled", sid)
	if f := frames[len(frames)-1]; taskOf(f) != float64(1) || f.content()["reason"] != "user_cancel_task" {
		t.Fatalf("cancelled %v", f)
	}
	c.send(map[string]any{"event": "user.restart_task", "session_id": sid, "content": map[string]any{"task_id": 1}})
	frames = c.until("solver.start", sid)
	if f := frames[len(frames)-2]; f.event() != "solver.restarted" || taskOf(f) != float64(1) || taskOf(frames[len(frames)-1]) != float64(1) {
		t.Fatalf("restart: %v", frames)
	}
	c.send(map[string]any{"event": "user.cancel_task", "session_id": sid, "content": map[string]any{"task_id": 9}})
	if f := c.next(); f.event() != "agent.error" || f.meta()["code"] != "unknown_task" {
		t.Fatalf("an unknown task: %v", f)
	}
	c.send(map[string]any{"event": "user.cancel", "session_id": sid})
	c.until("agent.interrupted", sid)
}

// TestMyagentConfirmKinds: Baton's other confirmations reach a myagent
// client with their scope, and {confirmed} (or its text) answers them.
func TestMyagentConfirmKinds(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	for _, tt := range []struct {
		name, description, scope string
		answer                   map[string]any
		result                   string // in the task's result
	}{
		{"a question", "[sim:ask=Which colour?]", "input", map[string]any{"confirmed": true, "text": "blue"}, "blue"},
		{"a failed task, retried", "[sim:fail=permanent*1]", "task", map[string]any{"confirmed": true}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialMA(t, maURL(base, ""))
			sid := c.create()
			c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "T", "description": tt.description}}})
			frames := c.until("agent.user_confirm", sid)
			confirm := frames[len(frames)-1]
			if confirm.meta()["scope"] != tt.scope || confirm.meta()["requires_confirmation"] != true {
				t.Fatalf("confirm %v", confirm)
			}
			c.send(map[string]any{"event": "user.response", "session_id": sid, "step_id": confirm["step_id"], "content": tt.answer})
			frames = c.until("solver.completed", sid)
			res, _ := frames[len(frames)-1].content()["result"].(map[string]any)
			if out, _ := res["output"].(string); !strings.Contains(out, tt.result) {
				t.Errorf("result %q lacks %q", out, tt.result)
			}
			c.until("agent.final_answer", sid)
		})
	}
}

// TestMyagentLateFirstSession: a client that creates its first session
// only after /ws has dropped the connection the upgrade was checked with
// (nothing read it, so it answered no ping) still gets a working session.
func TestMyagentLateFirstSession(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--ping-interval", "100ms", "--pong-timeout", "100ms")
	c := dialMA(t, maURL(base, ""))
	eventually(t, "the unread /ws connection's drop", func() bool {
		for _, r := range logs.records(t) { // no pong, or (over an in-process pipe) its write never taken
			if end, _ := r["end"].(string); r["msg"] == "connection closed" && strings.HasPrefix(end, "server dropped: ") {
				return true
			}
		}
		return false
	})
	sid := c.create()
	c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "A"}}})
	for _, f := range c.until("agent.final_answer", sid) {
		if f.event() == "agent.error" {
			t.Fatalf("the first session failed: %v", f)
		}
	}
}
