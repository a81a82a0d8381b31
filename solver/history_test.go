package solver

import (
	"slices"
	"strings"
	"testing"

	"github.com/baton-run/baton/wsproto"
)

// TestLoopSeesEarlierRuns: the session's earlier runs reach every turn of
// the loop as the user and assistant turns they were, between the system
// prompt and the task, oldest first; a run without an answer says how it
// ended; tool results are elided to fit before they are.
func TestLoopSeesEarlierRuns(t *testing.T) {
	for _, tt := range []struct {
		name    string
		history []wsproto.HistoryEntry
		want    []string // role: content of the messages between the system prompt and the task
	}{
		{name: "a first run: none"},
		{name: "two runs, one cancelled", history: []wsproto.HistoryEntry{
			{RunID: "r1", Request: "Plan a weekend in Lisbon", Answer: "Go to Belém.", Status: wsproto.StatusSucceeded},
			{RunID: "r2", Request: "Now make it cheaper", Status: wsproto.StatusCancelled},
		}, want: []string{"user: Plan a weekend in Lisbon", "assistant: Go to Belém.",
			"user: Now make it cheaper", "assistant: (this run ended without an answer: cancelled)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			model := &scripted{next: byRound(calls(1, `a {}`))}
			r := New([]wsproto.Task{task("t")}, model, &recorder{}, Options{Request: "And add a day trip", History: tt.history,
				Loop: Loop{Tools: toolSet(t, echo("a")), MaxContextBytes: 64}}) // a budget that elides every tool result
			if rep := r.Execute(t.Context()); rep.Tasks[0].Status != wsproto.TaskCompleted {
				t.Fatalf("task %s", rep.Tasks[0].Status)
			}
			if len(model.turns) != 2 {
				t.Fatalf("%d turns, want 2", len(model.turns))
			}
			for _, turn := range model.turns {
				m := turn.Messages
				n := len(tt.want)
				if len(m) < n+2 {
					t.Errorf("round %d: %d messages, want at least %d: %+v", turn.Round, len(m), n+2, m)
					continue
				}
				var got []string
				for _, msg := range m[1 : 1+n] {
					got = append(got, msg.Role+": "+msg.Content)
				}
				if m[0].Role != RoleSystem || !slices.Equal(got, tt.want) || m[1+n].Role != RoleUser ||
					!strings.Contains(m[1+n].Content, "Request:\nAnd add a day trip") {
					t.Errorf("round %d: conversation %+v; want the system prompt, %q, then the task", turn.Round, m, tt.want)
				}
			}
			last := model.turns[1].Messages
			if tool := last[len(last)-1]; tool.Role != RoleTool || !strings.HasPrefix(tool.Content, elidedPrefix) {
				t.Errorf("round 2's tool result %+v: the budget should have elided it, and it only", tool)
			}
		})
	}
}
