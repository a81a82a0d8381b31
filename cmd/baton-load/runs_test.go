package main

import (
	"encoding/json"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestRuns: a run starts and ends once, told by its events or by a
// resync's snapshot, whichever comes first.
func TestRuns(t *testing.T) {
	ev := func(event, runID string) client.Frame {
		b, _ := json.Marshal(map[string]any{"run_id": runID})
		return client.Frame{Event: event, Seq: 1, Metadata: b}
	}
	answer := "done"
	snap := func(phase, runID string, final *string) client.Frame {
		var run *wsproto.RunState
		if runID != "" {
			run = &wsproto.RunState{RunID: runID, FinalAnswer: final}
		}
		b, _ := json.Marshal(wsproto.Snapshot{Phase: phase, Run: run})
		return client.Frame{Event: wsproto.EventStateSnapshot, Metadata: b}
	}
	tests := []struct {
		name             string
		frames           []client.Frame
		started, ended   int
		reasonIsNotEmpty bool
	}{
		{"events", []client.Frame{ev(wsproto.EventSolverStart, "r1"), ev(wsproto.EventFinalAnswer, "r1")}, 1, 1, false},
		{"cancelled", []client.Frame{ev(wsproto.EventPlanStart, "r1"), ev(wsproto.EventPlanCancelled, "r1")}, 1, 1, true},
		{"a snapshot spanning the start", []client.Frame{snap(wsproto.PhaseSolving, "r1", nil)}, 1, 0, false},
		{"a snapshot spanning the end", []client.Frame{ev(wsproto.EventSolverStart, "r1"), snap(wsproto.PhaseIdle, "r1", &answer)}, 1, 1, false},
		{"a snapshot spanning the whole run", []client.Frame{snap(wsproto.PhaseIdle, "r1", &answer)}, 1, 1, false},
		{"a snapshot of a run over without an answer", []client.Frame{snap(wsproto.PhaseIdle, "r1", nil)}, 1, 1, true},
		{"the end told twice", []client.Frame{ev(wsproto.EventFinalAnswer, "r1"), snap(wsproto.PhaseIdle, "r1", &answer),
			snap(wsproto.PhaseIdle, "r1", &answer)}, 1, 1, false},
		{"a snapshot of no run", []client.Frame{snap(wsproto.PhaseIdle, "", nil)}, 0, 0, false},
		{"the next run", []client.Frame{ev(wsproto.EventFinalAnswer, "r1"), snap(wsproto.PhaseIdle, "r1", &answer),
			ev(wsproto.EventSolverStart, "r2"), snap(wsproto.PhaseIdle, "r2", &answer)}, 2, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRuns()
			for _, f := range tt.frames {
				r.frame(f)
			}
			started, ended := r.counts()
			if started != tt.started || ended != tt.ended || (r.lastReason() != "") != tt.reasonIsNotEmpty {
				t.Errorf("started %d ended %d reason %q; want %d, %d, a reason: %v",
					started, ended, r.lastReason(), tt.started, tt.ended, tt.reasonIsNotEmpty)
			}
		})
	}
}
