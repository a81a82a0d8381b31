package wsproto_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

var deep = `{"event":"user.ack","metadata":{"x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`

func TestDecodeText(t *testing.T) {
	yes := true
	tests := []struct {
		name    string
		frame   string
		want    wsproto.Request
		code    string
		refType string
	}{
		{"message", `{"event":"user.message","content":"hi"}`, &wsproto.Message{Text: "hi"}, "", ""},
		{"adaptive message", `{"event":"user.message","content":"hi","metadata":{"adaptive":true}}`, &wsproto.Message{Text: "hi", Adaptive: true}, "", ""},
		{"adaptive not a bool", `{"event":"user.message","content":"hi","metadata":{"adaptive":"yes"}}`, nil, "invalid_message", "user.message"},
		{"chat message", `{"event":"user.message","content":"hi","metadata":{"mode":"chat"}}`, &wsproto.Message{Text: "hi", Mode: wsproto.ModeChat}, "", ""},
		{"plan message", `{"event":"user.message","content":"hi","metadata":{"mode":"plan","adaptive":true}}`, &wsproto.Message{Text: "hi", Mode: wsproto.ModePlan, Adaptive: true}, "", ""},
		{"mode null reads as absent", `{"event":"user.message","content":"hi","metadata":{"mode":null}}`, &wsproto.Message{Text: "hi"}, "", ""},
		{"unknown mode", `{"event":"user.message","content":"hi","metadata":{"mode":"fast"}}`, nil, "invalid_message", "user.message"},
		{"empty mode", `{"event":"user.message","content":"hi","metadata":{"mode":""}}`, nil, "invalid_message", "user.message"},
		{"mode not a string", `{"event":"user.message","content":"hi","metadata":{"mode":["chat"]}}`, nil, "invalid_message", "user.message"},
		{"adaptive chat", `{"event":"user.message","content":"hi","metadata":{"mode":"chat","adaptive":true}}`, nil, "invalid_message", "user.message"},
		{"solve tasks, depends_on defaulted", `{"event":"user.solve_tasks","metadata":{"tasks":[{"id":"a","title":"A"}]}}`,
			&wsproto.SolveTasks{Tasks: []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}}}, "", ""},
		{"response, top-level step_id", `{"event":"user.response","step_id":"s1","metadata":{"confirmed":true}}`,
			&wsproto.Response{StepID: "s1", Confirmed: &yes}, "", ""},
		{"response, metadata step_id", `{"event":"user.response","metadata":{"step_id":"s1","action":"skip"}}`,
			&wsproto.Response{StepID: "s1", Action: "skip"}, "", ""},
		{"cancel, null metadata", `{"event":"user.cancel","metadata":null}`, &wsproto.Cancel{}, "", ""},
		{"cancel task", `{"event":"user.cancel_task","metadata":{"task_id":"a"}}`, &wsproto.CancelTask{TaskID: "a"}, "", ""},
		{"replan", `{"event":"user.replan","metadata":{"feedback":"fewer tasks"}}`, &wsproto.Replan{Feedback: "fewer tasks"}, "", ""},
		{"restart task", `{"event":"user.restart_task","metadata":{"task_id":"a"}}`, &wsproto.RestartTask{TaskID: "a"}, "", ""},
		{"ack", `{"event":"user.ack","metadata":{"last_seq":7}}`, &wsproto.Ack{LastSeq: 7}, "", ""},
		{"reconnect", `{"event":"user.reconnect_with_state","metadata":{"session_id":"s","resume_token":"t","last_seq":3,"state_checksum":"c"}}`,
			&wsproto.Reconnect{SessionID: "s", ResumeToken: "t", LastSeq: 3, StateChecksum: "c"}, "", ""},
		{"unknown fields ignored", `{"event":"user.cancel","extra":[1,2],"metadata":{"x":{}}}`, &wsproto.Cancel{}, "", ""},

		{"invalid JSON", `{"event":`, nil, "invalid_json", ""},
		{"invalid UTF-8", "{\"event\":\"user.message\",\"content\":\"\xff\"}", nil, "invalid_json", ""},
		{"too deep", deep, nil, "invalid_json", ""},
		{"array", `[]`, nil, "invalid_message", ""},
		{"string", `"x"`, nil, "invalid_message", ""},
		{"number", `1`, nil, "invalid_message", ""},
		{"null", `null`, nil, "invalid_message", ""},
		{"missing event", `{}`, nil, "invalid_message", ""},
		{"empty event", `{"event":""}`, nil, "invalid_message", ""},
		{"event a number", `{"event":5}`, nil, "invalid_message", ""},
		{"content a number", `{"event":"user.message","content":5}`, nil, "invalid_message", "user.message"},
		{"step_id a number", `{"event":"user.response","step_id":1,"metadata":{"confirmed":true}}`, nil, "invalid_message", "user.response"},
		{"metadata a string", `{"event":"user.ack","metadata":"x"}`, nil, "invalid_message", "user.ack"},
		{"metadata an array", `{"event":"user.ack","metadata":[]}`, nil, "invalid_message", "user.ack"},
		{"last_seq negative", `{"event":"user.ack","metadata":{"last_seq":-1}}`, nil, "invalid_message", "user.ack"},
		{"last_seq fractional", `{"event":"user.ack","metadata":{"last_seq":1.5}}`, nil, "invalid_message", "user.ack"},
		{"last_seq a string", `{"event":"user.ack","metadata":{"last_seq":"3"}}`, nil, "invalid_message", "user.ack"},
		{"last_seq missing", `{"event":"user.ack","metadata":{}}`, nil, "invalid_message", "user.ack"},
		{"message without content", `{"event":"user.message"}`, nil, "invalid_message", "user.message"},
		{"response without step_id", `{"event":"user.response","metadata":{"confirmed":true}}`, nil, "invalid_message", "user.response"},
		{"confirmed not a bool", `{"event":"user.response","step_id":"s","metadata":{"confirmed":"yes"}}`, nil, "invalid_message", "user.response"},
		{"reconnect without token", `{"event":"user.reconnect_with_state","metadata":{"session_id":"s","last_seq":0}}`, nil, "invalid_message", "user.reconnect_with_state"},
		{"cancel task without id", `{"event":"user.cancel_task","metadata":{}}`, nil, "invalid_message", "user.cancel_task"},
		{"replan without feedback", `{"event":"user.replan","metadata":{}}`, nil, "invalid_message", "user.replan"},
		{"replan feedback not a string", `{"event":"user.replan","metadata":{"feedback":3}}`, nil, "invalid_message", "user.replan"},
		{"restart task without id", `{"event":"user.restart_task","metadata":{"task_id":""}}`, nil, "invalid_message", "user.restart_task"},
		{"unknown event", `{"event":"user.dance"}`, nil, "unknown_type", "user.dance"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := wsproto.DecodeText([]byte(tt.frame))
			if tt.code != "" {
				if e == nil || e.Code != tt.code || e.RefType != tt.refType || e.Message == "" || got != nil {
					t.Fatalf("DecodeText = %#v, %+v; want code %s ref_type %q", got, e, tt.code, tt.refType)
				}
				return
			}
			if e != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeText = %#v, %+v; want %#v", got, e, tt.want)
			}
		})
	}
}

