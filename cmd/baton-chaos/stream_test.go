package main

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want violations
	}{
		{name: "none", in: nil, want: violations{}},
		{name: "each kind", in: []string{
			"gap: event seq 7 after 5",
			"duplicate: event seq 5 (solver.progress) at or below the last applied seq 6",
			"checksum at seq 9: client abc, server def",
			"replay: the client is at seq 9, the server's latest is 8; want a resync",
			"foreign frame: plan.start (seq 1) of session x reached session y",
			"seq 3: bad metadata",
		}, want: violations{Gaps: 1, Duplicates: 1, Forks: 2, Other: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.in); got != tt.want {
				t.Errorf("classify = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The client package's violation messages are what classify reads: a
// message it changes must still be sorted where it belongs.
func TestClassifyReadsTheClient(t *testing.T) {
	for _, prefix := range []string{"gap:", "duplicate:", "checksum", "replay:"} {
		if !clientWrites(t, prefix) {
			t.Errorf("the client package writes no violation beginning %q", prefix)
		}
	}
}

func TestRuns(t *testing.T) {
	ev := func(event, run string) client.Frame {
		return client.Frame{Event: event, Seq: 1, Metadata: json.RawMessage(`{"run_id":"` + run + `"}`)}
	}
	snap := func(phase, run string, final bool) client.Frame {
		s := wsproto.Snapshot{Phase: phase, Run: &wsproto.RunState{RunID: run}}
		if final {
			answer := "done"
			s.Run.FinalAnswer = &answer
		}
		b, _ := json.Marshal(s)
		return client.Frame{Event: wsproto.EventStateSnapshot, Metadata: b}
	}
	tests := []struct {
		name                   string
		frames                 []client.Frame
		started, ended, failed int
		open                   []string
	}{
		{name: "a run to its final answer", frames: []client.Frame{ev(wsproto.EventPlanStart, "r1"), ev(wsproto.EventFinalAnswer, "r1")},
			started: 1, ended: 1},
		{name: "a run still going", frames: []client.Frame{ev(wsproto.EventPlanStart, "r1"), ev(wsproto.EventSolverStart, "r1")},
			started: 1, open: []string{"r1"}},
		{name: "cancelled: ended, without a final answer", frames: []client.Frame{ev(wsproto.EventSolverStart, "r1"), ev(wsproto.EventPipelineCancelled, "r1")},
			started: 1, ended: 1, failed: 1},
		{name: "a resync's snapshot spans the end", frames: []client.Frame{ev(wsproto.EventPlanStart, "r1"), snap(wsproto.PhaseIdle, "r1", true)},
			started: 1, ended: 1},
		{name: "a resync's snapshot spans the start", frames: []client.Frame{snap(wsproto.PhaseSolving, "r2", false)},
			started: 1, open: []string{"r2"}},
		{name: "a snapshot shows it over with no answer", frames: []client.Frame{snap(wsproto.PhaseIdle, "r1", false)},
			started: 1, ended: 1, failed: 1},
		{name: "an end counts once", frames: []client.Frame{ev(wsproto.EventFinalAnswer, "r1"), snap(wsproto.PhaseIdle, "r1", false)},
			started: 1, ended: 1},
		{name: "unsequenced frames and frames of no run are not runs", frames: []client.Frame{
			{Event: wsproto.EventError, Metadata: json.RawMessage(`{"run_id":"x"}`)}, ev(wsproto.EventPlanStart, "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuns()
			for _, f := range tt.frames {
				r.frame(f)
			}
			started, ended, failed := r.counts()
			if started != tt.started || ended != tt.ended || failed != tt.failed {
				t.Errorf("counts = %d started, %d ended, %d failed; want %d, %d, %d", started, ended, failed, tt.started, tt.ended, tt.failed)
			}
			if open := r.open(); !reflect.DeepEqual(open, tt.open) {
				t.Errorf("open = %v, want %v", open, tt.open)
			}
		})
	}
}

// clientWrites reports whether the client package's source has a
// violation beginning with prefix.
func clientWrites(t *testing.T, prefix string) bool {
	t.Helper()
	for _, file := range []string{"../../client/deliver.go", "../../client/client.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(strings.Split(string(b), "\n"), func(line string) bool {
			return strings.Contains(line, `c.violation("`+prefix)
		}) {
			return true
		}
	}
	return false
}
