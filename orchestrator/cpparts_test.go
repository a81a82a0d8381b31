package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// partsRing is a Durable ring taking parts that records, per checkpoint,
// the names of the parts it set or removed ("-name").
type partsRing struct {
	nopDurable
	changes [][]string
	resets  []bool
}

func (r *partsRing) CheckpointParts(parts map[string][]byte, reset bool) {
	var names []string
	for name, b := range parts {
		if b == nil {
			name = "-" + name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	r.changes = append(r.changes, names)
	r.resets = append(r.resets, reset)
}

// TestCheckpointPartsScope: in a run of 50 tasks, task t7 in its third
// round, a transition writes the head and the parts of what it changed —
// one task's and the last round of its journal for an event of one task,
// none for an event of no task, all of them when the list of tasks
// changes; the run's state and record only when the event may change
// them — and the ring's first checkpoint writes every part, with reset. (Every test with a durable ring also checks, at each transition,
// that the parts assemble to the whole checkpoint: TestMain.)
func TestCheckpointPartsScope(t *testing.T) {
	const runID = "run_1"
	const n = 50
	all := []string{"head", "run", "exec", "j/t7/0", "j/t7/1", "j/t7/2"}
	for i := range n {
		all = append(all, taskPart(i))
	}
	sort.Strings(all)
	tests := []struct {
		name  string
		event string
		meta  any
		want  []string
	}{
		{"a todo item of task t3", wsproto.EventTodoItemProgress, &wsproto.TodoItemProgress{RunID: runID, TaskID: "t3", Version: 2,
			Item: wsproto.TodoItem{ID: "1", Content: "Gather", Status: wsproto.TodoStatusInProgress}}, []string{"head", "t/2"}},
		{"task t50 completed", wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: runID, TaskID: "t50", Attempt: 1, Result: "done"},
			[]string{"head", "exec", "t/49"}},
		{"a tool call of task t7", wsproto.EventToolCall, &wsproto.ToolCall{RunID: runID, TaskID: "t7", StepID: "tool_1", Tool: "search", Round: 3},
			[]string{"head", "exec", "t/6", "j/t7/2"}},
		{"task t7 completed: its journal goes", wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: runID, TaskID: "t7", Attempt: 1, Result: "done"},
			[]string{"head", "exec", "t/6", "-j/t7/0", "-j/t7/1", "-j/t7/2"}},
		{"a tool result of t7, no confirmation pending", wsproto.EventToolResult, &wsproto.ToolResult{RunID: runID, TaskID: "t7", StepID: "tool_0", Tool: "search", Round: 3},
			[]string{"head", "exec", "t/6", "j/t7/2"}},
		{"a decision, no task", wsproto.EventPlanDecision, &wsproto.PlanDecision{RunID: runID, Action: wsproto.ActionContinue},
			[]string{"head", "run", "exec"}},
		{"the plan updated: every task", wsproto.EventPlanUpdated, &wsproto.PlanUpdated{RunID: runID, Version: 2, Tasks: tasksOf(n - 1), Removed: []string{"t50"}},
			append(slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == "t/49" }), "-t/49")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ring *partsRing
			srv, err := New(simModels(), &Options{Logger: quiet(), NewRing: func(c int) buffer.Ring {
				ring = &partsRing{nopDurable: nopDurable{Memory: buffer.NewMemory(c)}}
				return ring
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			sess.mu.Lock()
			sess.state.BeginSolving(runID, "Plan a garden", tasksOf(n))
			sess.run = &run{id: runID, sess: sess, cp: &runCheckpoint{ID: runID, Stage: stageSolving, Journal: map[string][]journalRound{
				"t7": {{Round: 1, Text: "a"}, {Round: 2, Text: "b"}, {Round: 3, Calls: []journalCall{{ID: "c0", Name: "search", StepID: "tool_0"}, {ID: "c1", Name: "search"}}}},
			}}}
			sess.changedLocked()
			sess.mu.Unlock()
			sess.emit(tt.event, "", "", tt.meta)

			if len(ring.changes) != 2 {
				t.Fatalf("%d checkpoints, want 2", len(ring.changes))
			}
			if got := ring.changes[0]; !ring.resets[0] || !slices.Equal(got, all) {
				t.Errorf("first checkpoint: reset %v, parts %v; want a reset of every part", ring.resets[0], got)
			}
			if got := ring.changes[1]; ring.resets[1] || !slices.Equal(got, sortedCopy(tt.want)) {
				t.Errorf("parts written %v (reset %v), want %v", got, ring.resets[1], sortedCopy(tt.want))
			}
		})
	}
}

