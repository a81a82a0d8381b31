package main

import (
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// adaptive sends a user.message with metadata.adaptive.
func (c *conn) adaptive(text string) {
	c.sendFrame(map[string]any{"event": "user.message", "content": text, "metadata": map[string]any{"adaptive": true}})
}

// solveAdaptive sends an adaptive user.solve_tasks.
func (c *conn) solveAdaptive(tasks []wsproto.Task) {
	c.send("user.solve_tasks", map[string]any{"tasks": tasks, "adaptive": true})
}

// checkDecisions checks the decide step's promises in a run's frames:
// every solver.completed is followed by a plan.decision after that task,
// in completion order, and no task starts while a decision is due (a
// retry of a running task may: running ones go on); after synthesize,
// none is made.
func checkDecisions(t *testing.T, frames []client.Frame) []wsproto.PlanDecision {
	t.Helper()
	var due []string
	var out []wsproto.PlanDecision
	synthesized := false
	retrying := map[string]bool{}
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventRecoveryStarted:
			retrying[meta[wsproto.RecoveryStarted](t, f).TaskID] = true
		case wsproto.EventSolverCompleted:
			if !synthesized {
				due = append(due, meta[wsproto.SolverCompleted](t, f).TaskID)
			}
		case wsproto.EventPlanDecision:
			m := meta[wsproto.PlanDecision](t, f)
			if len(due) == 0 || due[0] != m.AfterTask || m.Reason == "" || f.Content != m.Reason {
				t.Fatalf("plan.decision %+v; decisions due after %v", m, due)
			}
			due = due[1:]
			out = append(out, m)
			if m.Action == wsproto.ActionSynthesize {
				synthesized, due = true, nil
			}
		case wsproto.EventSolverStart:
			id := meta[wsproto.SolverStart](t, f).TaskID
			if len(due) > 0 && !retrying[id] {
				t.Fatalf("%s started while the decision after %v was due", id, due)
			}
			delete(retrying, id)
		}
	}
	if len(due) > 0 {
		t.Errorf("no decision after %v", due)
	}
	return out
}

// actions lists the decisions' actions.
func actions(ds []wsproto.PlanDecision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Action)
	}
	return out
}

// confirmAndRead confirms the plan of an adaptive request and reads up to
// the decide step's first confirmation (plan_adjust or input_request).
func confirmAndRead(t *testing.T, c *conn, request string) ([]client.Frame, wsproto.UserConfirm) {
	t.Helper()
	c.adaptive(request)
	frames := c.until(wsproto.EventUserConfirm)
	plan := meta[wsproto.UserConfirm](t, frames[len(frames)-1])
	c.respond(plan.StepID, map[string]any{"confirmed": true})
	more := c.until(wsproto.EventUserConfirm)
	return append(frames, more...), meta[wsproto.UserConfirm](t, more[len(more)-1])
}

func TestDecideContinue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		run  func(c *conn)
	}{
		{"metadata.adaptive", nil, func(c *conn) { c.adaptive("Plan a garden") }},
		{"--adaptive", []string{"--adaptive"}, func(c *conn) { c.message("Plan a garden") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, _ := connect(t, base)
			tt.run(c)
			frames := c.until(wsproto.EventUserConfirm)
			c.respond(meta[wsproto.UserConfirm](t, frames[len(frames)-1]).StepID, map[string]any{"confirmed": true})
			frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
			checkStream(t, frames, 1)
			ds := checkDecisions(t, frames)
			n := len(framesOf(frames, wsproto.EventSolverCompleted))
			if len(ds) != n || strings.Count(strings.Join(actions(ds), ","), "continue") != n {
				t.Errorf("decisions %+v for %d tasks", ds, n)
			}
		})
	}
	// A run that is not adaptive makes no decision.
	base := startServer(t)
	c, _ := connect(t, base)
	if frames := solveAll(t, c, []wsproto.Task{failTask("a", "")}); len(framesOf(frames, wsproto.EventPlanDecision)) != 0 {
		t.Errorf("decisions in a run that is not adaptive")
	}
}

// TestDecideAdjustAdd: the plan grows by a task the user approves — over a
// connection that drops while the plan_adjust question is open.
func TestDecideAdjustAdd(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	frames, adjust := confirmAndRead(t, c, "Plan a trip to Porto [sim:decide=adjust_plan:+Check the weather]")
	if adjust.Kind != wsproto.ConfirmAdjust || len(adjust.Added) != 1 || adjust.Added[0].Title != "Check the weather" ||
		adjust.Removed == nil || len(adjust.Removed) != 0 || adjust.Tasks[len(adjust.Tasks)-1].ID != adjust.Added[0].ID ||
		!strings.HasPrefix(adjust.StepID, "confirm_adjust_") || adjust.ExpiresAt.IsZero() {
		t.Fatalf("plan_adjust %+v", adjust)
	}
	c.ws.CloseNow()
	sums := checksums(frames)
	last := frames[len(frames)-1].Seq
	r := resume(t, base, hello, last, sums[last])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); m.Resync {
		t.Fatalf("resume %+v, want a replay", m)
	}
	r.respond(adjust.StepID, map[string]any{})
	replayed, _ := r.errorAmid("invalid_message") // confirmed is required; running tasks go on meanwhile
	frames = append(frames, replayed...)
	r.respond(adjust.StepID, map[string]any{"confirmed": true})
	frames = append(frames, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, frames, 1)
	checkDecisions(t, frames)
	updates := framesOf(frames, wsproto.EventPlanUpdated)
	if len(updates) != 1 {
		t.Fatalf("%d plan.updated", len(updates))
	}
	u := meta[wsproto.PlanUpdated](t, updates[0])
	added := adjust.Added[0]
	if u.Version != 2 || len(u.Added) != 1 || u.Added[0].ID != added.ID || len(u.Removed) != 0 || len(u.Tasks) != len(adjust.Tasks) {
		t.Errorf("plan.updated %+v", u)
	}
	started := false
	for _, f := range framesOf(frames, wsproto.EventSolverStart) {
		started = started || meta[wsproto.SolverStart](t, f).TaskID == added.ID
	}
	pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0])
	if !started || pc.Completed != len(u.Tasks) || pc.Status != wsproto.StatusSucceeded {
		t.Errorf("the added task started: %v; %+v", started, pc)
	}
	r.respond(adjust.StepID, map[string]any{"confirmed": true})
	r.expectError("step_id_mismatch")
}

