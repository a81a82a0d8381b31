package main

import (
	"slices"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestDecideAdjustAnswers: the user's answers to a plan_adjust question —
// declined, edited, invalid edits refused with details (the question stays
// open), expired.
func TestDecideAdjustAnswers(t *testing.T) {
	t.Parallel()
	const request = "Plan a trip to Faro [sim:decide=adjust_plan:+Check the weather]"
	tests := []struct {
		name string
		args []string
		// answer answers the question, sending any refused answers first;
		// it returns the frames it read and the added task's title the
		// run ends with ("" for none).
		answer func(t *testing.T, c *conn, q wsproto.UserConfirm) ([]client.Frame, string)
	}{
		{"declined", nil, func(t *testing.T, c *conn, q wsproto.UserConfirm) ([]client.Frame, string) {
			c.respond(q.StepID, map[string]any{"confirmed": false})
			return nil, ""
		}},
		{"expired", []string{"--confirm-timeout", "1s"}, func(t *testing.T, c *conn, q wsproto.UserConfirm) ([]client.Frame, string) {
			return nil, ""
		}},
		{"edited, after invalid edits", nil, func(t *testing.T, c *conn, q wsproto.UserConfirm) ([]client.Frame, string) {
			edit := func(change func(tasks []wsproto.Task) []wsproto.Task) []wsproto.Task {
				tasks := make([]wsproto.Task, len(q.Tasks))
				for i, task := range q.Tasks {
					task.DependsOn = append([]string{}, task.DependsOn...)
					tasks[i] = task
				}
				return change(tasks)
			}
			last := len(q.Tasks) - 1
			var frames []client.Frame
			for _, bad := range []struct {
				code  string
				tasks []wsproto.Task
			}{
				{wsproto.ProblemTaskChanged, edit(func(ts []wsproto.Task) []wsproto.Task { ts[0].Title = "Other"; return ts })},
				{wsproto.ProblemNotPending, edit(func(ts []wsproto.Task) []wsproto.Task { return ts[1:] })}, // the first task has completed
				{wsproto.ProblemCycle, edit(func(ts []wsproto.Task) []wsproto.Task {
					ts[last].DependsOn = append(ts[last].DependsOn, ts[last].ID)
					return ts
				})},
				{wsproto.ProblemInvalidDirective, edit(func(ts []wsproto.Task) []wsproto.Task { ts[last].Description = "[sim:nope=1]"; return ts })},
			} {
				c.respond(q.StepID, map[string]any{"confirmed": true, "tasks": bad.tasks})
				read, e := c.errorAmid("invalid_tasks") // running tasks go on meanwhile
				frames = append(frames, read...)
				if len(e.Details) == 0 || e.Details[0].Code != bad.code || e.RefType != "user.response" {
					t.Errorf("edit refused with %+v, want %s", e, bad.code)
				}
			}
			c.respond(q.StepID, map[string]any{"confirmed": true,
				"tasks": edit(func(ts []wsproto.Task) []wsproto.Task { ts[last].Title = "Check the forecast"; return ts })})
			return frames, "Check the forecast"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, _ := connect(t, base)
			frames, q := confirmAndRead(t, c, request)
			read, want := tt.answer(t, c, q)
			frames = append(frames, read...)
			frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
			checkStream(t, frames, 1)
			checkDecisions(t, frames)
			updates := framesOf(frames, wsproto.EventPlanUpdated)
			planned := len(meta[wsproto.PlanCompleted](t, framesOf(frames, wsproto.EventPlanCompleted)[0]).Tasks)
			pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0])
			if want == "" {
				if len(updates) != 0 || pc.Completed != planned {
					t.Errorf("%d plan.updated, %+v; want no change", len(updates), pc)
				}
				c.respond(q.StepID, map[string]any{"confirmed": true})
				c.expectError("step_id_mismatch") // the run has ended: nothing else comes
				return
			}
			if len(updates) != 1 {
				t.Fatalf("%d plan.updated", len(updates))
			}
			u := meta[wsproto.PlanUpdated](t, updates[0])
			if len(u.Added) != 1 || u.Added[0].Title != want || pc.Completed != planned+1 {
				t.Errorf("plan.updated %+v, %+v", u, pc)
			}
		})
	}
}

