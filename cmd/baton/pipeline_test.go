package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// runToConfirm sends a request and reads up to the plan confirmation.
func runToConfirm(t *testing.T, c *conn, request string) ([]client.Frame, wsproto.UserConfirm) {
	t.Helper()
	c.message(request)
	frames := c.until(wsproto.EventUserConfirm)
	last := frames[len(frames)-1]
	m := meta[wsproto.UserConfirm](t, last)
	if last.StepID == "" || last.StepID != m.StepID || m.Kind != wsproto.ConfirmPlan {
		t.Fatalf("confirmation: step_id %q, metadata %+v", last.StepID, m)
	}
	return frames, m
}

func TestHappyPath(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	if hello.SessionID == "" || len(hello.ResumeToken) < 22 || hello.Resumed || hello.LastSeq != 0 ||
		hello.StateChecksum != "" || hello.BufferCapacity != 1000 || hello.Replayed != nil {
		t.Fatalf("system.connected %+v", hello)
	}
	const request = "Plan a weekend trip to Lisbon"
	frames, confirm := runToConfirm(t, c, request)
	c.respond(confirm.StepID, map[string]any{"confirmed": true})
	frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
	checkStream(t, frames, 1)

	// The exact order of §5.
	names := make([]string, len(frames))
	for i, f := range frames {
		names[i] = f.Event
	}
	i := 0
	take := func(event string) client.Frame {
		t.Helper()
		if i >= len(frames) || frames[i].Event != event {
			t.Fatalf("event %d is %v, want %s; all: %v", i, names[min(i, len(names)-1)], event, names)
		}
		i++
		return frames[i-1]
	}
	runID := meta[wsproto.PlanStart](t, take(wsproto.EventPlanStart)).RunID
	for step := 1; frames[i].Event == wsproto.EventPlanStepCompleted; step++ {
		if s := meta[wsproto.PlanStep](t, take(wsproto.EventPlanStepCompleted)); s.Step != step {
			t.Fatalf("plan step %d, want %d", s.Step, step)
		}
	}
	plan := meta[wsproto.PlanCompleted](t, take(wsproto.EventPlanCompleted))
	if n := len(plan.Tasks); n < 2 || n > 6 {
		t.Fatalf("%d tasks", n)
	}
	take(wsproto.EventUserConfirm)
	done := map[string]bool{}
	running := map[string]bool{}
	progress := map[string]float64{}
	for frames[i].Event != wsproto.EventAggregateStart {
		f := frames[i]
		i++
		switch f.Event {
		case wsproto.EventSolverStart:
			m := meta[wsproto.SolverStart](t, f)
			running[m.TaskID] = true
			for _, task := range plan.Tasks {
				if task.ID == m.TaskID {
					for _, d := range task.DependsOn {
						if !done[d] {
							t.Errorf("%s started before its dependency %s completed", m.TaskID, d)
						}
					}
				}
			}
		case wsproto.EventSolverProgress:
			m := meta[wsproto.SolverProgress](t, f)
			if m.Progress < progress[m.TaskID] || m.Progress > 1 {
				t.Errorf("progress of %s went %v → %v", m.TaskID, progress[m.TaskID], m.Progress)
			}
			progress[m.TaskID] = m.Progress
		case wsproto.EventSolverCompleted:
			id := meta[wsproto.SolverCompleted](t, f).TaskID
			done[id], running[id] = true, false
		case wsproto.EventToolCall, wsproto.EventToolResult, wsproto.EventTodoUpdated,
			wsproto.EventTodoItemProgress, wsproto.EventTodoCompleted:
			// The agent loop of a running task (checked in agent_test.go).
			if id := meta[struct {
				TaskID string `json:"task_id"`
			}](t, f).TaskID; !running[id] {
				t.Errorf("%s of %s, which is not running", f.Event, id)
			}
		default:
			t.Fatalf("unexpected %s while solving", f.Event)
		}
	}
	if len(done) != len(plan.Tasks) {
		t.Fatalf("%d of %d tasks completed", len(done), len(plan.Tasks))
	}
	if a := meta[wsproto.AggregateStart](t, take(wsproto.EventAggregateStart)); a.Completed != len(plan.Tasks) || a.Failed+a.Skipped+a.Cancelled != 0 {
		t.Errorf("aggregate.start %+v", a)
	}
	for frames[i].Event == wsproto.EventAggregateProgress {
		i++
	}
	take(wsproto.EventAggregateCompleted)
	pc := meta[wsproto.PipelineCompleted](t, take(wsproto.EventPipelineCompleted))
	if pc.Status != wsproto.StatusSucceeded || pc.Completed != len(plan.Tasks) {
		t.Errorf("pipeline.completed %+v", pc)
	}
	answer := meta[wsproto.FinalAnswer](t, take(wsproto.EventFinalAnswer))
	if !strings.Contains(answer.Content, "Lisbon") || frames[i-1].Content != answer.Content {
		t.Errorf("final answer %q", answer.Content)
	}
	for _, f := range frames {
		var m struct {
			RunID string `json:"run_id"`
		}
		if m = meta[struct {
			RunID string `json:"run_id"`
		}](t, f); m.RunID != runID {
			t.Fatalf("%s has run_id %q, want %q", f.Event, m.RunID, runID)
		}
	}

	// The session waits for new input: a second run starts at once.
	c.message("again")
	if f := c.expect(wsproto.EventPlanStart); f.Seq != frames[len(frames)-1].Seq+1 {
		t.Errorf("second run starts at seq %d", f.Seq)
	}
}

