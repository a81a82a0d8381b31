package orchestrator

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// TestJournalFold: the journal follows the events of a task's execution —
// a reply noted, then each call's tool.call and tool.result — survives the
// checkpoint's encoding, is handed to the solver with the call that began
// and did not return marked for a retry (the "cancelled" result Restore
// then emits for it is not taken as its result, the retry's events take
// its place), and goes when the execution ends.
func TestJournalFold(t *testing.T) {
	reply := func(n int, calls ...string) solver.Round {
		r := solver.Round{Number: n, Reply: solver.Reply{Text: fmt.Sprintf("reply %d", n)}}
		for k, c := range calls {
			r.Reply.ToolCalls = append(r.Reply.ToolCalls, solver.ToolCall{ID: fmt.Sprintf("c%d%d", n, k), Name: c, Arguments: "{}"})
		}
		return r
	}
	call := func(round int, step string) *wsproto.ToolCall {
		return &wsproto.ToolCall{TaskID: "a", Round: round, StepID: step, Tool: "t"}
	}
	result := func(round int, step, text string) *wsproto.ToolResult {
		return &wsproto.ToolResult{TaskID: "a", Round: round, StepID: step, Tool: "t", OK: true, Result: text}
	}
	tests := []struct {
		name  string
		steps []any // a solver.Round is a reply noted, anything else an event
		// want is resumeJournal's rounds, as "round: result|retry|-" per
		// call ("-": not begun).
		want []string
	}{
		{name: "reply in, nothing begun", steps: []any{reply(1, "t", "t")}, want: []string{"1: - -"}},
		{name: "first call begun", steps: []any{reply(1, "t", "t"), call(1, "s1")}, want: []string{"1: retry -"}},
		{name: "first call returned", steps: []any{reply(1, "t", "t"), call(1, "s1"), result(1, "s1", "r1")},
			want: []string{"1: r1 -"}},
		{name: "two rounds", steps: []any{reply(1, "t"), call(1, "s1"), result(1, "s1", "r1"), reply(2, "t"), call(2, "s2"), result(2, "s2", "r2")},
			want: []string{"1: r1", "2: r2"}},
		{name: "a failed execution's journal goes", steps: []any{reply(1, "t"), call(1, "s1"), result(1, "s1", "r1"),
			&wsproto.ExecutionError{TaskID: "a", Attempt: 1}}},
		{name: "a completed task's journal goes", steps: []any{reply(1, "t"), &wsproto.SolverCompleted{TaskID: "a"}}},
		{name: "a cancelled task's journal goes", steps: []any{reply(1, "t"), &wsproto.SolverCancelled{TaskID: "a"}}},
		{name: "a restart's start keeps it", steps: []any{reply(1, "t"), call(1, "s1"), &wsproto.SolverStart{TaskID: "a", Attempt: 2}},
			want: []string{"1: retry"}},
		{name: "a new execution from round 1 replaces it", steps: []any{reply(1, "t"), reply(2, "t"), reply(1)},
			want: []string{"1:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &runCheckpoint{}
			for _, s := range tt.steps {
				if r, ok := s.(solver.Round); ok {
					x.journalReply("a", r)
				} else {
					x.apply(s)
				}
			}
			// Through the checkpoint's encoding, as Restore reads it.
			b, err := json.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			var back runCheckpoint
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if got := describeJournal(back.resumeJournal("a")); !slices.Equal(got, tt.want) {
				t.Fatalf("journal %q, want %q", got, tt.want)
			}
			// Restore answers the open calls "cancelled": not a result.
			for _, c := range back.OpenTools {
				back.apply(result(c.Round, c.StepID, "cancelled"))
			}
			if got := describeJournal(back.resumeJournal("a")); !slices.Equal(got, tt.want) {
				t.Fatalf("after the cancelled results: journal %q, want %q", got, tt.want)
			}
		})
	}

	// The retry's own events take the place of the call that never
	// returned.
	x := &runCheckpoint{}
	x.journalReply("a", reply(1, "t", "t"))
	x.apply(call(1, "s1"))
	x.resumeJournal("a")
	x.apply(result(1, "s1", "cancelled"))
	x.apply(call(1, "s1b"))
	x.apply(result(1, "s1b", "r1"))
	if got, want := describeJournal(x.resumeJournal("a")), []string{"1: r1 -"}; !slices.Equal(got, want) {
		t.Errorf("after the retry: journal %q, want %q", got, want)
	}
}

func describeJournal(rounds []solver.Round) []string {
	var out []string
	for _, r := range rounds {
		s := fmt.Sprintf("%d:", r.Number)
		for k := range r.Reply.ToolCalls {
			switch {
			case k >= len(r.Results):
				s += " -"
			case r.Results[k].Retry:
				s += " retry"
			default:
				s += " " + r.Results[k].Text
			}
		}
		out = append(out, s)
	}
	return out
}
