package solver

import (
	"context"
	"slices"
	"testing"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/wsproto"
)

// before reports whether line a comes before line b, both present.
func before(lines []string, a, b string) bool {
	i, j := index(lines, a), index(lines, b)
	return i >= 0 && j >= 0 && i < j
}

// While a decision is being made no task starts, running ones go on, and
// decisions are made one at a time, in the order the tasks completed.
func TestAdaptHoldsNewTasks(t *testing.T) {
	release := make(chan struct{})
	gate := make(chan struct{})
	rec := &recorder{}
	rec.adapt = func(ctx context.Context, in AdaptInput) Adaptation {
		if in.Number == 1 {
			close(gate) // b may finish while the decision is open
			<-release   // held until the test has seen b finish
			if in.AfterTask != "a" || len(in.Tasks) != 3 || in.Tasks[0].Status != wsproto.TaskCompleted || in.Tasks[0].Result != "result of a" {
				t.Errorf("decision input %+v", in)
			}
		}
		return Adaptation{Usage: wsproto.Usage{TotalTokens: 10}}
	}
	tasks := []wsproto.Task{task("a"), task("b"), task("c", "a")}
	run := New(tasks, gated{gates: map[string]chan struct{}{"b": gate}}, rec, Options{Adaptive: true})
	done := make(chan Report, 1)
	go func() { done <- run.Execute(t.Context()) }()
	waitLine(t, rec, "done b 1")
	if index(rec.events(), "start c 1") >= 0 {
		t.Fatalf("c started during the decision: %q", rec.events())
	}
	close(release)
	rep := <-done
	lines := rec.events()
	if !before(lines, "adapt 1 after a", "done b 1") || !before(lines, "adapt 2 after b", "start c 1") || index(lines, "adapt 3 after c") < 0 {
		t.Errorf("events %q", lines)
	}
	if rep.Count(wsproto.TaskCompleted) != 3 || rep.Usage.TotalTokens != 3*3+3*10 {
		t.Errorf("report %+v", rep)
	}
}

func TestAdaptations(t *testing.T) {
	tests := []struct {
		name  string
		tasks []wsproto.Task
		gates []string // tasks held until the first decision returns
		// adapt is the first decision (later ones continue); it may check
		// changes with run.
		adapt  func(t *testing.T, run *Run, in AdaptInput) Adaptation
		status map[string]string // the report's, which leaves removed tasks out
		lines  []string          // in this order
		absent []string
	}{
		{
			name:  "add a task and remove a pending one",
			tasks: []wsproto.Task{task("a"), task("b", "a"), task("c", "a")},
			adapt: func(t *testing.T, run *Run, in AdaptInput) Adaptation {
				for _, bad := range []Change{{Remove: []string{"a"}}, {Add: []wsproto.Task{task("b")}}, {Remove: []string{"nope"}}} {
					if _, probs, err := run.Propose(t.Context(), bad); err != nil || probs == nil {
						t.Errorf("Propose(%+v) = %v, %v; want problems", bad, probs, err)
					}
				}
				c := Change{Add: []wsproto.Task{task("d", "a", "b")}, Remove: []string{"c"}, Reason: "why"}
				if after, probs, err := run.Propose(t.Context(), c); err != nil || probs != nil || len(after) != 3 || after[2].ID != "d" {
					t.Errorf("Propose = %v, %v, %v", after, probs, err)
				}
				return Adaptation{Change: &c}
			},
			status: map[string]string{"a": "completed", "b": "completed", "d": "completed"},
			lines:  []string{"adapt 1 after a", "plan v2 +1 -[c] [a b d]", "start b 1", "done b 1", "start d 1"},
			absent: []string{"start c 1"},
		},
		{
			name:  "an edited list",
			tasks: []wsproto.Task{task("a"), task("b", "a")},
			adapt: func(t *testing.T, run *Run, in AdaptInput) Adaptation {
				if _, _, probs, _ := run.ProposeList(t.Context(), []wsproto.Task{{ID: "a", Title: "changed"}}); len(probs) == 0 {
					t.Errorf("an edit changing a task was accepted")
				}
				c, after, probs, err := run.ProposeList(t.Context(), []wsproto.Task{task("a"), task("e", "a")})
				if err != nil || probs != nil || len(after) != 2 || !slices.Equal(c.Remove, []string{"b"}) || len(c.Add) != 1 {
					t.Errorf("ProposeList = %+v, %v, %v, %v", c, after, probs, err)
				}
				return Adaptation{Change: &c}
			},
			status: map[string]string{"a": "completed", "e": "completed"},
			lines:  []string{"plan v2 +1 -[b] [a e]", "start e 1"},
			absent: []string{"start b 1"},
		},
		{
			name:  "an added task whose dependency failed is skipped",
			tasks: []wsproto.Task{failing("f", failure.Permanent, 1), task("a", "f2"), task("f2")},
			adapt: func(t *testing.T, run *Run, in AdaptInput) Adaptation {
				if in.AfterTask != "f2" {
					return Adaptation{}
				}
				return Adaptation{Change: &Change{Add: []wsproto.Task{task("e", "f")}}}
			},
			status: map[string]string{"f": "failed", "a": "completed", "f2": "completed", "e": "skipped"},
			lines:  []string{"plan v2 +1 -[] [f a f2 e]", "skipped e f"},
		},
		{
			name:  "synthesize",
			tasks: []wsproto.Task{task("a"), task("b"), task("c", "a"), task("d", "c")},
			gates: []string{"b"},
			adapt: func(t *testing.T, run *Run, in AdaptInput) Adaptation {
				return Adaptation{Synthesize: true}
			},
			status: map[string]string{"a": "completed", "b": "completed", "c": "skipped", "d": "skipped"},
			lines:  []string{"adapt 1 after a", "skipped c synthesized", "skipped d synthesized"},
			absent: []string{"adapt 2 after b", "start c 1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			gate := make(chan struct{})
			model := gated{gates: map[string]chan struct{}{}}
			for _, id := range tt.gates {
				model.gates[id] = gate
			}
			run := New(tt.tasks, model, rec, Options{Adaptive: true, Retry: failure.Policy{MaxRetries: 0}})
			first := true
			rec.adapt = func(ctx context.Context, in AdaptInput) Adaptation {
				if !first {
					return Adaptation{}
				}
				first = false // decisions are made one at a time
				defer close(gate)
				return tt.adapt(t, run, in)
			}
			rep := run.Execute(t.Context())
			if len(rep.Tasks) != len(tt.status) {
				t.Errorf("report %+v, want %d tasks", rep.Tasks, len(tt.status))
			}
			for _, ts := range rep.Tasks {
				if want := tt.status[ts.Task.ID]; ts.Status != want {
					t.Errorf("task %s: status %s, want %s", ts.Task.ID, ts.Status, want)
				}
			}
			lines := rec.events()
			at := -1
			for _, want := range tt.lines {
				k := slices.Index(lines[at+1:], want)
				if k < 0 {
					t.Fatalf("no %q after line %d in %q", want, at, lines)
				}
				at += 1 + k
			}
			for _, no := range tt.absent {
				if index(lines, no) >= 0 {
					t.Errorf("%q in %q", no, lines)
				}
			}
		})
	}
}
