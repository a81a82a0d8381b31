package solver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/wsproto"
)

// gated completes tasks at once, except that a task named in gates waits
// until its channel is closed, and a task failing as fakeModel's do.
type gated struct {
	gates map[string]chan struct{}
}

func (m gated) Turn(ctx context.Context, in *Turn, progress func(float64, string)) (Reply, error) {
	if g, ok := m.gates[in.Task.ID]; ok {
		select {
		case <-g:
		case <-ctx.Done():
			return Reply{}, ctx.Err()
		}
	}
	return fakeModel{}.Turn(ctx, in, progress)
}

// waitLine waits until the recorder has logged line, or fails the test
// after 10 s.
func waitLine(t *testing.T, rec *recorder, line string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		rec.mu.Lock()
		logged := index(rec.lines, line) >= 0
		if rec.changed == nil {
			rec.changed = make(chan struct{})
		}
		changed := rec.changed
		rec.mu.Unlock()
		if logged {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("no %q in %q", line, rec.events())
		}
	}
}

func TestRestartTask(t *testing.T) {
	fast := failure.Policy{MaxRetries: 0, Base: time.Microsecond}
	tests := []struct {
		name  string
		tasks []wsproto.Task
		rec   func() *recorder
		// before is what happens first; the restart of task follows.
		before string
		task   string
		// errors: restarts refused while the run is in that state.
		errors map[string]error
		status map[string]string
		// lines must appear in this order.
		lines []string
	}{
		{
			name:   "a failed task and its skipped dependents",
			tasks:  []wsproto.Task{failing("a", failure.Permanent, 1), task("b", "a"), task("c", "b"), task("d", "a", "x"), task("x"), task("gate")},
			rec:    func() *recorder { return &recorder{} },
			before: "skipped c b",
			task:   "a",
			errors: map[string]error{"gate": ErrTaskBusy, "nope": ErrUnknownTask, "b": ErrTaskBusy},
			status: map[string]string{"a": "completed", "b": "completed", "c": "completed", "d": "completed", "x": "completed", "gate": "completed"},
			lines: []string{"gaveup a 1", "restarted a", "restarted b", "restarted d", "restarted c",
				"start a 2", "done a 2", "start b 1", "done b 1", "start c 1"},
		},
		{
			name:   "a completed task whose dependent is running",
			tasks:  []wsproto.Task{task("a"), task("b", "a"), task("gate"), task("pending", "gate")},
			rec:    func() *recorder { return &recorder{} },
			before: "start b 1",
			task:   "a",
			errors: map[string]error{"pending": ErrTaskBusy},
			status: map[string]string{"a": "completed", "b": "completed", "gate": "completed", "pending": "completed"},
			lines:  []string{"done a 1", "restarted a", "start a 2", "done a 2"},
		},
		{
			name:  "a task waiting for its decision",
			tasks: []wsproto.Task{failing("a", failure.Permanent, 1), task("b", "a"), task("gate")},
			rec: func() *recorder {
				return &recorder{decisions: make(chan Decision), asked: make(chan string, 1)}
			},
			before: "gaveup a 1",
			task:   "a",
			status: map[string]string{"a": "completed", "b": "completed", "gate": "completed"},
			lines:  []string{"gaveup a 1", "restarted a", "start a 2", "done a 2", "start b 1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.rec()
			gate := make(chan struct{})
			model := gated{gates: map[string]chan struct{}{"gate": gate}}
			if tt.before == "start b 1" {
				model.gates["b"] = gate
			}
			run := New(tt.tasks, model, rec, Options{Retry: fast})
			done := make(chan Report, 1)
			go func() { done <- run.Execute(t.Context()) }()
			waitLine(t, rec, tt.before)
			if rec.asked != nil {
				// GaveUp is reported from the task's goroutine, before the
				// scheduler has made the task deciding; Decide comes after.
				select {
				case <-rec.asked:
				case <-time.After(10 * time.Second):
					t.Fatal("no decision asked for")
				}
			}
			for id, want := range tt.errors {
				if err := run.RestartTask(t.Context(), id); !errors.Is(err, want) {
					t.Errorf("restart %s: %v, want %v", id, err, want)
				}
			}
			if err := run.RestartTask(t.Context(), tt.task); err != nil {
				t.Fatalf("restart %s: %v", tt.task, err)
			}
			waitLine(t, rec, tt.lines[len(tt.lines)-1])
			close(gate)
			rep := <-done
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
			if err := run.RestartTask(t.Context(), tt.task); !errors.Is(err, ErrNotSolving) {
				t.Errorf("restart after the run: %v, want ErrNotSolving", err)
			}
		})
	}
}