// The message says why a frame was refused where the reason is not plain
// bad syntax.
func TestDecodeTextMessages(t *testing.T) {
	tests := []struct{ name, frame, want string }{
		{"too deep", `{"event":"user.cancel","metadata":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, "nested more than 10000 levels deep"},
		{"bad syntax", `{"event":`, "not valid JSON (offset"},
		{"invalid UTF-8", "{\"event\":\"\xff\"}", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := wsproto.DecodeText([]byte(tt.frame))
			if e == nil || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("DecodeText error %+v, want a message containing %q", e, tt.want)
			}
		})
	}
}

func TestValidateTasks(t *testing.T) {
	tk := func(id, title string, deps ...string) wsproto.Task {
		return wsproto.Task{ID: id, Title: title, DependsOn: deps}
	}
	chain := make([]wsproto.Task, 50)
	for i := range chain {
		chain[i] = tk(string(rune('A'+i%26))+string(rune('a'+i/26)), "T")
		if i > 0 {
			chain[i].DependsOn = []string{chain[i-1].ID}
		}
	}
	type p struct {
		code  string
		index int // -1: none
		id    string
	}
	tests := []struct {
		name  string
		tasks []wsproto.Task
		want  []p
	}{
		{"single", []wsproto.Task{tk("a", "A")}, nil},
		{"diamond", []wsproto.Task{tk("a", "A"), tk("b", "B", "a"), tk("c", "C", "a"), tk("d", "D", "b", "c")}, nil},
		{"50-task chain", chain, nil},
		{"empty", nil, []p{{"empty", -1, ""}}},
		{"too many", append(append([]wsproto.Task{}, chain...), tk("zz", "Z")), []p{{"too_many", -1, ""}}},
		{"empty id", []wsproto.Task{tk("", "A")}, []p{{"empty_id", 0, ""}}},
		{"duplicate id", []wsproto.Task{tk("a", "A"), tk("a", "B")}, []p{{"duplicate_id", 1, "a"}}},
		{"empty title", []wsproto.Task{tk("a", "")}, []p{{"empty_title", 0, "a"}}},
		{"unknown dependency", []wsproto.Task{tk("a", "A", "x")}, []p{{"unknown_dependency", 0, "a"}}},
		{"self dependency", []wsproto.Task{tk("a", "A", "a")}, []p{{"cycle", 0, "a"}}},
		{"3-cycle", []wsproto.Task{tk("a", "A", "c"), tk("b", "B", "a"), tk("c", "C", "b")}, []p{{"cycle", 0, "a"}}},
		{"several at once", []wsproto.Task{tk("a", ""), tk("a", "B", "q")}, []p{{"empty_title", 0, "a"}, {"duplicate_id", 1, "a"}, {"unknown_dependency", 1, "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := wsproto.ValidateTasks(tt.tasks, 50)
			var simple []p
			for _, g := range got {
				i := -1
				if g.Index != nil {
					i = *g.Index
				}
				simple = append(simple, p{g.Code, i, g.TaskID})
				if g.Message == "" {
					t.Errorf("problem %s has no message", g.Code)
				}
			}
			if !reflect.DeepEqual(simple, tt.want) {
				t.Errorf("ValidateTasks = %+v, want %+v", simple, tt.want)
			}
		})
	}
}

func TestAppendFrame(t *testing.T) {
	ts := time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.FixedZone("x", 3600))
	tricky := "quote\" back\\ ctl\x01\b\f\n<b>&amp; \u2028\u2029 bad\xff ok é"
	tests := []struct {
		name  string
		frame wsproto.Frame
		want  map[string]any
	}{
		{"sequenced with step_id", wsproto.Frame{Event: "agent.user_confirm", EventID: "e1", Seq: 4, SessionID: "s", StepID: "st",
			Timestamp: ts, Content: tricky, Metadata: &wsproto.PlanStep{RunID: "r", Step: 1, Description: tricky}},
			map[string]any{"event": "agent.user_confirm", "event_id": "e1", "seq": 4.0, "session_id": "s", "step_id": "st",
				"timestamp": "2026-11-22T09:00:00.123456789Z", "content": tricky,
				"metadata": map[string]any{"run_id": "r", "step": 1.0, "description": tricky}}},
		{"unsequenced, nil metadata", wsproto.Frame{Event: "system.error", EventID: "e2", SessionID: "s", Timestamp: ts},
			map[string]any{"event": "system.error", "event_id": "e2", "session_id": "s",
				"timestamp": "2026-11-22T09:00:00.123456789Z", "content": "", "metadata": map[string]any{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := wsproto.AppendFrame(nil, tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("not JSON: %s", b)
			}
			// encoding/json replaces invalid UTF-8 the same way.
			want, _ := json.Marshal(tt.want)
			var wantMap map[string]any
			json.Unmarshal(want, &wantMap)
			if !reflect.DeepEqual(got, wantMap) {
				t.Errorf("got  %s\nwant %s", b, want)
			}
			if enc, _ := json.Marshal(tt.frame.Content); tt.frame.Content != "" && !strings.Contains(string(b), `"content":`+string(enc)) {
				t.Errorf("content not escaped as encoding/json does: %s vs %s", b, enc)
			}
		})
	}
	if _, err := wsproto.AppendFrame(nil, wsproto.Frame{Event: "x", Metadata: []int{1}}); err == nil {
		t.Error("non-object metadata accepted")
	}
}

func TestStateReducer(t *testing.T) {
	var s wsproto.State
	phases := []string{}
	apply := func(event string, m any) {
		s.Apply(event, m)
		phases = append(phases, s.Snapshot(0, "").Phase)
	}
	tasks := []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}, {ID: "b", Title: "B", DependsOn: []string{"a"}}}
	apply(wsproto.EventPlanStart, &wsproto.PlanStart{RunID: "r", Request: "q"})
	apply(wsproto.EventPlanCompleted, &wsproto.PlanCompleted{RunID: "r", PlanSummary: "p", Tasks: tasks})
	apply(wsproto.EventUserConfirm, &wsproto.UserConfirm{RunID: "r", StepID: "s1", Kind: wsproto.ConfirmPlan})
	if len(s.Run.PendingConfirm) != 1 {
		t.Fatalf("pending %v", s.Run.PendingConfirm)
	}
	apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "r", TaskID: "a", Attempt: 1})
	if len(s.Run.PendingConfirm) != 0 || s.Run.Tasks[0].Status != wsproto.TaskRunning {
		t.Fatalf("after solver.start: %+v", s.Run)
	}
	apply(wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: "other", TaskID: "b", Attempt: 9}) // another run: ignored
	apply(wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: "r", TaskID: "a", Attempt: 1, Result: "ra"})
	apply(wsproto.EventAggregateStart, &wsproto.AggregateStart{RunID: "r"})
	apply(wsproto.EventPipelineCancelled, &wsproto.PipelineCancelled{RunID: "r", Reason: "user_cancel"})
	want := []string{"planning", "planning", "awaiting_confirm", "solving", "solving", "solving", "aggregating", "idle"}
	if !reflect.DeepEqual(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
	if a, b := s.Run.Tasks[0], s.Run.Tasks[1]; a.Status != "completed" || a.Result != "ra" || b.Status != "cancelled" || b.Attempt != 0 {
		t.Errorf("tasks %+v", s.Run.Tasks)
	}

	// ApplyJSON on encoded frames equals Apply on typed values.
	var viaJSON wsproto.State
	for _, ev := range []struct {
		name string
		meta any
	}{
		{wsproto.EventPlanStart, &wsproto.PlanStart{RunID: "r", Request: "q"}},
		{wsproto.EventPlanCompleted, &wsproto.PlanCompleted{RunID: "r", PlanSummary: "p", Tasks: tasks}},
		{wsproto.EventFinalAnswer, &wsproto.FinalAnswer{RunID: "r", Content: "done"}},
	} {
		b, _ := json.Marshal(ev.meta)
		if err := viaJSON.ApplyJSON(ev.name, b); err != nil {
			t.Fatal(err)
		}
	}
	if viaJSON.Phase != wsproto.PhaseIdle || *viaJSON.Run.FinalAnswer != "done" || viaJSON.Run.Tasks[1].Status != "cancelled" {
		t.Errorf("via JSON: %+v", viaJSON.Run)
	}

	// BeginSolving replaces the plan's tasks with an edit.
	s = wsproto.State{}
	s.Apply(wsproto.EventPlanStart, &wsproto.PlanStart{RunID: "r"})
	s.Apply(wsproto.EventUserConfirm, &wsproto.UserConfirm{RunID: "r", StepID: "s1", Kind: wsproto.ConfirmPlan})
	s.BeginSolving("r", "", tasks[:1])
	if s.Phase != wsproto.PhaseSolving || len(s.Run.Tasks) != 1 || len(s.Run.PendingConfirm) != 0 {
		t.Errorf("after BeginSolving: %s %+v", s.Phase, s.Run)
	}
}

// solver.restarted puts a finished task back to pending: its result and
// error go, its attempt count stays, and its open question is withdrawn.
func TestStateRestarted(t *testing.T) {
	var s wsproto.State
	s.BeginSolving("r", "", []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}})
	s.Apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "r", TaskID: "a", Attempt: 1})
	s.Apply(wsproto.EventExecutionError, &wsproto.ExecutionError{RunID: "r", TaskID: "a", Attempt: 1, Message: "boom"})
	s.Apply(wsproto.EventUserConfirm, &wsproto.UserConfirm{RunID: "r", StepID: "q", Kind: wsproto.ConfirmTaskFailed, TaskID: "a"})
	s.Apply(wsproto.EventSolverRestarted, &wsproto.SolverRestarted{RunID: "r", TaskID: "a", Reason: wsproto.ReasonUserRestart})
	if a := s.Run.Tasks[0]; a.Status != wsproto.TaskPending || a.Error != "" || a.Attempt != 1 || len(s.Run.PendingConfirm) != 0 {
		t.Errorf("after solver.restarted: %+v, pending %v", a, s.Run.PendingConfirm)
	}
}

// A skipped task keeps why, as solver.skipped said it, until it is
// restarted: a snapshot tells a resynced client what the events told.
func TestStateSkipReason(t *testing.T) {
	tasks := []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}, {ID: "b", Title: "B", DependsOn: []string{"a"}}}
	for _, tc := range []struct {
		name           string
		events         []any // metadata, in order, after BeginSolving
		reason, depend string
		status         string
	}{
		{name: "a dependency failed", events: []any{
			&wsproto.SolverSkipped{RunID: "r", TaskID: "b", Reason: wsproto.ReasonDependencyFailed, Dependency: "a"},
		}, reason: wsproto.ReasonDependencyFailed, depend: "a", status: wsproto.TaskSkipped},
		{name: "the run synthesized early", events: []any{
			&wsproto.SolverSkipped{RunID: "r", TaskID: "b", Reason: wsproto.ReasonSynthesized},
		}, reason: wsproto.ReasonSynthesized, status: wsproto.TaskSkipped},
		{name: "restarted: the reason is gone", events: []any{
			&wsproto.SolverSkipped{RunID: "r", TaskID: "b", Reason: wsproto.ReasonDependencyFailed, Dependency: "a"},
			&wsproto.SolverRestarted{RunID: "r", TaskID: "b", Reason: wsproto.ReasonUserRestart},
		}, status: wsproto.TaskPending},
		{name: "another run's skip changes nothing", events: []any{
			&wsproto.SolverSkipped{RunID: "other", TaskID: "b", Reason: wsproto.ReasonSynthesized},
		}, status: wsproto.TaskPending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s wsproto.State
			s.BeginSolving("r", "", tasks)
			for _, m := range tc.events {
				event := wsproto.EventSolverSkipped
				if _, ok := m.(*wsproto.SolverRestarted); ok {
					event = wsproto.EventSolverRestarted
				}
				s.Apply(event, m)
			}
			b := s.Run.Tasks[1]
			if b.Status != tc.status || b.SkipReason != tc.reason || b.SkipDependency != tc.depend {
				t.Errorf("task b: status %q, skip_reason %q, skip_dependency %q; want %q, %q, %q",
					b.Status, b.SkipReason, b.SkipDependency, tc.status, tc.reason, tc.depend)
			}
			raw, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if has := strings.Contains(string(raw), `"skip_reason"`); has != (tc.reason != "") {
				t.Errorf("the snapshot's task %s: skip_reason present %v, want %v", raw, has, tc.reason != "")
			}
		})
	}
}

// A solver.start of an unknown run begins it: that is how a
// user.solve_tasks run, which has no plan events, first shows.
func TestSolveTasksRunBeginsAtSolverStart(t *testing.T) {
	var s wsproto.State
	s.Apply(wsproto.EventPlanStart, &wsproto.PlanStart{RunID: "old"})
	s.Apply(wsproto.EventPipelineCancelled, &wsproto.PipelineCancelled{RunID: "old"})
	s.Apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "new", TaskID: "a", Attempt: 1})
	if s.Run.RunID != "new" || s.Phase != wsproto.PhaseSolving {
		t.Errorf("run %+v phase %s", s.Run, s.Phase)
	}
}

func TestValidateAdjustment(t *testing.T) {
	run := []wsproto.TaskState{
		{Task: wsproto.Task{ID: "a", Title: "A", DependsOn: []string{}}, Status: wsproto.TaskCompleted},
		{Task: wsproto.Task{ID: "b", Title: "B", DependsOn: []string{}}, Status: wsproto.TaskRunning},
		{Task: wsproto.Task{ID: "c", Title: "C", DependsOn: []string{"a"}}, Status: wsproto.TaskPending},
		{Task: wsproto.Task{ID: "d", Title: "D", DependsOn: []string{"c"}}, Status: wsproto.TaskPending},
	}
	task := func(id string, deps ...string) wsproto.Task {
		return wsproto.Task{ID: id, Title: "T " + id, DependsOn: append([]string{}, deps...)}
	}
	tests := []struct {
		name   string
		add    []wsproto.Task
		remove []string
		max    int
		ids    []string // the list after, when valid
		codes  []string // the problems' codes, when not
	}{
		{name: "add after a completed task", add: []wsproto.Task{task("e", "a")}, ids: []string{"a", "b", "c", "d", "e"}},
		{name: "remove a pending task and its pending dependent", remove: []string{"d", "c"}, ids: []string{"a", "b"}},
		{name: "nothing", codes: []string{"no_change"}},
		{name: "remove a running task", remove: []string{"b"}, codes: []string{"not_pending"}},
		{name: "remove a completed task", remove: []string{"a"}, codes: []string{"not_pending"}},
		{name: "remove an unknown task", remove: []string{"z"}, codes: []string{"unknown_task"}},
		{name: "remove a task another depends on", remove: []string{"c"}, codes: []string{"unknown_dependency"}},
		{name: "an id the run has", add: []wsproto.Task{task("a")}, codes: []string{"duplicate_id"}},
		{name: "an id retired earlier", add: []wsproto.Task{task("gone")}, codes: []string{"duplicate_id"}},
		{name: "an id removed in the same change", add: []wsproto.Task{task("d", "c")}, remove: []string{"d"}, codes: []string{"duplicate_id"}},
		{name: "a dependency that does not exist", add: []wsproto.Task{task("e", "nope")}, codes: []string{"unknown_dependency"}},
		{name: "a cycle among added tasks", add: []wsproto.Task{task("e", "f"), task("f", "e")}, codes: []string{"cycle"}},
		{name: "an empty title", add: []wsproto.Task{{ID: "e"}}, codes: []string{"empty_title"}},
		{name: "too many", add: []wsproto.Task{task("e")}, max: 4, codes: []string{"too_many"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after, probs := wsproto.ValidateAdjustment(run, []string{"gone"}, tt.add, tt.remove, tt.max)
			var codes, ids []string
			for _, p := range probs {
				codes = append(codes, p.Code)
				if p.Message == "" {
					t.Errorf("problem without a message: %+v", p)
				}
			}
			for _, task := range after {
				ids = append(ids, task.ID)
			}
			if !reflect.DeepEqual(codes, tt.codes) || !reflect.DeepEqual(ids, tt.ids) {
				t.Errorf("codes %v ids %v, want codes %v ids %v (%+v)", codes, ids, tt.codes, tt.ids, probs)
			}
		})
	}
}

func TestDiffTasks(t *testing.T) {
	run := []wsproto.TaskState{
		{Task: wsproto.Task{ID: "a", Title: "A", DependsOn: []string{}}, Status: wsproto.TaskCompleted},
		{Task: wsproto.Task{ID: "b", Title: "B", DependsOn: []string{"a"}}, Status: wsproto.TaskPending},
	}
	tests := []struct {
		name   string
		edited []wsproto.Task
		add    []string
		remove []string
		codes  []string
	}{
		{name: "add one, leave one out", edited: []wsproto.Task{run[0].Task, {ID: "c", Title: "C"}}, add: []string{"c"}, remove: []string{"b"}},
		{name: "unchanged", edited: []wsproto.Task{run[0].Task, run[1].Task}},
		{name: "a task changed", edited: []wsproto.Task{{ID: "a", Title: "Other", DependsOn: []string{}}, run[1].Task}, codes: []string{"task_changed"}},
		{name: "an id twice", edited: []wsproto.Task{run[0].Task, run[0].Task, run[1].Task}, codes: []string{"duplicate_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add, remove, probs := wsproto.DiffTasks(run, tt.edited)
			var addIDs, codes []string
			for _, a := range add {
				addIDs = append(addIDs, a.ID)
			}
			for _, p := range probs {
				codes = append(codes, p.Code)
			}
			if !reflect.DeepEqual(addIDs, tt.add) || !reflect.DeepEqual(remove, tt.remove) || !reflect.DeepEqual(codes, tt.codes) {
				t.Errorf("add %v remove %v problems %v; want %v %v %v", addIDs, remove, codes, tt.add, tt.remove, tt.codes)
			}
		})
	}
}

// The adaptive events fold into the state: the decision is kept, an
// update replaces the list (tasks the run had keep their state) and its
// version, and settles the plan_adjust confirmation.
func TestStateAdaptive(t *testing.T) {
	var s wsproto.State
	tasks := []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}, {ID: "b", Title: "B", DependsOn: []string{}}}
	s.Apply(wsproto.EventPlanStart, &wsproto.PlanStart{RunID: "r", Request: "q"})
	if s.Run.PlanVersion != 0 {
		t.Errorf("version while planning %d", s.Run.PlanVersion)
	}
	s.Apply(wsproto.EventPlanCompleted, &wsproto.PlanCompleted{RunID: "r", Tasks: tasks})
	s.BeginSolving("r", "q", tasks)
	s.Apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "r", TaskID: "a", Attempt: 1})
	s.Apply(wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: "r", TaskID: "a", Attempt: 1, Result: "ra"})
	s.Apply(wsproto.EventPlanDecision, &wsproto.PlanDecision{RunID: "r", AfterTask: "a", Action: wsproto.ActionAdjustPlan, Reason: "why"})
	s.Apply(wsproto.EventUserConfirm, &wsproto.UserConfirm{RunID: "r", StepID: "s", Kind: wsproto.ConfirmAdjust})
	if s.Run.PlanVersion != 1 || s.Run.LastDecision == nil || s.Run.LastDecision.Action != "adjust_plan" || s.Phase != wsproto.PhaseSolving {
		t.Fatalf("before the update: %s %+v", s.Phase, s.Run)
	}
	c := wsproto.Task{ID: "c", Title: "C", DependsOn: []string{"a"}}
	s.Apply(wsproto.EventPlanUpdated, &wsproto.PlanUpdated{RunID: "r", Version: 2, Added: []wsproto.Task{c},
		Removed: []string{"b"}, Tasks: []wsproto.Task{tasks[0], c}})
	if r := s.Run; r.PlanVersion != 2 || len(r.Tasks) != 2 || r.Tasks[0].Result != "ra" || r.Tasks[1].ID != "c" ||
		r.Tasks[1].Status != wsproto.TaskPending || len(r.PendingConfirm) != 0 {
		t.Errorf("after the update: %+v", r)
	}

	// A plan_adjust confirmation carries added and removed as arrays, even empty.
	b, _ := json.Marshal(&wsproto.UserConfirm{Kind: wsproto.ConfirmAdjust, Added: []wsproto.Task{c}, Removed: []string{}})
	if !strings.Contains(string(b), `"removed":[]`) || !strings.Contains(string(b), `"added":[{`) {
		t.Errorf("plan_adjust %s", b)
	}
	if b, _ := json.Marshal(&wsproto.UserConfirm{Kind: wsproto.ConfirmPlan}); strings.Contains(string(b), "removed") {
		t.Errorf("plan_confirm %s", b)
	}
}

// A chat run's solver.start seeds the run with its one task, once: a
// client that saw nothing of the run before has it whole.
func TestStateChatStart(t *testing.T) {
	task := wsproto.Task{ID: "t1", Title: "Hi", Description: "Hi there", DependsOn: []string{}}
	var s wsproto.State
	for attempt := 1; attempt <= 2; attempt++ {
		s.Apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "r", TaskID: "t1", Attempt: attempt, Mode: wsproto.ModeChat, Task: &task})
	}
	r := s.Run
	if s.Phase != wsproto.PhaseSolving || r == nil || r.Mode != wsproto.ModeChat || r.Request != "Hi there" || r.PlanVersion != 1 ||
		len(r.Tasks) != 1 || r.Tasks[0].Task.Title != "Hi" || r.Tasks[0].Status != wsproto.TaskRunning || r.Tasks[0].Attempt != 2 {
		t.Fatalf("state after a chat run's starts: %q %+v", s.Phase, r)
	}
	// The server's own state, begun before the event, ends the same.
	var server wsproto.State
	server.BeginSolvingMode("r", "Hi there", wsproto.ModeChat, []wsproto.Task{task})
	server.Apply(wsproto.EventSolverStart, &wsproto.SolverStart{RunID: "r", TaskID: "t1", Attempt: 1, Mode: wsproto.ModeChat, Task: &task})
	if got := server.Run; got.Mode != r.Mode || got.Request != r.Request || len(got.Tasks) != 1 {
		t.Errorf("the server's state %+v, the client's %+v", got, r)
	}
}