func TestSimPlanIsDeterministic(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	plans := make([][]wsproto.Task, 2)
	for i := range plans {
		c, _ := connect(t, base)
		frames, _ := runToConfirm(t, c, "Write a haiku about resilient networks")
		plans[i] = meta[wsproto.PlanCompleted](t, frames[len(frames)-2]).Tasks
	}
	if len(plans[0]) != len(plans[1]) {
		t.Fatalf("plans differ: %v vs %v", plans[0], plans[1])
	}
	independent := 0
	for i, task := range plans[0] {
		if task.ID != plans[1][i].ID || task.Title != plans[1][i].Title {
			t.Fatalf("plans differ at %d", i)
		}
		if len(task.DependsOn) == 0 {
			independent++
		}
	}
	last := plans[0][len(plans[0])-1]
	if independent < 2 || len(last.DependsOn) == 0 {
		t.Errorf("want ≥2 independent tasks and a final one depending on others: %+v", plans[0])
	}
}

func TestConfirmation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		answer func(c *conn, m wsproto.UserConfirm)
		check  func(t *testing.T, c *conn, m wsproto.UserConfirm)
	}{
		{
			name:   "reject",
			answer: func(c *conn, m wsproto.UserConfirm) { c.respond(m.StepID, map[string]any{"confirmed": false}) },
			check: func(t *testing.T, c *conn, m wsproto.UserConfirm) {
				if p := meta[wsproto.PlanCancelled](t, c.expect(wsproto.EventPlanCancelled)); p.Reason != "user_reject" || p.RunID != m.RunID {
					t.Errorf("plan.cancelled %+v", p)
				}
			},
		},
		{
			name:   "timeout, then a late answer",
			args:   []string{"--confirm-timeout", "100ms"},
			answer: func(*conn, wsproto.UserConfirm) {},
			check: func(t *testing.T, c *conn, m wsproto.UserConfirm) {
				if p := meta[wsproto.PlanCancelled](t, c.expect(wsproto.EventPlanCancelled)); p.Reason != "confirm_timeout" {
					t.Errorf("plan.cancelled %+v", p)
				}
				c.respond(m.StepID, map[string]any{"confirmed": true})
				c.expectError("step_id_mismatch")
			},
		},
		{
			name: "edited tasks are what gets solved",
			answer: func(c *conn, m wsproto.UserConfirm) {
				c.respond(m.StepID, map[string]any{"confirmed": true, "tasks": []wsproto.Task{
					{ID: "x", Title: "Edited X"}, {ID: "y", Title: "Edited Y", DependsOn: []string{"x"}}}})
			},
			check: func(t *testing.T, c *conn, _ wsproto.UserConfirm) {
				var started []string
				for _, f := range c.until(wsproto.EventFinalAnswer) {
					if f.Event == wsproto.EventSolverStart {
						started = append(started, meta[wsproto.SolverStart](t, f).TaskID)
					}
				}
				if strings.Join(started, ",") != "x,y" {
					t.Errorf("solved %v, want x then y", started)
				}
			},
		},
		{
			name: "step_id in metadata, then a second answer and a wrong one",
			answer: func(c *conn, m wsproto.UserConfirm) {
				c.send("user.response", map[string]any{"step_id": m.StepID, "confirmed": true})
			},
			check: func(t *testing.T, c *conn, m wsproto.UserConfirm) {
				c.expect(wsproto.EventSolverStart)
				c.respond(m.StepID, map[string]any{"confirmed": true})
				c.respond("confirm_plan_nope", map[string]any{"confirmed": true})
				// The run goes on untouched; the two errors arrive among its events.
				errs := 0
				for _, f := range c.until(wsproto.EventFinalAnswer) {
					if f.Event == wsproto.EventError {
						if e := meta[wsproto.Error](t, f); e.Code != "step_id_mismatch" {
							t.Errorf("error %+v", e)
						}
						errs++
					}
				}
				if errs != 2 {
					t.Errorf("%d step_id_mismatch errors, want 2", errs)
				}
			},
		},
		{
			name:   "an answer without confirmed keeps the confirmation open",
			answer: func(c *conn, m wsproto.UserConfirm) { c.respond(m.StepID, map[string]any{}) },
			check: func(t *testing.T, c *conn, m wsproto.UserConfirm) {
				c.expectError("invalid_message")
				c.respond(m.StepID, map[string]any{"confirmed": true})
				c.until(wsproto.EventFinalAnswer)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, _ := connect(t, base)
			_, m := runToConfirm(t, c, "Summarise the news")
			if m.ExpiresAt.IsZero() || len(m.Tasks) == 0 || m.PlanSummary == "" {
				t.Fatalf("confirmation metadata %+v", m)
			}
			tt.answer(c, m)
			tt.check(t, c, m)
			// Whatever happened, the session takes a new run.
			c.sendFrame(map[string]any{"event": "user.solve_tasks", "metadata": map[string]any{"tasks": []wsproto.Task{{ID: "a", Title: "A"}}}})
			c.until(wsproto.EventFinalAnswer)
		})
	}
}

