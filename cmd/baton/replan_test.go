package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestReplanTwiceThenConfirm: the plan is sent back twice, the second
// time with the connection dropping right after; each withdrawn step_id
// answers step_id_mismatch, the run keeps its run_id, and the third plan
// is confirmed and solved.
func TestReplanTwiceThenConfirm(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	frames, first := runToConfirm(t, c, "Plan a weekend trip to Lisbon")

	c.send("user.replan", map[string]any{"feedback": "Fewer museums"})
	more := c.until(wsproto.EventUserConfirm)
	frames = append(frames, more...)
	second := meta[wsproto.UserConfirm](t, more[len(more)-1])
	c.respond(first.StepID, map[string]any{"confirmed": true})
	c.expectError("step_id_mismatch")

	c.send("user.replan", map[string]any{"feedback": "Add a day trip"})
	// Drop once the server has taken the command (a frame sent just before
	// an abrupt close may never be read: a client resends what it never
	// saw the effect of), in the middle of the replanning.
	frames = append(frames, c.until(wsproto.EventPlanStart)...)
	c.ws.CloseNow()
	sums := checksums(frames)
	last := frames[len(frames)-1].Seq
	r := resume(t, base, hello, last, sums[last])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); m.Resync {
		t.Fatalf("resume %+v, want a replay", m)
	}
	more = r.until(wsproto.EventUserConfirm)
	frames = append(frames, more...)
	third := meta[wsproto.UserConfirm](t, more[len(more)-1])
	r.respond(second.StepID, map[string]any{"confirmed": true})
	r.expectError("step_id_mismatch")
	r.respond(third.StepID, map[string]any{"confirmed": true})
	frames = append(frames, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, frames, 1)

	var feedback []string
	step := 0
	runID := meta[wsproto.PlanStart](t, frames[0]).RunID
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventPlanStart:
			m := meta[wsproto.PlanStart](t, f)
			feedback, step = append(feedback, m.Feedback), 0
			if m.RunID != runID || m.Request != "Plan a weekend trip to Lisbon" {
				t.Errorf("plan.start %+v", m)
			}
		case wsproto.EventPlanStepCompleted:
			if step++; meta[wsproto.PlanStep](t, f).Step != step {
				t.Errorf("plan step %s, want %d", f.Metadata, step)
			}
		case wsproto.EventFinalAnswer:
			if meta[wsproto.FinalAnswer](t, f).RunID != runID {
				t.Errorf("the run changed its id")
			}
		}
	}
	if !slices.Equal(feedback, []string{"", "Fewer museums", "Add a day trip"}) {
		t.Errorf("plan.start feedback %q", feedback)
	}
	if !strings.Contains(third.PlanSummary, "(revised: Add a day trip)") || first.StepID == second.StepID {
		t.Errorf("third plan %q", third.PlanSummary)
	}

	r.send("user.replan", map[string]any{"feedback": "too late"})
	r.expectError("invalid_state")
}

// TestReplanErrors: with no plan confirmation open — idle, planning,
// solving — user.replan is invalid_state and changes nothing.
func TestReplanErrors(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--retry-base", "1h")
	c, _ := connect(t, base)
	c.send("user.replan", map[string]any{"feedback": "x"})
	c.expectError("invalid_state")
	c.send("user.replan", map[string]any{})
	c.expectError("invalid_message")

	// Planning: the first attempt failed and the retry waits an hour.
	c.message("Stuck [sim:plan_fail=network*1]")
	c.until(wsproto.EventRecoveryStarted)
	c.send("user.replan", map[string]any{"feedback": "x"})
	c.expectError("invalid_state")
	c.send("user.cancel", nil)
	c.expect(wsproto.EventPipelineCancelled)

	// Solving.
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{failTask("hold", "[sim:ask=Done?]")}})
	_, asked := confirmsUntil(t, c, 1)
	c.send("user.replan", map[string]any{"feedback": "x"})
	c.expectError("invalid_state")
	c.respond(asked[wsproto.ConfirmInput+" hold"].StepID, map[string]any{"text": "yes"})
	c.until(wsproto.EventFinalAnswer)
}

// TestReplanResync: a client that resyncs while a replan is under way gets
// a snapshot without the withdrawn confirmation and ends in the state of
// one that saw every event.
func TestReplanResync(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	_, first := runToConfirm(t, c, "Write a haiku")
	c.send("user.replan", map[string]any{"feedback": "About the sea"})
	c.expect(wsproto.EventPlanStart)

	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	for _, p := range snap.Run.PendingConfirm {
		if p.StepID == first.StepID {
			t.Fatalf("the withdrawn confirmation is still pending: %+v", snap.Run)
		}
	}
	var live []client.Frame
	confirm := wsproto.UserConfirm{}
	if snap.Phase == wsproto.PhaseAwaitingConfirm {
		confirm = snap.Run.PendingConfirm[0]
	} else {
		live = r.until(wsproto.EventUserConfirm)
		confirm = meta[wsproto.UserConfirm](t, live[len(live)-1])
	}
	r.respond(confirm.StepID, map[string]any{"confirmed": true})
	live = append(live, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, live, snap.Seq+1)
	sameState(t, base, hello, snap, live, nil, nil)
}
