package web

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// TestJSReducerAgrees is the agreement test: real runs are recorded from a
// real server (every frame in and out), folded with wsproto.State here —
// calling Answer, CloseConfirm and BeginSolving for the client's own frames
// as a client must — and replayed through baton-client.mjs in Node
// (testdata/agree.mjs), which compares its state with wsproto.State's after
// every entry of the log. Both are also compared with the server's own
// snapshot at quiet moments of each run.
func TestJSReducerAgrees(t *testing.T) {
	nodeBin(t) // skip before starting anything when there is no node
	tools := &tool.Set{}
	if err := tools.Add(
		testTool{tool.Spec{Name: "note", Description: "notes a text"}, "noted "},
		testTool{tool.Spec{Name: "danger", Description: "changes the world", Confirm: true}, "done "},
	); err != nil {
		t.Fatal(err)
	}
	// Six runs in one session, four kept: the history is cut as the runs go.
	srv := startServer(t, 0, &orchestrator.Options{RetryBase: 5 * time.Millisecond, Loop: solver.Loop{Tools: tools}, HistoryRuns: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	r := newRecorder(ctx, t, srv.WS())
	for _, run := range agreementRuns {
		t.Logf("run: %s", run.name)
		run.play(r)
		r.snapshot() // the run has ended: quiet
	}

	checkCoverage(t, r.log)
	expected := foldLog(t, r.log)
	dir := t.TempDir()
	if d := os.Getenv("BATON_AGREE_KEEP"); d != "" {
		dir = d // to look at the log after a failure
	}
	writeJSON(t, filepath.Join(dir, "log.json"), r.log)
	writeJSON(t, filepath.Join(dir, "expected.json"), expected)
	cmd := nodeCommand(ctx, t, []string{"BATON_AGREE=" + dir}, "testdata/agree.mjs")
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("testdata/agree.mjs: %v (ctx: %v)", err, ctx.Err())
	}
}

// agreementRuns play one run each, in one session: between them they cover
// every event kind, every kind of confirmation and every client frame that
// changes a client's state.
var agreementRuns = []struct {
	name string
	play func(r *recorder)
}{
	{"a plan confirmed with an edit; tool calls, todo lists, ask_user, a tool confirmation", func(r *recorder) {
		r.send(map[string]any{"event": "user.message", "content": "Research the history of tea"})
		r.drive(func(f wireFrame) {
			if f.Event != wsproto.EventUserConfirm {
				return
			}
			r.snapshot() // quiet: the task that asks runs alone, the plan waits
			switch f.meta(r.t)["kind"] {
			case wsproto.ConfirmPlan:
				r.respond(f.StepID, map[string]any{"confirmed": true, "tasks": []wsproto.Task{
					{ID: "a", Title: "Gather sources", Description: `Find them. [sim:tool=note {"text":"tea"}] [sim:ask=Which region first?]`, DependsOn: []string{}},
					{ID: "b", Title: "Write it up", Description: `[sim:tool=danger {"target":"draft"}]`, DependsOn: []string{"a"}},
				}})
			case wsproto.ConfirmInput:
				r.respond(f.StepID, map[string]any{"text": "China, then Britain"})
			case wsproto.ConfirmTool:
				r.respond(f.StepID, map[string]any{"approved": true})
			}
		})
	}},
	{"failures: a retry that succeeds, task_failed answered retry and skip", func(r *recorder) {
		r.send(solveTasks([]wsproto.Task{
			{ID: "f1", Title: "Flaky", Description: "[sim:fail=network*1]", DependsOn: []string{}},
			{ID: "f2", Title: "Broken once", Description: "[sim:fail=permanent*1]", DependsOn: []string{}},
			{ID: "f3", Title: "After f2", DependsOn: []string{"f2"}},
			{ID: "f4", Title: "Broken", Description: "[sim:fail=permanent*1]", DependsOn: []string{}},
			{ID: "f5", Title: "After f4", DependsOn: []string{"f4"}},
		}, false))
		r.drive(func(f wireFrame) {
			if f.Event == wsproto.EventUserConfirm {
				action := map[any]string{"f2": "retry", "f4": "skip"}[f.meta(r.t)["task_id"]]
				r.respond(f.StepID, map[string]any{"action": action})
			}
		})
	}},
	{"an adaptive run: an edit, an adjustment confirmed, a decide-step question", func(r *recorder) {
		r.send(map[string]any{"event": "user.message", "content": "Plan a garden party", "metadata": map[string]any{"adaptive": true}})
		r.drive(func(f wireFrame) {
			if f.Event != wsproto.EventUserConfirm {
				return
			}
			switch f.meta(r.t)["kind"] {
			case wsproto.ConfirmPlan:
				r.snapshot()
				r.respond(f.StepID, map[string]any{"confirmed": true, "tasks": []wsproto.Task{
					{ID: "p1", Title: "Guests", Description: "[sim:decide=adjust_plan:+Book a band]", DependsOn: []string{}},
					{ID: "p2", Title: "Food", Description: "[sim:decide=request_input:What budget?]", DependsOn: []string{"p1"}},
				}})
			case wsproto.ConfirmAdjust:
				r.snapshot() // quiet: no task starts until the decision is settled
				r.respond(f.StepID, map[string]any{"confirmed": true})
			case wsproto.ConfirmInput:
				r.respond(f.StepID, map[string]any{"text": "About 500 euros"})
			}
		})
	}},
	{"restart_task and cancel_task", func(r *recorder) {
		r.send(solveTasks([]wsproto.Task{
			{ID: "r1", Title: "Quick", DependsOn: []string{}},
			{ID: "r2", Title: "Slow", Description: "[sim:sleep=30s]", DependsOn: []string{}},
			{ID: "r3", Title: "After r1", DependsOn: []string{"r1"}},
		}, false))
		r3 := 0
		r.drive(func(f wireFrame) {
			if f.Event != wsproto.EventSolverCompleted || f.meta(r.t)["task_id"] != "r3" {
				return
			}
			if r3++; r3 == 1 {
				r.send(map[string]any{"event": "user.restart_task", "metadata": map[string]any{"task_id": "r1"}})
			} else {
				r.send(map[string]any{"event": "user.cancel_task", "metadata": map[string]any{"task_id": "r2"}})
			}
		})
	}},
	{"user.cancel while solving", func(r *recorder) {
		r.send(solveTasks([]wsproto.Task{
			{ID: "c1", Title: "Slow", Description: "[sim:sleep=30s]", DependsOn: []string{}},
			{ID: "c2", Title: "After c1", DependsOn: []string{"c1"}},
			{ID: "c3", Title: "Quick", DependsOn: []string{}},
		}, true))
		started, done, sent := false, false, false
		r.drive(func(f wireFrame) {
			switch m := f.meta(r.t); {
			case f.Event == wsproto.EventSolverStart && m["task_id"] == "c1":
				started = true
			case f.Event == wsproto.EventPlanDecision && m["after_task"] == "c3":
				done = true // c3 completed and its decision is made
			}
			if started && done && !sent {
				sent = true
				r.send(map[string]any{"event": "user.cancel"})
			}
		})
	}},
	{"a chat run: a tool confirmation, a question, the answer streamed", func(r *recorder) {
		r.send(map[string]any{"event": "user.message", "content": `Tidy my notes [sim:tool=danger {"target":"notes"}] [sim:ask=Which folder?]`,
			"metadata": map[string]any{"mode": "chat"}})
		r.drive(func(f wireFrame) {
			if f.Event != wsproto.EventUserConfirm {
				return
			}
			r.snapshot() // quiet: the chat run's one task waits for the user
			switch f.meta(r.t)["kind"] {
			case wsproto.ConfirmTool:
				r.respond(f.StepID, map[string]any{"approved": true})
			case wsproto.ConfirmInput:
				r.respond(f.StepID, map[string]any{"text": "The work folder"})
			}
		})
	}},
	{"replan, then reject", func(r *recorder) {
		r.send(map[string]any{"event": "user.message", "content": "Compare two databases"})
		plans := 0
		r.drive(func(f wireFrame) {
			if f.Event != wsproto.EventUserConfirm {
				return
			}
			if plans++; plans == 1 {
				r.snapshot()
				r.send(map[string]any{"event": "user.replan", "metadata": map[string]any{"feedback": "Shorter, please"}})
			} else {
				r.respond(f.StepID, map[string]any{"confirmed": false})
			}
		})
	}},
}

// checkCoverage fails when the runs no longer produce what they are meant
// to cover (a change of the simulated model, say): every event kind and
// confirmation kind that changes a client's state.
func checkCoverage(t *testing.T, log []entry) {
	t.Helper()
	seen := map[string]bool{}
	for _, e := range log {
		raw, dir := e.In, "in "
		if raw == nil {
			raw, dir = e.Out, "out "
		}
		if raw == nil {
			continue
		}
		var f struct {
			Event    string `json:"event"`
			Metadata struct {
				Kind string `json:"kind"`
			} `json:"metadata"`
		}
		json.Unmarshal(raw, &f)
		seen[dir+f.Event] = true
		if f.Metadata.Kind != "" {
			seen[dir+f.Event+"/"+f.Metadata.Kind] = true
		}
	}
	for _, want := range []string{
		"in plan.start", "in plan.completed", "in plan.decision", "in plan.updated", "in plan.cancelled",
		"in agent.user_confirm/plan_confirm", "in agent.user_confirm/task_failed", "in agent.user_confirm/tool_confirm",
		"in agent.user_confirm/plan_adjust", "in agent.user_confirm/input_request",
		"in solver.start", "in solver.progress", "in solver.completed", "in solver.cancelled", "in solver.skipped",
		"in solver.restarted", "in agent.tool_call", "in agent.tool_result", "in error.execution",
		"in error.recovery_started", "in error.recovery_failed", "in aggregate.start", "in aggregate.completed",
		"in pipeline.completed", "in agent.final_answer", "in pipeline.cancelled",
		"in todo.updated", "in todo.item_progress", "in todo.completed",
		"out user.message", "out user.solve_tasks", "out user.response", "out user.replan", "out user.cancel",
		"out user.cancel_task", "out user.restart_task",
	} {
		if !seen[want] {
			t.Errorf("the recorded runs have no %s", want)
		}
	}
}

func solveTasks(tasks []wsproto.Task, adaptive bool) map[string]any {
	meta := map[string]any{"tasks": tasks}
	if adaptive {
		meta["adaptive"] = true
	}
	return map[string]any{"event": "user.solve_tasks", "metadata": meta}
}

// testTool is a tool of the agreement runs: it answers its result and its
// arguments.
type testTool struct {
	spec   tool.Spec
	result string
}

func (tt testTool) Spec() tool.Spec { return tt.spec }

func (tt testTool) Call(_ context.Context, args json.RawMessage) (string, error) {
	return tt.result + string(args), nil
}

// clientFold is wsproto.State kept as a client must keep it (§6): the
// events folded, its own answers folded when it sends them, and a task list
// it sent seeding the run at the run's first solver.start.
type clientFold struct {
	st    wsproto.State
	seeds []seed
}

// seed is a task list the client sent: an edited plan (run set) or a
// user.solve_tasks list (run empty: the run's id is not known yet).
type seed struct {
	run   string
	tasks []wsproto.Task
}

// foldLog folds the log and returns the state, as §6's {phase, run}, after
// each entry. At each server snapshot the fold must equal it.
func foldLog(t *testing.T, log []entry) []json.RawMessage {
	t.Helper()
	var c clientFold
	out := make([]json.RawMessage, len(log))
	for i, e := range log {
		switch {
		case e.In != nil:
			var f wireFrame
			if err := json.Unmarshal(e.In, &f); err != nil {
				t.Fatal(err)
			}
			if err := c.in(f); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
		case e.Out != nil:
			if err := c.out(e.Out); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
		}
		b, err := json.Marshal(c.st.Snapshot(0, ""))
		if err != nil {
			t.Fatal(err)
		}
		var s struct {
			Phase   json.RawMessage `json:"phase"`
			Run     json.RawMessage `json:"run"`
			History json.RawMessage `json:"history"`
		}
		json.Unmarshal(b, &s)
		out[i], _ = json.Marshal(map[string]json.RawMessage{"phase": s.Phase, "run": s.Run, "history": s.History})
		if e.Snapshot != nil && !sameJSON(t, out[i], e.Snapshot) {
			t.Errorf("entry %d: wsproto.State folded as a client differs from the server's snapshot:\nfold:   %s\nserver: %s", i, out[i], e.Snapshot)
		}
	}
	return out
}

func (c *clientFold) in(f wireFrame) error {
	if f.Seq == 0 {
		if f.Event == wsproto.EventConnected {
			var m wsproto.Connected
			json.Unmarshal(f.Metadata, &m)
			c.st.SetHistoryLimit(m.HistoryLimit)
		}
		if f.Event == wsproto.EventError {
			var m wsproto.Error
			json.Unmarshal(f.Metadata, &m)
			if m.RefType == wsproto.EventUserSolve {
				c.seeds = slices.DeleteFunc(c.seeds, func(s seed) bool { return s.run == "" })
			}
		}
		return nil
	}
	var m struct {
		RunID string `json:"run_id"`
	}
	json.Unmarshal(f.Metadata, &m)
	if f.Event == wsproto.EventSolverStart {
		c.seed(m.RunID)
	}
	if err := c.st.ApplyJSON(f.Event, f.Metadata); err != nil {
		return err
	}
	switch f.Event {
	case wsproto.EventFinalAnswer, wsproto.EventPlanCancelled, wsproto.EventPipelineCancelled:
		c.seeds = slices.DeleteFunc(c.seeds, func(s seed) bool { return s.run == m.RunID })
	}
	return nil
}

// seed begins solving with the list the client sent, at the run's first
// solver.start.
func (c *clientFold) seed(runID string) {
	isNew := c.st.Run == nil || c.st.Run.RunID != runID
	if !isNew && c.st.Phase == wsproto.PhaseSolving {
		return
	}
	for i, s := range c.seeds {
		if s.run == runID || (isNew && s.run == "") {
			c.st.BeginSolving(runID, "", s.tasks)
			c.seeds = slices.Delete(c.seeds, i, i+1)
			return
		}
	}
}

func (c *clientFold) out(raw json.RawMessage) error {
	var f struct {
		Event    string `json:"event"`
		StepID   string `json:"step_id"`
		Metadata struct {
			Confirmed *bool          `json:"confirmed"`
			Tasks     []wsproto.Task `json:"tasks"`
			Text      *string        `json:"text"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return err
	}
	switch f.Event {
	case wsproto.EventUserSolve:
		c.seeds = slices.DeleteFunc(c.seeds, func(s seed) bool { return s.run == "" })
		c.seeds = append(c.seeds, seed{"", wsproto.NormalizeTasks(f.Metadata.Tasks)})
	case wsproto.EventUserResponse:
		if c.st.Run != nil {
			for _, p := range c.st.Run.PendingConfirm {
				if p.StepID != f.StepID || p.Kind != wsproto.ConfirmPlan {
					continue
				}
				c.seeds = slices.DeleteFunc(c.seeds, func(s seed) bool { return s.run == p.RunID })
				if m := f.Metadata; m.Confirmed != nil && *m.Confirmed && m.Tasks != nil {
					c.seeds = append(c.seeds, seed{p.RunID, wsproto.NormalizeTasks(m.Tasks)})
				}
				break
			}
		}
		if f.Metadata.Text != nil {
			c.st.Answer(f.StepID, *f.Metadata.Text)
		} else {
			c.st.CloseConfirm(f.StepID)
		}
	}
	return nil
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