// TestDecideRequestInput: the decide step asks the user (input_request
// without task_id); the answer is recorded in the run's state, an expired
// question lets the run go on without one, and a client that resyncs
// while the question is open answers it with the same step_id.
func TestDecideRequestInput(t *testing.T) {
	t.Parallel()
	const request = "Deploy the app [sim:decide=request_input:Which environment?]"
	tests := []struct {
		name   string
		args   []string
		resync bool
		answer string // "" lets the question expire
	}{
		{name: "answered", answer: "staging"},
		{name: "expired", args: []string{"--confirm-timeout", "1s"}},
		{name: "answered after a resync", resync: true, answer: "production"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, hello := connect(t, base)
			frames, q := confirmAndRead(t, c, request)
			if q.Kind != wsproto.ConfirmInput || q.TaskID != "" || q.Question != "Which environment?" || q.ExpiresAt.IsZero() {
				t.Fatalf("input_request %+v", q)
			}
			if ds := framesOf(frames, wsproto.EventPlanDecision); len(ds) != 1 ||
				meta[wsproto.PlanDecision](t, ds[0]).Action != wsproto.ActionRequestInput {
				t.Fatalf("decisions %d", len(ds))
			}
			var snap wsproto.Snapshot
			if tt.resync {
				c = resume(t, base, hello, 1<<40, "")
				c.expect(wsproto.EventConnected)
				snap = meta[wsproto.Snapshot](t, c.expect(wsproto.EventStateSnapshot))
				r := snap.Run
				if len(r.PendingConfirm) != 1 || r.PendingConfirm[0].StepID != q.StepID || r.LastDecision == nil ||
					r.LastDecision.Action != wsproto.ActionRequestInput || r.PlanVersion != 1 {
					t.Fatalf("snapshot %+v", r)
				}
			}
			if tt.answer != "" {
				c.respond(q.StepID, map[string]any{"text": tt.answer})
			}
			live := c.until(wsproto.EventFinalAnswer)
			if !tt.resync { // a resync's frames are not the whole stream
				frames = append(frames, live...)
				checkStream(t, frames, 1)
				checkDecisions(t, frames)
			}

			// The snapshot of the ended run carries the answer given.
			r := resume(t, base, hello, 1<<40, "")
			r.expect(wsproto.EventConnected)
			end := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
			want := []wsproto.AnswerState{}
			if tt.answer != "" {
				want = append(want, wsproto.AnswerState{StepID: q.StepID, Question: q.Question, Text: tt.answer})
			}
			if !slices.Equal(end.Run.Answers, want) {
				t.Errorf("answers %+v, want %+v", end.Run.Answers, want)
			}
			if tt.resync {
				sameState(t, base, hello, snap, live, nil, map[string]string{q.StepID: tt.answer})
			}
		})
	}
}

// TestSynthesize: the decision after the first task is synthesize; the
// pending tasks are skipped (reason synthesized, no dependency), the
// running one — waiting for the user — goes on, and aggregation follows
// when it ends. The connection drops right after the decision.
func TestSynthesize(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	c.solveAdaptive([]wsproto.Task{failTask("a", "[sim:decide=synthesize]"), failTask("hold", "[sim:ask=Keep going?]"),
		failTask("c", "", "a"), failTask("d", "", "c")})
	var frames []client.Frame
	var hold wsproto.UserConfirm
	decided := false
	for !decided || hold.StepID == "" {
		f := c.next()
		frames = append(frames, f)
		switch f.Event {
		case wsproto.EventPlanDecision:
			decided = true
		case wsproto.EventUserConfirm:
			hold = meta[wsproto.UserConfirm](t, f)
		}
	}
	c.ws.CloseNow()
	sums := checksums(frames)
	last := frames[len(frames)-1].Seq
	r := resume(t, base, hello, last, sums[last])
	r.expect(wsproto.EventConnected)
	r.respond(hold.StepID, map[string]any{"text": "no"})
	frames = append(frames, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, frames, 1)
	ds := checkDecisions(t, frames)
	if len(ds) != 1 || ds[0].Action != wsproto.ActionSynthesize || ds[0].AfterTask != "a" {
		t.Fatalf("decisions %+v, want one synthesize (none after it)", ds)
	}
	var skipped []string
	for _, f := range framesOf(frames, wsproto.EventSolverSkipped) {
		m := meta[map[string]any](t, f)
		if _, has := m["dependency"]; has || m["reason"] != wsproto.ReasonSynthesized {
			t.Errorf("solver.skipped %s", f.Metadata)
		}
		skipped = append(skipped, m["task_id"].(string))
	}
	agg := meta[wsproto.AggregateStart](t, framesOf(frames, wsproto.EventAggregateStart)[0])
	if !slices.Equal(skipped, []string{"c", "d"}) || agg.Completed != 2 || agg.Skipped != 2 {
		t.Errorf("skipped %v, aggregate.start %+v", skipped, agg)
	}
}

// errorAmid reads up to the next system.error, which must have this code,
// and returns the sequenced events read before it as well.
func (c *conn) errorAmid(code string) ([]client.Frame, wsproto.Error) {
	c.t.Helper()
	var frames []client.Frame
	for {
		f := c.next()
		if f.Event != wsproto.EventError {
			frames = append(frames, f)
			continue
		}
		e := meta[wsproto.Error](c.t, f)
		if e.Code != code {
			c.t.Fatalf("system.error %q (%s), want %q", e.Code, e.Message, code)
		}
		return frames, e
	}
}

// TestDecideErrors: malformed adaptive requests are refused and start
// nothing.
func TestDecideErrors(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	for _, tt := range []struct {
		name  string
		frame map[string]any
		code  string
	}{
		{"adaptive not a bool", map[string]any{"event": "user.message", "content": "x", "metadata": map[string]any{"adaptive": 1}}, "invalid_message"},
		{"a malformed decide directive", map[string]any{"event": "user.message", "content": "x [sim:decide=later]",
			"metadata": map[string]any{"adaptive": true}}, "invalid_message"},
		{"a malformed decide directive in a task", map[string]any{"event": "user.solve_tasks", "metadata": map[string]any{
			"adaptive": true, "tasks": []wsproto.Task{failTask("a", "[sim:decide=adjust_plan:oops]")}}}, "invalid_tasks"},
	} {
		c.sendFrame(tt.frame)
		if e := c.expectError(tt.code); e.RefType != tt.frame["event"] {
			t.Errorf("%s: %+v", tt.name, e)
		}
	}
	c.send("user.cancel", nil)
	c.expectError("no_active_run") // nothing started
}