func TestInvalidTasks(t *testing.T) {
	t.Parallel()
	// 6: the sim planner's plans (3 to 6 tasks) must stay valid.
	base := startServer(t, "--max-tasks", "6")
	tk := func(id, title string, deps ...string) wsproto.Task {
		return wsproto.Task{ID: id, Title: title, DependsOn: deps}
	}
	tests := []struct {
		name  string
		tasks []wsproto.Task
		code  string
	}{
		{"empty", []wsproto.Task{}, wsproto.ProblemEmpty},
		{"too many", []wsproto.Task{tk("a", "A"), tk("b", "B"), tk("c", "C"), tk("d", "D"), tk("e", "E"), tk("f", "F"), tk("g", "G")}, wsproto.ProblemTooMany},
		{"empty id", []wsproto.Task{tk("", "A")}, wsproto.ProblemEmptyID},
		{"duplicate id", []wsproto.Task{tk("a", "A"), tk("a", "B")}, wsproto.ProblemDuplicateID},
		{"empty title", []wsproto.Task{tk("a", "")}, wsproto.ProblemEmptyTitle},
		{"unknown dependency", []wsproto.Task{tk("a", "A", "zz")}, wsproto.ProblemUnknownDependency},
		{"cycle", []wsproto.Task{tk("a", "A", "c"), tk("b", "B", "a"), tk("c", "C", "b")}, wsproto.ProblemCycle},
		{"self dependency", []wsproto.Task{tk("a", "A", "a")}, wsproto.ProblemCycle},
		// Fault directives of the simulated model fail loudly, never read as text.
		{"unknown directive", []wsproto.Task{{ID: "a", Title: "A", Description: "[sim:explode=now]"}}, wsproto.ProblemInvalidDirective},
		{"bad error type", []wsproto.Task{{ID: "a", Title: "A", Description: "[sim:fail=bogus*2]"}}, wsproto.ProblemInvalidDirective},
		{"bad duration", []wsproto.Task{tk("a", "A"), {ID: "b", Title: "B", Description: "[sim:sleep=banana]"}}, wsproto.ProblemInvalidDirective},
	}
	hasCode := func(e wsproto.Error, code string) bool {
		for _, d := range e.Details {
			// A directive problem names the directive and its task.
			if d.Code == code && (code != wsproto.ProblemInvalidDirective || strings.Contains(d.Message, "[sim:") && d.TaskID != "") {
				return true
			}
		}
		return false
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// user.solve_tasks: refused, nothing starts.
			c, _ := connect(t, base)
			c.send("user.solve_tasks", map[string]any{"tasks": tt.tasks})
			if e := c.expectError("invalid_tasks"); !hasCode(e, tt.code) || e.RefType != "user.solve_tasks" {
				t.Errorf("solve_tasks error %+v, want code %s and ref_type user.solve_tasks", e, tt.code)
			}
			// An edit at confirmation: refused, the confirmation stays open.
			_, m := runToConfirm(t, c, "Plan something")
			c.respond(m.StepID, map[string]any{"confirmed": true, "tasks": tt.tasks})
			if e := c.expectError("invalid_tasks"); !hasCode(e, tt.code) || e.RefType != "user.response" {
				t.Errorf("edit error %+v, want code %s", e, tt.code)
			}
			c.respond(m.StepID, map[string]any{"confirmed": true, "tasks": []wsproto.Task{tk("ok", "Fine")}})
			c.expect(wsproto.EventSolverStart)
			c.until(wsproto.EventFinalAnswer)
		})
	}
}