// TestDecideAdjustApplied: in a user.solve_tasks run adjustments apply at
// once — a removal here; a model's adjustment the run cannot take is
// refused with its problems as details and the run goes on.
func TestDecideAdjustApplied(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		tasks     []wsproto.Task
		action    string
		completed int
		check     func(t *testing.T, d wsproto.PlanDecision, updates []client.Frame)
	}{
		{
			name:   "remove a pending task",
			tasks:  []wsproto.Task{failTask("a", "[sim:decide=adjust_plan:-c]"), failTask("b", "", "a"), failTask("c", "", "a")},
			action: wsproto.ActionAdjustPlan, completed: 2,
			check: func(t *testing.T, _ wsproto.PlanDecision, updates []client.Frame) {
				if len(updates) != 1 {
					t.Fatalf("%d plan.updated", len(updates))
				}
				u := meta[wsproto.PlanUpdated](t, updates[0])
				if u.Version != 2 || len(u.Added) != 0 || len(u.Removed) != 1 || u.Removed[0] != "c" || len(u.Tasks) != 2 || u.Reason == "" {
					t.Errorf("plan.updated %+v", u)
				}
			},
		},
		{
			name:   "remove a completed task: refused",
			tasks:  []wsproto.Task{failTask("a", "[sim:decide=adjust_plan:-a]"), failTask("b", "", "a")},
			action: wsproto.ActionContinue, completed: 2,
			check: func(t *testing.T, d wsproto.PlanDecision, updates []client.Frame) {
				if len(updates) != 0 || len(d.Details) != 1 || d.Details[0].Code != wsproto.ProblemNotPending ||
					d.Details[0].TaskID != "a" || !strings.Contains(d.Reason, "refused") {
					t.Errorf("decision %+v, %d plan.updated", d, len(updates))
				}
			},
		},
		{
			name:   "remove a task another depends on: refused",
			tasks:  []wsproto.Task{failTask("a", "[sim:decide=adjust_plan:-b]"), failTask("b", "", "a"), failTask("c", "", "b")},
			action: wsproto.ActionContinue, completed: 3,
			check: func(t *testing.T, d wsproto.PlanDecision, updates []client.Frame) {
				if len(updates) != 0 || len(d.Details) != 1 || d.Details[0].Code != wsproto.ProblemUnknownDependency || d.Details[0].TaskID != "c" {
					t.Errorf("decision %+v", d)
				}
			},
		},
	}
	base := startServer(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, base)
			c.solveAdaptive(tt.tasks)
			frames := c.until(wsproto.EventFinalAnswer)
			checkStream(t, frames, 1)
			ds := checkDecisions(t, frames)
			if len(ds) == 0 || ds[0].Action != tt.action || ds[0].AfterTask != "a" {
				t.Fatalf("decisions %+v", ds)
			}
			if len(framesOf(frames, wsproto.EventUserConfirm)) != 0 {
				t.Errorf("a user.solve_tasks run asked to confirm an adjustment")
			}
			tt.check(t, ds[0], framesOf(frames, wsproto.EventPlanUpdated))
			if pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0]); pc.Completed != tt.completed {
				t.Errorf("pipeline.completed %+v, want %d completed", pc, tt.completed)
			}
		})
	}
}

// TestDecideAdjustResync: a client that resyncs while a plan_adjust
// question is open finds it in the snapshot, answers it with its step_id,
// and ends in the state of one that saw every event (plan.updated folded,
// plan_version 2).
func TestDecideAdjustResync(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	_, adjust := confirmAndRead(t, c, "Plan a trip to Braga [sim:decide=adjust_plan:+Book a table]")
	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	run := snap.Run
	if len(run.PendingConfirm) != 1 || run.PendingConfirm[0].StepID != adjust.StepID || len(run.PendingConfirm[0].Added) != 1 ||
		run.LastDecision == nil || run.LastDecision.Action != wsproto.ActionAdjustPlan || run.PlanVersion != 1 {
		t.Fatalf("snapshot %+v", run)
	}
	r.respond(adjust.StepID, map[string]any{"confirmed": true})
	live := r.until(wsproto.EventFinalAnswer)
	checkStream(t, live, snap.Seq+1)
	sameState(t, base, hello, snap, live, nil, nil)
	end := resume(t, base, hello, 1<<40, "")
	end.expect(wsproto.EventConnected)
	if s := meta[wsproto.Snapshot](t, end.expect(wsproto.EventStateSnapshot)); s.Run.PlanVersion != 2 || len(s.Run.Tasks) != len(adjust.Tasks) {
		t.Errorf("final snapshot %+v", s.Run)
	}
}
