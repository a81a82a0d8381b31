package aggregator_test

import (
	"strings"
	"testing"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/wsproto"
)

func TestSim(t *testing.T) {
	tests := []struct {
		name    string
		in      aggregator.Input
		summary string
		answer  []string
	}{
		{"summarises results", aggregator.Input{Request: "Lisbon", Tasks: []aggregator.TaskOutcome{
			{Task: wsproto.Task{Title: "A"}, Status: "completed", Result: "ra"},
			{Task: wsproto.Task{Title: "B"}, Status: "skipped"}}},
			`1 of 2 tasks completed for "Lisbon".`, []string{"ra", "B: skipped"}},
		{"explains a total failure", aggregator.Input{Request: "Lisbon", Tasks: []aggregator.TaskOutcome{
			{Task: wsproto.Task{ID: "a", Title: "A"}, Status: "failed", Error: "boom"}}},
			`No task completed for "Lisbon" (1 failed).`, []string{"Nothing could be produced", "A (a): failed: boom"}},
		{"a task list without a request", aggregator.Input{Tasks: []aggregator.TaskOutcome{
			{Task: wsproto.Task{Title: "A"}, Status: "completed", Result: "ra"}}},
			"1 of 1 tasks completed for your tasks.", []string{"Answer to your tasks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var streamed []string
			out, err := (&aggregator.Sim{}).Aggregate(t.Context(), tt.in, func(s string) { streamed = append(streamed, s) })
			if err != nil {
				t.Fatal(err)
			}
			if out.Summary != tt.summary || len(streamed) != len(tt.in.Tasks) {
				t.Errorf("summary %q, %d pieces streamed", out.Summary, len(streamed))
			}
			for _, want := range tt.answer {
				if !strings.Contains(out.Answer, want) {
					t.Errorf("answer %q lacks %q", out.Answer, want)
				}
			}
		})
	}
}

func TestExplain(t *testing.T) {
	task := func(id string, deps ...string) wsproto.Task {
		return wsproto.Task{ID: id, Title: "Task " + id, DependsOn: deps}
	}
	tests := []struct {
		name    string
		in      aggregator.Input
		summary string
		lines   []string
	}{
		{
			name: "failures with their category, dependents skipped",
			in: aggregator.Input{Request: "Lisbon", Tasks: []aggregator.TaskOutcome{
				{Task: task("a"), Status: "failed", Error: "the model endpoint could not be reached (network)"},
				{Task: task("b"), Status: "failed", Error: "the model endpoint refused the request: 401 unauthorized (permanent)"},
				{Task: task("c", "a", "b"), Status: "skipped"}}},
			summary: `No task completed for "Lisbon" (2 failed, 1 skipped).`,
			lines: []string{
				"- Task a (a): failed: the model endpoint could not be reached (network)",
				"- Task b (b): failed: the model endpoint refused the request: 401 unauthorized (permanent)",
				"- Task c (c): skipped, because a, b did not complete",
			},
		},
		{
			name: "cancelled tasks of a task list",
			in: aggregator.Input{Tasks: []aggregator.TaskOutcome{
				{Task: task("a"), Status: "cancelled"},
				{Task: task("b"), Status: "failed"}}},
			summary: "No task completed for your tasks (1 failed, 1 cancelled).",
			lines:   []string{"- Task a (a): cancelled", "- Task b (b): failed: no reason was given"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := aggregator.Explain(tt.in)
			if out.Summary != tt.summary {
				t.Errorf("summary %q, want %q", out.Summary, tt.summary)
			}
			want := tt.summary + " Nothing could be produced:\n" + strings.Join(tt.lines, "\n") + "\n"
			if out.Answer != want {
				t.Errorf("answer\n%s\nwant\n%s", out.Answer, want)
			}
		})
	}
}