func tasksOf(n int) []wsproto.Task {
	tasks := make([]wsproto.Task, n)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: strings.Repeat("x", 10), DependsOn: []string{}}
	}
	return tasks
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestAssembleCheckpointErrors: parts that do not make a checkpoint are
// an error, not a state.
func TestAssembleCheckpointErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		parts map[string][]byte
	}{
		{"no head", map[string][]byte{"t/0": []byte(`{}`)}},
		{"a head that does not decode", map[string][]byte{"head": []byte(`{`)}},
		{"a task that does not decode", map[string][]byte{"head": []byte(`{"version":1,"run":{"run_id":"r"}}`), "t/0": []byte(`[`)}},
		{"a journal that does not decode", map[string][]byte{"head": []byte(`{"version":1,"exec":{"id":"r"}}`), "j/t1": []byte(`[`)}},
		{"a round that does not decode", map[string][]byte{"head": []byte(`{"version":1}`), "exec": []byte(`{"id":"r"}`), "j/t1/0": []byte(`{`)}},
		{"a round not numbered", map[string][]byte{"head": []byte(`{"version":1}`), "exec": []byte(`{"id":"r"}`), "j/t1/x": []byte(`{}`)}},
		{"a round missing", map[string][]byte{"head": []byte(`{"version":1}`), "exec": []byte(`{"id":"r"}`), "j/t1/0": []byte(`{}`), "j/t1/2": []byte(`{}`)}},
		{"a run that does not decode", map[string][]byte{"head": []byte(`{"version":1}`), "run": []byte(`{`)}},
		{"a record that does not decode", map[string][]byte{"head": []byte(`{"version":1}`), "exec": []byte(`[`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := assembleCheckpoint(tt.parts); err == nil {
				t.Errorf("assembled %s, want an error", b)
			}
		})
	}
}

// TestAssembleJournal: a task's journal is its rounds in order of their
// number, whatever the order of the parts; a whole journal (j/ID, what
// the Baton before rounds wrote) is read as it was.
func TestAssembleJournal(t *testing.T) {
	parts := map[string][]byte{"head": []byte(`{"version":1}`), "exec": []byte(`{"id":"r"}`),
		"j/t1":    []byte(`[{"round":1,"text":"a"},{"round":2,"text":"b"}]`),
		"j/t/2/1": []byte(`{"round":2,"text":"d"}`), "j/t/2/0": []byte(`{"round":1,"text":"c"}`), "j/t/2/2": []byte(`{"round":3,"text":"e"}`)}
	b, err := assembleCheckpoint(parts)
	if err != nil {
		t.Fatal(err)
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		t.Fatal(err)
	}
	texts := func(js []journalRound) (out []string) {
		for _, r := range js {
			out = append(out, fmt.Sprint(r.Round, r.Text))
		}
		return out
	}
	if got, want := texts(cp.Exec.Journal["t1"]), []string{"1a", "2b"}; !slices.Equal(got, want) {
		t.Errorf("t1's journal %v, want %v", got, want)
	}
	if got, want := texts(cp.Exec.Journal["t/2"]), []string{"1c", "2d", "3e"}; !slices.Equal(got, want) {
		t.Errorf("t/2's journal %v, want %v", got, want)
	}
}
