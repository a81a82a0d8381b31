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
			{Task: wsproto.Task{Title: "A"}, Status: "failed", Error: "boom"}}},
			`No task completed for "Lisbon".`, []string{"Nothing could be produced", "A: failed (boom)"}},
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
