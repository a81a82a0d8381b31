package myagent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func decode(t *testing.T, s string) any {
	t.Helper()
	v, err := decodeValue(json.RawMessage(s))
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// canon re-encodes v, so that values compare as JSON.
func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestToBatonTasks(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want []wsproto.Task
		err  string
	}{
		{"myagent's fields", `[{"id":1,"name":"A","objective":"do a"},{"id":2,"title":"B","dependencies":[1]}]`,
			[]wsproto.Task{{ID: "1", Title: "A", Description: "do a", DependsOn: []string{}}, {ID: "2", Title: "B", DependsOn: []string{"1"}}}, ""},
		{"Baton's fields", `[{"id":"a","title":"A","description":"d","depends_on":[]}]`,
			[]wsproto.Task{{ID: "a", Title: "A", Description: "d", DependsOn: []string{}}}, ""},
		{"one task object", `{"id":3,"title":"T"}`, []wsproto.Task{{ID: "3", Title: "T", DependsOn: []string{}}}, ""},
		{"ids from positions", `[{"title":"A"},{"title":"B"}]`,
			[]wsproto.Task{{ID: "1", Title: "A", DependsOn: []string{}}, {ID: "2", Title: "B", DependsOn: []string{}}}, ""},
		{"objective as title", `[{"id":1,"objective":"o"}]`, []wsproto.Task{{ID: "1", Title: "o", Description: "o", DependsOn: []string{}}}, ""},
		{"not a list", `"tasks"`, nil, "tasks must be a list of task objects"},
		{"not an object", `[1]`, nil, "task 0 is not an object"},
		{"fractional id", `[{"id":1.5,"title":"A"}]`, nil, "task 0: id must be a non-empty string or an integer"},
		{"empty id", `[{"id":"","title":"A"}]`, nil, "task 0: id must be"},
		{"dependencies not a list", `[{"id":1,"title":"A","dependencies":1}]`, nil, "task 0: dependencies must be a list"},
		{"a dependency not an id", `[{"id":1,"title":"A","dependencies":[{}]}]`, nil, "task 0: a dependency must be a task id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toBatonTasks(decode(t, tt.in))
			if tt.err != "" {
				if !errors.Is(err, errBadInput) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestTranslate: each Baton frame becomes the frames a myagent client
// reads: Baton's envelope with the dialect's event id, and payloads
// mirrored into content.
func TestTranslate(t *testing.T) {
	const tasks = `[{"id":"1","title":"A","description":"d","depends_on":[]},{"id":"t2","title":"B","description":"","depends_on":["1"]}]`
	for _, tt := range []struct {
		name  string
		prep  func(v *view)
		in    string
		want  []string // per frame out: "event" then checks path=json
		check func(t *testing.T, v *view, out []obj)
	}{
		{name: "plan.start", in: `{"event":"plan.start","seq":1,"event_id":"e1","content":"Planning","metadata":{"run_id":"r","request":"Q"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				want(t, out[0]["content"], `{"question":"Q"}`, "content")
				if out[0]["event_id"] != "s-1" || out[0]["seq"] != uint64(1) || out[0]["session_id"] != "s" || meta(out[0])["orig_event_id"] != "e1" || v.phase != phasePlanning {
					t.Errorf("envelope %v, phase %s", out[0], v.phase)
				}
			}},
		{name: "plan.completed", in: `{"event":"plan.completed","seq":5,"content":"Plan ready","metadata":{"plan_summary":"S","tasks":` + tasks + `}}`,
			check: func(t *testing.T, v *view, out []obj) {
				c := out[0]["content"].(obj)
				want(t, c["plan_summary"], `"S"`, "plan_summary")
				want(t, c["tasks"].([]any)[0], `{"dependencies":[],"depends_on":[],"description":"d","id":1,"name":"A","objective":"d","title":"A"}`, "task 1")
				want(t, c["tasks"].([]any)[1].(obj)["dependencies"], `[1]`, "task t2's dependencies")
				want(t, c["tasks"].([]any)[1].(obj)["id"], `"t2"`, "a string id")
				if len(v.tasks) != 2 || v.lastSeq != 5 {
					t.Errorf("view %+v", v)
				}
			}},
		{name: "plan confirmation", in: `{"event":"agent.user_confirm","seq":6,"step_id":"p1","content":"Confirm","metadata":{"kind":"plan_confirm","step_id":"p1","tasks":` + tasks + `}}`,
			check: func(t *testing.T, v *view, out []obj) {
				m := meta(out[0])
				if m["scope"] != "plan" || m["requires_confirmation"] != true || m["plan_summary"] != "" || out[0]["step_id"] != "p1" ||
					v.phase != phasePlanConfirm || v.confirms["p1"] != wsproto.ConfirmPlan {
					t.Errorf("%v; view %+v", out[0], v)
				}
				want(t, m["tasks"].([]any)[0].(obj)["id"], `1`, "mirrored id")
			}},
		{name: "tool confirmation", prep: func(v *view) { v.remember(decodeT(`[{"id":"1","title":"Fetch"}]`)) },
			in: `{"event":"agent.user_confirm","seq":9,"step_id":"c1","metadata":{"kind":"tool_confirm","task_id":"1","tool":"fs__write","arguments":{"path":"x"}}}`,
			check: func(t *testing.T, v *view, out []obj) {
				m := meta(out[0])
				want(t, m["tool_args"], `{"path":"x"}`, "tool_args")
				if m["scope"] != "tool" || m["tool_name"] != "fs__write" || m["tool_description"] != `task "Fetch" wants to run fs__write` || v.confirms["c1"] != "tool_confirm" {
					t.Errorf("%v", m)
				}
			}},
		{name: "failed task", in: `{"event":"agent.user_confirm","seq":9,"step_id":"f1","metadata":{"kind":"task_failed"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				if meta(out[0])["scope"] != "task" || v.confirms["f1"] != "task_failed" {
					t.Errorf("%v", out[0])
				}
			}},
		{name: "question", in: `{"event":"agent.user_confirm","seq":9,"step_id":"q1","metadata":{"kind":"input_request","question":"?"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				if meta(out[0])["scope"] != "input" {
					t.Errorf("%v", out[0])
				}
			}},
		{name: "solver.start of a known task", prep: func(v *view) { v.remember(decodeT(tasks)) },
			in: `{"event":"solver.start","seq":7,"metadata":{"task_id":"1","attempt":1}}`,
			check: func(t *testing.T, v *view, out []obj) {
				want(t, out[0]["content"].(obj)["task"].(obj)["name"], `"A"`, "task")
				if v.phase != phaseRunning {
					t.Errorf("phase %s", v.phase)
				}
			}},
		{name: "solver.start of a chat run", in: `{"event":"solver.start","seq":2,"metadata":{"task_id":"chat","mode":"chat","task":{"id":"chat","title":"Q","description":"","depends_on":[]}}}`,
			check: func(t *testing.T, v *view, out []obj) {
				want(t, out[0]["content"].(obj)["task"].(obj)["title"], `"Q"`, "task")
			}},
		{name: "solver.progress of an unknown task", in: `{"event":"solver.progress","seq":8,"metadata":{"task_id":"9","progress":0.5,"message":"m"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				want(t, out[0]["content"], `{"message":"m","progress":0.5,"task":{"id":9}}`, "content")
			}},
		{name: "solver.completed", in: `{"event":"solver.completed","seq":8,"content":"Task 1 done","metadata":{"task_id":"1","result":"R"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				want(t, out[0]["content"], `{"result":{"output":"R","summary":"Task 1 done"},"summary":"Task 1 done","task":{"id":1}}`, "content")
			}},
		{name: "aggregate.completed", in: `{"event":"aggregate.completed","seq":8,"content":"Done","metadata":{"summary":"Sum"}}`,
			check: func(t *testing.T, v *view, out []obj) { want(t, out[0]["content"], `{"output":"Sum"}`, "content") }},
		{name: "final answer", prep: func(v *view) { v.phase, v.confirms["p1"] = phaseRunning, "plan_confirm"; v.remember(decodeT(tasks)) },
			in: `{"event":"agent.final_answer","seq":9,"content":"The answer","metadata":{"content":"The answer"}}`,
			check: func(t *testing.T, v *view, out []obj) {
				if out[0]["content"] != "The answer" || v.phase != phaseIdle || len(v.tasks) != 0 || len(v.confirms) != 0 {
					t.Errorf("%v", out[0])
				}
			}},
		{name: "cancelled run", in: `{"event":"pipeline.cancelled","seq":9,"metadata":{"run_id":"r","reason":"user_cancel"}}`,
			want: []string{"pipeline.cancelled", "agent.interrupted"},
			check: func(t *testing.T, v *view, out []obj) {
				if _, seq := out[1]["seq"]; seq || meta(out[1])["reason"] != "user_cancel" || out[1]["session_id"] != "s" {
					t.Errorf("%v", out[1])
				}
			}},
		{name: "declined plan", in: `{"event":"plan.cancelled","seq":9,"metadata":{"run_id":"r","reason":"user_reject"}}`,
			want: []string{"plan.cancelled", "agent.final_answer"},
			check: func(t *testing.T, v *view, out []obj) {
				if out[1]["content"] != "Plan was declined by user." {
					t.Errorf("%v", out[1])
				}
			}},
		{name: "plan timed out", in: `{"event":"plan.cancelled","seq":9,"metadata":{"run_id":"r","reason":"confirm_timeout"}}`,
			want:  []string{"plan.cancelled", "agent.final_answer"},
			check: func(t *testing.T, v *view, out []obj) { want(t, meta(out[1])["reason"], `"confirm_timeout"`, "reason") }},
		{name: "plan failed", in: `{"event":"plan.cancelled","seq":9,"metadata":{"run_id":"r","reason":"plan_failed","error":"boom"}}`,
			want:  []string{"plan.cancelled", "agent.error"},
			check: func(t *testing.T, v *view, out []obj) { want(t, out[1]["content"], `"boom"`, "content") }},
		{name: "an error", in: `{"event":"system.error","event_id":"x","metadata":{"code":"busy","message":"a run is active"}}`,
			want: []string{"agent.error"},
			check: func(t *testing.T, v *view, out []obj) {
				if out[0]["content"] != "a run is active" || meta(out[0])["code"] != "busy" || out[0]["event_id"] != nil {
					t.Errorf("%v", out[0])
				}
			}},
		{name: "a resume's answer", in: `{"event":"system.connected","metadata":{"session_id":"s"}}`, want: []string{}},
		{name: "a snapshot", in: `{"event":"system.state_snapshot","metadata":{"seq":4,"phase":"awaiting_confirm","run":{"tasks":` + tasks + `}}}`,
			check: func(t *testing.T, v *view, out []obj) {
				if v.phase != phasePlanConfirm || len(v.tasks) != 2 {
					t.Errorf("view %+v", v)
				}
			}},
		{name: "an event the dialect does not know", in: `{"event":"todo.updated","seq":3,"content":"c","metadata":{"items":[]}}`,
			check: func(t *testing.T, v *view, out []obj) { want(t, out[0]["content"], `"c"`, "content") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newView("s", "conn_1")
			if tt.prep != nil {
				tt.prep(v)
			}
			out := v.translate(decode(t, tt.in).(obj))
			events := []string{}
			for _, f := range out {
				events = append(events, f["event"].(string))
				if f["session_id"] != "s" || meta(f)["connection_id"] != "conn_1" {
					t.Errorf("frame without its session or connection: %v", f)
				}
			}
			w := tt.want
			if w == nil {
				w = []string{decode(t, tt.in).(obj)["event"].(string)}
			}
			if !reflect.DeepEqual(events, w) {
				t.Fatalf("events %v, want %v", events, w)
			}
			if tt.check != nil {
				tt.check(t, v, out)
			}
		})
	}
}

func decodeT(s string) any {
	v, _ := decodeValue(json.RawMessage(s))
	return v
}

func meta(f obj) obj { return f["metadata"].(obj) }

func want(t *testing.T, got any, w, what string) {
	t.Helper()
	if g := canon(t, got); g != w {
		t.Errorf("%s = %s, want %s", what, g, w)
	}
}

func TestToResponse(t *testing.T) {
	for _, tt := range []struct {
		name, kind, content, want, err string
	}{
		{"plan confirmed", "plan_confirm", `{"confirmed":true}`, `{"confirmed":true}`, ""},
		{"plan edited", "plan_confirm", `{"confirmed":true,"tasks":[{"id":1,"name":"A"}]}`,
			`{"confirmed":true,"tasks":[{"id":"1","title":"A","description":"","depends_on":[]}]}`, ""},
		{"plan declined, tasks ignored", "plan_confirm", `{"confirmed":false,"tasks":[1]}`, `{"confirmed":false}`, ""},
		{"unknown step: a plan's shape", "", `{"confirmed":true}`, `{"confirmed":true}`, ""},
		{"a bare true", "plan_adjust", `true`, `{"confirmed":true}`, ""},
		{"approved for confirmed", "plan_confirm", `{"approved":false}`, `{"confirmed":false}`, ""},
		{"plan without confirmed", "plan_confirm", `{}`, "", "needs confirmed"},
		{"bad edited tasks", "plan_confirm", `{"confirmed":true,"tasks":"x"}`, "", "tasks must be a list"},
		{"a string", "plan_confirm", `"yes"`, "", "must be an object"},
		{"tool approved", "tool_confirm", `{"confirmed":true}`, `{"approved":true}`, ""},
		{"tool declined", "tool_confirm", `{"confirmed":false}`, `{"approved":false}`, ""},
		{"tool without confirmed", "tool_confirm", `{"x":1}`, "", "needs confirmed"},
		{"failed task retried", "task_failed", `{"confirmed":true}`, `{"action":"retry"}`, ""},
		{"failed task skipped", "task_failed", `{"confirmed":false}`, `{"action":"skip"}`, ""},
		{"failed task action", "task_failed", `{"action":"abort"}`, `{"action":"abort"}`, ""},
		{"failed task, nothing", "task_failed", `{}`, "", "needs confirmed or action"},
		{"question answered", "input_request", `{"confirmed":true,"text":"blue"}`, `{"text":"blue"}`, ""},
		{"question answered as answer", "input_request", `{"answer":"red"}`, `{"text":"red"}`, ""},
		{"question declined", "input_request", `{"confirmed":false,"text":"x"}`, `{"text":""}`, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := toResponse(tt.kind, decode(t, tt.content))
			if tt.err != "" {
				if !errors.Is(err, errBadInput) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want(t, got, tt.want, "response")
		})
	}
}

func TestToMessage(t *testing.T) {
	for _, tt := range []struct {
		name, content, text, meta, err string
	}{
		{"text", `"hello"`, "hello", `{}`, ""},
		{"structured", `{"question":"Q","template_name":"t","mode":"chat"}`, "Q", `{"mode":"chat"}`, ""},
		{"adaptive", `{"question":"Q","adaptive":true}`, "Q", `{"adaptive":true}`, ""},
		{"empty", `"  "`, "", "", "cannot be empty"},
		{"no question", `{"template_name":"t"}`, "", "", "cannot be empty"},
		{"a number", `7`, "", "", "must be a string or an object"},
		{"null", `null`, "", "", "must be a string or an object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text, m, err := toMessage(decode(t, tt.content))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || text != tt.text || canon(t, m) != tt.meta {
				t.Fatalf("%q %v %v", text, m, err)
			}
		})
	}
}

func TestAckOf(t *testing.T) {
	for _, tt := range []struct {
		name, frame, session string
		seq                  uint64
		err                  bool
	}{
		{"last_seq", `{"content":{"last_seq":4}}`, "", 4, false},
		{"last_event_id", `{"content":{"last_event_id":"sess_a-b-7"}}`, "sess_a-b", 7, false},
		{"a number", `{"content":9}`, "", 9, false},
		{"an event id", `{"content":"s-2"}`, "s", 2, false},
		{"at the top", `{"last_seq":3}`, "", 3, false},
		{"an id at the top", `{"last_event_id":"s-5"}`, "s", 5, false},
		{"negative", `{"content":{"last_seq":-1}}`, "", 0, true},
		{"fraction", `{"content":1.5}`, "", 0, true},
		{"an id not ours", `{"content":{"last_event_id":"0193-uuid"}}`, "", 0, true},
		{"nothing", `{}`, "", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var f clientFrame
			if err := json.Unmarshal([]byte(tt.frame), &f); err != nil {
				t.Fatal(err)
			}
			content, _ := decodeValue(f.Content)
			s, n, err := ackOf(&f, content)
			if (err != nil) != tt.err || s != tt.session || n != tt.seq {
				t.Fatalf("%q %d %v", s, n, err)
			}
		})
	}
}

// TestSignedState: a state verifies under its key only, unchanged, and
// within its TTL.
func TestSignedState(t *testing.T) {
	key := []byte("k")
	at := time.Date(2026, 11, 28, 10, 0, 0, 123, time.UTC)
	good := sign(key, resumeState{SessionID: "sess_1", ResumeToken: "tok", LastSeq: 4, ExportedAt: at})
	enc := func(f func(m obj)) json.RawMessage {
		b, _ := json.Marshal(good)
		var m obj
		json.Unmarshal(b, &m)
		f(m)
		b, _ = json.Marshal(m)
		return b
	}
	for _, tt := range []struct {
		name string
		raw  json.RawMessage
		key  string
		now  time.Time
		err  string
	}{
		{"good", enc(func(obj) {}), "k", at.Add(time.Hour), ""},
		{"another key", enc(func(obj) {}), "other", at, "signature mismatch"},
		{"session", enc(func(m obj) { m["state"].(obj)["session_id"] = "sess_2" }), "k", at, "signature mismatch"},
		{"token", enc(func(m obj) { m["state"].(obj)["resume_token"] = "x" }), "k", at, "signature mismatch"},
		{"seq", enc(func(m obj) { m["state"].(obj)["last_seq"] = 5 }), "k", at, "signature mismatch"},
		{"exported_at", enc(func(m obj) { m["state"].(obj)["exported_at"] = "2027-01-01T00:00:00Z" }), "k", at, "signature mismatch"},
		{"timestamp", enc(func(m obj) { m["timestamp"] = "2027-01-01T00:00:00Z" }), "k", at, "signature mismatch"},
		{"checksum only", enc(func(m obj) { m["checksum"] = "0" }), "k", at, ""},
		{"version", enc(func(m obj) { m["version"] = "x" }), "k", at, "unknown version"},
		{"expired", enc(func(obj) {}), "k", at.Add(25 * time.Hour), "expired"},
		{"not an object", json.RawMessage(`[1]`), "k", at, "not a signed state object"},
		{"upper-case signature", enc(func(m obj) { m["signature"] = strings.ToUpper(m["signature"].(string)) }), "k", at, "signature mismatch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, err := verify([]byte(tt.key), tt.raw, tt.now, 24*time.Hour)
			if tt.err != "" {
				if !errors.Is(err, errState) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || st != good.State {
				t.Fatalf("%+v %v", st, err)
			}
		})
	}
}

// TestTarget: /ws gets the client's credential (?token= as ?access_token=)
// and headers, not the handshake's own nor Origin.
func TestTarget(t *testing.T) {
	for _, tt := range []struct {
		name, url string
		header    http.Header
		path      string
		upgrade   bool
	}{
		{"token", "/?token=a%2Bb", nil, "/ws?access_token=a%2Bb", false},
		{"both", "/x?token=a&access_token=b", nil, "/ws?access_token=a&access_token=b", false},
		{"none", "/", http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}}, "/ws", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.url, nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			r.Header.Set("Authorization", "Bearer x")
			r.Header.Set("Origin", "http://elsewhere")
			r.Header.Set("Sec-WebSocket-Protocol", "chat, baton.bearer.tok")
			got := targetOf(r)
			if got.path != tt.path || got.header.Get("Authorization") != "Bearer x" || got.header.Get("Origin") != "" ||
				got.header.Get("Upgrade") != "" || got.header.Get("Sec-WebSocket-Protocol") != "baton.bearer.tok" {
				t.Errorf("%+v", got)
			}
			if IsUpgrade(r) != tt.upgrade {
				t.Errorf("IsUpgrade = %v", !tt.upgrade)
			}
		})
	}
}
