package solver

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/baton-run/baton/wsproto"
)

// seen is a model that completes every execution at once (as fakeModel)
// and records what each first round was given.
type seen struct {
	fakeModel

	mu    sync.Mutex // guards turns
	turns []*Turn
}

func (m *seen) Turn(ctx context.Context, in *Turn, progress func(float64, string)) (Reply, error) {
	if in.Round == 1 {
		m.mu.Lock()
		m.turns = append(m.turns, in)
		m.mu.Unlock()
	}
	return m.fakeModel.Turn(ctx, in, progress)
}

// first returns the first round of task id's executions, in order.
func (m *seen) first(id string) []*Turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Turn
	for _, t := range m.turns {
		if t.Task.ID == id {
			out = append(out, t)
		}
	}
	return out
}

func stood(t wsproto.Task, status string, attempt int) ResumeTask {
	return ResumeTask{TaskState: wsproto.TaskState{Task: t, Status: status, Attempt: attempt}}
}

func withResult(rt ResumeTask, result string) ResumeTask { rt.Result = result; return rt }

// TestResume: a run restored from the task states of another goes on from
// there — completed tasks are not run again and their results feed their
// dependents, running ones start again as a new execution, terminal ones
// keep their outcome, and the decide step, the decisions and the answers
// that were open are taken up again.
func TestResume(t *testing.T) {
	usage := wsproto.Usage{PromptTokens: 2, CompletionTokens: 1, TotalTokens: 3}
	tests := []struct {
		name   string
		from   Resume
		opts   Options
		rec    *recorder
		status map[string]string
		check  func(t *testing.T, lines []string, m *seen, rep Report)
	}{
		{
			name: "completed tasks feed their dependents and are not run again",
			from: Resume{Tasks: []ResumeTask{
				withResult(stood(task("a"), wsproto.TaskCompleted, 1), "kept a"),
				stood(task("b"), wsproto.TaskRunning, 1),
				stood(task("c", "a", "b"), wsproto.TaskPending, 0),
			}, Usage: usage},
			status: map[string]string{"a": "completed", "b": "completed", "c": "completed"},
			check: func(t *testing.T, lines []string, m *seen, rep Report) {
				if len(m.first("a")) != 0 {
					t.Errorf("a ran again: %q", lines)
				}
				if index(lines, "start b 2") < 0 || index(lines, "start b 1") >= 0 {
					t.Errorf("b did not start again as execution 2: %q", lines)
				}
				c := m.first("c")
				if len(c) != 1 || c[0].Dependencies["a"] != "kept a" || c[0].Dependencies["b"] != "result of b" {
					t.Fatalf("c's executions %v", c)
				}
				if rep.Results["a"] != "kept a" {
					t.Errorf("report results %v", rep.Results)
				}
				if want := usage.Add(usage).Add(usage); rep.Usage != want {
					t.Errorf("usage %+v, want %+v (the restored usage and two executions)", rep.Usage, want)
				}
			},
		},
		{
			name:   "a retrying task starts again with the next execution number",
			from:   Resume{Tasks: []ResumeTask{stood(task("a"), wsproto.TaskRetrying, 2)}},
			status: map[string]string{"a": "completed"},
			check: func(t *testing.T, lines []string, _ *seen, _ Report) {
				if want := []string{"start a 3", "done a 3"}; !slices.Equal(lines, want) {
					t.Errorf("events %q, want %q", lines, want)
				}
			},
		},
		{
			name: "terminal tasks keep their outcome, and a failed one still skips its dependents",
			from: Resume{Tasks: []ResumeTask{
				{TaskState: wsproto.TaskState{Task: task("x"), Status: wsproto.TaskFailed, Attempt: 4, Error: "boom (internal)"}},
				stood(task("y", "x"), wsproto.TaskPending, 0),
				stood(task("z"), wsproto.TaskSkipped, 0),
				stood(task("w"), wsproto.TaskCancelled, 1),
			}},
			status: map[string]string{"x": "failed", "y": "skipped", "z": "skipped", "w": "cancelled"},
			check: func(t *testing.T, lines []string, m *seen, rep Report) {
				if want := []string{"skipped y x"}; !slices.Equal(lines, want) {
					t.Errorf("events %q, want %q", lines, want)
				}
				if rep.Errors["x"] != "boom (internal)" {
					t.Errorf("errors %v", rep.Errors)
				}
			},
		},
		{
			name: "a task waiting for its decision is asked again",
			from: Resume{Tasks: []ResumeTask{
				{TaskState: wsproto.TaskState{Task: task("a"), Status: wsproto.TaskFailed, Attempt: 1, Error: "no"}, Deciding: true},
				stood(task("b", "a"), wsproto.TaskPending, 0),
			}},
			rec:    &recorder{decisions: make(chan Decision, 1), asked: make(chan string, 1)},
			status: map[string]string{"a": "completed", "b": "completed"},
			check: func(t *testing.T, lines []string, _ *seen, _ Report) {
				if want := []string{"start a 2", "done a 2", "start b 1", "done b 1"}; !slices.Equal(lines, want) {
					t.Errorf("events %q, want %q", lines, want)
				}
			},
		},
		{
			name: "the todo list and the answers carry on",
			from: Resume{Tasks: []ResumeTask{{TaskState: wsproto.TaskState{Task: task("a"), Status: wsproto.TaskRunning, Attempt: 1,
				Todo: &wsproto.TodoList{Version: 3, Items: []wsproto.TodoItem{{ID: "1", Content: "first", Status: wsproto.TodoStatusCompleted}}}}}},
				Answers: []Answer{{Question: "Which city?", Text: "Lisbon"}}},
			status: map[string]string{"a": "completed"},
			check: func(t *testing.T, _ []string, m *seen, _ Report) {
				a := m.first("a")
				if len(a) != 1 || len(a[0].Todo) != 1 || a[0].Todo[0].Content != "first" ||
					!slices.Equal(a[0].Answers, []Answer{{"Which city?", "Lisbon"}}) {
					t.Fatalf("a's execution %+v", a)
				}
			},
		},
		{
			name: "a decide step not made is made, numbered after those made",
			from: Resume{Tasks: []ResumeTask{
				withResult(stood(task("a"), wsproto.TaskCompleted, 1), "ra"),
				stood(task("b", "a"), wsproto.TaskPending, 0),
			}, Decisions: 1, AdaptQueue: []string{"a"}, Version: 2},
			opts:   Options{Adaptive: true},
			status: map[string]string{"a": "completed", "b": "completed"},
			check: func(t *testing.T, lines []string, _ *seen, _ Report) {
				if want := []string{"adapt 2 after a", "start b 1", "done b 1", "adapt 3 after b"}; !slices.Equal(lines, want) {
					t.Errorf("events %q, want %q", lines, want)
				}
			},
		},
		{
			name: "after synthesize, pending tasks are skipped and running ones finish",
			from: Resume{Tasks: []ResumeTask{
				stood(task("a"), wsproto.TaskRunning, 1),
				stood(task("b"), wsproto.TaskPending, 0),
			}, Synthesized: true, AdaptQueue: []string{"a"}},
			opts:   Options{Adaptive: true},
			status: map[string]string{"a": "completed", "b": "skipped"},
			check: func(t *testing.T, lines []string, _ *seen, _ Report) {
				if want := []string{"skipped b synthesized", "start a 2", "done a 2"}; !slices.Equal(lines, want) {
					t.Errorf("events %q, want %q", lines, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.rec
			if rec == nil {
				rec = &recorder{}
			}
			if rec.decisions != nil {
				rec.decisions <- Retry
			}
			m := &seen{}
			rep := NewResumed(tt.from, m, rec, tt.opts).Execute(t.Context())
			if len(rep.Tasks) != len(tt.status) {
				t.Errorf("report has %d tasks, want %d", len(rep.Tasks), len(tt.status))
			}
			for _, ts := range rep.Tasks {
				if want := tt.status[ts.Task.ID]; ts.Status != want {
					t.Errorf("task %s: status %s, want %s", ts.Task.ID, ts.Status, want)
				}
			}
			tt.check(t, rec.events(), m, rep)
		})
	}
}

// TestResumeKeepsRetiredIDs: an id an adjustment removed before the
// takeover stays taken afterwards, and the plan's version goes on.
func TestResumeKeepsRetiredIDs(t *testing.T) {
	var run *Run
	var probs []wsproto.TaskProblem
	rec := &recorder{adapt: func(ctx context.Context, in AdaptInput) Adaptation {
		var err error
		if _, probs, err = run.Propose(ctx, Change{Add: []wsproto.Task{task("gone", "a")}}); err != nil {
			t.Errorf("propose: %v", err)
		}
		return Adaptation{Change: &Change{Add: []wsproto.Task{task("new", "a")}}}
	}}
	run = NewResumed(Resume{Tasks: []ResumeTask{withResult(stood(task("a"), wsproto.TaskCompleted, 1), "ra")},
		Retired: []string{"gone"}, Version: 2, AdaptQueue: []string{"a"}}, &seen{}, rec, Options{Adaptive: true})
	run.Execute(t.Context())
	if len(probs) == 0 {
		t.Errorf("adding a task with a retired id was accepted")
	}
	lines := rec.events()
	if index(lines, "plan v3 +1 -[] [a new]") < 0 || index(lines, "done new 1") < 0 {
		t.Errorf("events %q: want plan version 3 adding new, then new run", lines)
	}
}