// A request with a malformed directive is refused before planning starts.
func TestInvalidRequestDirective(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	c.message("Plan [sim:plan_fail=nope*1]")
	e := c.expectError("invalid_message")
	if e.RefType != "user.message" || !strings.Contains(e.Message, "[sim:plan_fail=nope*1]") {
		t.Errorf("error %+v, want ref_type user.message and the directive named", e)
	}
	c.message("Plan [sim:plan_fail=network*1]") // well formed: the run starts
	c.expect(wsproto.EventPlanStart)
}

func TestBusyAndNoActiveRun(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	// Every error answering a frame names the frame's event in ref_type.
	expect := func(code, refType string) {
		t.Helper()
		if e := c.expectError(code); e.RefType != refType {
			t.Errorf("%s: ref_type %q, want %q", code, e.RefType, refType)
		}
	}
	c.send("user.cancel", nil)
	expect("no_active_run", "user.cancel")
	c.send("user.cancel_task", map[string]any{"task_id": "a"})
	expect("no_active_run", "user.cancel_task")

	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{sleepTask("a", "1h")}})
	c.expect(wsproto.EventSolverStart)
	c.message("another")
	expect("busy", "user.message")
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "b", Title: "B"}}})
	expect("busy", "user.solve_tasks")
	c.send("user.cancel_task", map[string]any{"task_id": "nope"})
	expect("unknown_task", "user.cancel_task")
	c.send("user.cancel", nil)
	for _, f := range c.until(wsproto.EventPipelineCancelled) {
		if f.Event == wsproto.EventSolverCancelled && meta[wsproto.SolverCancelled](t, f).Reason != "pipeline_cancelled" {
			t.Errorf("solver.cancelled %s", f.Metadata)
		}
	}
	c.message("now it is free")
	c.expect(wsproto.EventPlanStart)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		setup func(c *conn)
		// want is the events between user.cancel and pipeline.cancelled.
		want []string
	}{
		{
			name:  "while planning",
			args:  []string{"--sim-delay", "10s"},
			setup: func(c *conn) { c.message("slow"); c.expect(wsproto.EventPlanStart) },
		},
		{
			name:  "while awaiting confirmation",
			setup: func(c *conn) { c.message("x"); c.until(wsproto.EventUserConfirm) },
		},
		{
			name: "while solving",
			setup: func(c *conn) {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
					sleepTask("a", "1h"), sleepTask("b", "1h"), sleepTask("c", "1ms", "a")}})
				c.expect(wsproto.EventSolverStart)
				c.expect(wsproto.EventSolverStart)
			},
			want: []string{wsproto.EventSolverCancelled, wsproto.EventSolverCancelled},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, _ := connect(t, base)
			tt.setup(c)
			c.send("user.cancel", nil)
			frames := c.until(wsproto.EventPipelineCancelled)
			var got []string
			for _, f := range frames[:len(frames)-1] {
				if f.Event != wsproto.EventSolverProgress && f.Event != wsproto.EventPlanStepCompleted {
					got = append(got, f.Event)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("before pipeline.cancelled: %v, want %v", got, tt.want)
			}
			if m := meta[wsproto.PipelineCancelled](t, frames[len(frames)-1]); m.Reason != "user_cancel" {
				t.Errorf("pipeline.cancelled %+v", m)
			}
			c.send("user.cancel", nil)
			c.expectError("no_active_run")
		})
	}
}

// TestMaxParallelFlag: --max-parallel bounds the tasks of a run executing
// at once, as the client sees it: solver.start events not yet followed by
// their task's solver.completed. The scheduler emits both, in its own
// order, so the count does not depend on timing: a server that ignored the
// flag would start all six independent tasks before any completion.
func TestMaxParallelFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"one", []string{"--max-parallel", "1"}, 1},
		{"three", []string{"--max-parallel", "3"}, 3},
		{"the default, four", nil, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, startServer(t, tt.args...))
			var tasks []wsproto.Task
			for i := range 6 {
				tasks = append(tasks, sleepTask(fmt.Sprint("t", i), "5ms"))
			}
			running, peak, completed := 0, 0, 0
			for _, f := range solveAll(t, c, tasks) {
				switch f.Event {
				case wsproto.EventSolverStart:
					running++
					peak = max(peak, running)
				case wsproto.EventSolverCompleted:
					running--
					completed++
				}
			}
			if peak != tt.want || completed != 6 {
				t.Errorf("%d tasks executing at once, %d completed; want %d at once and 6 completed", peak, completed, tt.want)
			}
		})
	}
}
