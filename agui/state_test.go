package agui

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestDelta: the patches are RFC 6902 with RFC 6901 pointers: ids with /
// and ~ escaped, zero values kept, remove without a value.
func TestDelta(t *testing.T) {
	for _, tt := range []struct {
		name string
		meta any
		want string
	}{
		{"escaped ids", &wsproto.SolverCancelled{RunID: "r", TaskID: "a/b~c"},
			`[{"op":"add","path":"/run/tasks/a~1b~0c/status","value":"cancelled"}]`},
		{"zero values kept", &wsproto.SolverRestarted{RunID: "r", TaskID: "t1"},
			`[{"op":"add","path":"/run/tasks/t1/status","value":"pending"},{"op":"add","path":"/run/tasks/t1/result","value":""},{"op":"add","path":"/run/tasks/t1/error","value":""}]`},
		{"remove has no value", &wsproto.PlanUpdated{RunID: "r", Version: 2, Removed: []string{"t3"}},
			`[{"op":"remove","path":"/run/tasks/t3"},{"op":"add","path":"/run/plan_version","value":2}]`},
		{"a todo item by id", &wsproto.TodoItemProgress{RunID: "r", TaskID: "t1", Version: 3, Item: wsproto.TodoItem{ID: "2", Content: "c", Status: "completed"}},
			`[{"op":"add","path":"/run/tasks/t1/todo/version","value":3},{"op":"add","path":"/run/tasks/t1/todo/items/2","value":{"id":"2","content":"c","status":"completed","tool_calls":0}}]`},
		{"a planning failure changes no task", &wsproto.ExecutionError{RunID: "r", Stage: "plan"}, `null`},
		{"the answer ends the run", &wsproto.FinalAnswer{RunID: "r", Content: ""},
			`[{"op":"add","path":"/run/final_answer","value":""},{"op":"add","path":"/phase","value":"idle"}]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(delta(tt.meta))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}

// TestParsePosition: Last-Event-ID is SEQ:K:BASE, nothing else.
func TestParsePosition(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want position
		ok   bool
	}{
		{"12:3:7", position{12, 3, 7}, true},
		{"0:0:0", position{0, 0, 0}, true},
		{"12", position{}, false},
		{"12:3", position{}, false},
		{"12:3:7:1", position{}, false},
		{"6:0:7", position{}, false}, // before its base
		{"a:0:0", position{}, false},
		{"-1:0:0", position{}, false},
		{"1:99999999:0", position{}, false},
	} {
		t.Run(tt.id, func(t *testing.T) {
			got, err := parsePosition(tt.id)
			if (err == nil) != tt.ok || tt.ok && got != tt.want {
				t.Fatalf("got %+v, %v; want %+v, ok %v", got, err, tt.want, tt.ok)
			}
			if tt.ok && got.String() != tt.id {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

// TestAnswersFor: resume entries become the answers their confirmations
// take, or an error and nothing.
func TestAnswersFor(t *testing.T) {
	pending := []wsproto.UserConfirm{
		{StepID: "p", Kind: wsproto.ConfirmPlan}, {StepID: "f", Kind: wsproto.ConfirmTaskFailed},
		{StepID: "x", Kind: wsproto.ConfirmTool}, {StepID: "q", Kind: wsproto.ConfirmInput},
	}
	entry := func(id, status, payload string) resumeEntry {
		return resumeEntry{InterruptID: id, Status: status, Payload: json.RawMessage(payload)}
	}
	for _, tt := range []struct {
		name    string
		entries []resumeEntry
		want    string // the answers' metadata, or the error's text
	}{
		{"plan confirmed", []resumeEntry{entry("p", "resolved", `{"confirmed":true}`)}, `p{"confirmed":true}`},
		{"plan confirmed with no payload", []resumeEntry{entry("p", "resolved", ``)}, `p{"confirmed":true}`},
		{"plan edited", []resumeEntry{entry("p", "resolved", `{"confirmed":true,"tasks":[]}`)}, `p{"confirmed":true,"tasks":[]}`},
		{"plan cancelled", []resumeEntry{entry("p", "cancelled", ``)}, `p{"confirmed":false}`},
		{"task retried", []resumeEntry{entry("f", "resolved", `{"action":"retry"}`)}, `f{"action":"retry"}`},
		{"task cancelled is skipped", []resumeEntry{entry("f", "cancelled", ``)}, `f{"action":"skip"}`},
		{"tool approved", []resumeEntry{entry("x", "resolved", ``)}, `x{"approved":true}`},
		{"tool declined", []resumeEntry{entry("x", "resolved", `{"approved":false}`)}, `x{"approved":false}`},
		{"question answered", []resumeEntry{entry("q", "resolved", `{"text":"blue"}`)}, `q{"text":"blue"}`},
		{"two at once", []resumeEntry{entry("x", "cancelled", ``), entry("q", "cancelled", ``)}, `x{"approved":false} q{"text":""}`},
		{"unknown interrupt", []resumeEntry{entry("nope", "resolved", ``)}, `not open`},
		{"twice the same", []resumeEntry{entry("p", "resolved", ``), entry("p", "resolved", ``)}, `not open`},
		{"bad status", []resumeEntry{entry("p", "ok", ``)}, `want resolved or cancelled`},
		{"payload not an object", []resumeEntry{entry("p", "resolved", `[1]`)}, `want an object`},
		{"confirmed not a boolean", []resumeEntry{entry("p", "resolved", `{"confirmed":"yes"}`)}, `boolean`},
		{"unknown action", []resumeEntry{entry("f", "resolved", `{"action":"panic"}`)}, `retry, skip or abort`},
		{"question with no text", []resumeEntry{entry("q", "resolved", ``)}, `want a string`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			as, err := answersFor(tt.entries, pending)
			var got []string
			if err != nil {
				if as != nil {
					t.Errorf("answers %v with the error", as)
				}
				got = append(got, err.Error())
			}
			for _, a := range as {
				b, _ := json.Marshal(a.meta)
				got = append(got, a.stepID+string(b))
			}
			if s := strings.Join(got, " "); !strings.Contains(s, tt.want) {
				t.Errorf("got %s, want %s", s, tt.want)
			}
		})
	}
}

// TestStores: both stores claim once, replace, expire, and keep a value
// alive while it is read.
func TestStores(t *testing.T) {
	for _, tt := range []struct {
		name  string
		store func(t *testing.T) Store
	}{
		{"memory", func(*testing.T) Store { return &MemoryStore{} }},
		{"redis", func(t *testing.T) Store { return NewRedisStore(redistest.Start(t).Client(t)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := tt.store(t)
			if ok, err := s.Claim(ctx, "k", []byte("a"), time.Minute); !ok || err != nil {
				t.Fatalf("first claim: %v %v", ok, err)
			}
			if ok, err := s.Claim(ctx, "k", []byte("b"), time.Minute); ok || err != nil {
				t.Fatalf("second claim: %v %v", ok, err)
			}
			if v, err := s.Get(ctx, "k", time.Minute); string(v) != "a" || err != nil {
				t.Fatalf("get: %q %v", v, err)
			}
			if err := s.Put(ctx, "k", []byte("c"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if v, _ := s.Get(ctx, "k", time.Minute); string(v) != "c" {
				t.Fatalf("after put: %q", v)
			}
			if v, err := s.Get(ctx, "none", time.Minute); v != nil || err != nil {
				t.Fatalf("a missing key: %q %v", v, err)
			}
			// An expired value is gone, and may be claimed again.
			if err := s.Put(ctx, "e", []byte("x"), time.Millisecond); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				v, err := s.Get(ctx, "e", time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				if v == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the value did not expire")
				}
			}
			if ok, _ := s.Claim(ctx, "e", []byte("y"), time.Minute); !ok {
				t.Fatal("an expired key could not be claimed")
			}
		})
	}
}

// TestSeal: a record opens only with the subject and threadId that
// sealed it, and each is stored under a key of its own.
func TestSeal(t *testing.T) {
	rec := record{SessionID: "sess_1", FollowToken: "secret"}
	key, seal := threadKey("alice", "thread-1")
	sealed, err := sealRecord(seal, rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "secret") || strings.Contains(string(sealed), "sess_1") {
		t.Fatal("the sealed record shows its content")
	}
	if got, err := openRecord(seal, sealed); err != nil || got != rec {
		t.Fatalf("open: %+v %v", got, err)
	}
	for _, other := range [][2]string{{"bob", "thread-1"}, {"alice", "thread-2"}, {"", "thread-1"}, {"alicethread-1", ""}} {
		k, s := threadKey(other[0], other[1])
		if k == key {
			t.Errorf("%q %q: the same store key", other[0], other[1])
		}
		if _, err := openRecord(s, sealed); err == nil {
			t.Errorf("%q %q opened alice's record", other[0], other[1])
		}
	}
}
