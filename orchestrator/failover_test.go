package orchestrator

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// unitHas reports whether a unit holds an event of this type whose
// metadata passes match (nil: any).
func unitHas(unit []buffer.Entry, event string, match func(meta any) bool) bool {
	for _, e := range unit {
		var f client.Frame
		if json.Unmarshal(e.Data, &f) != nil || f.Event != event {
			continue
		}
		meta, err := f.Meta()
		if err == nil && (match == nil || match(meta)) {
			return true
		}
	}
	return false
}

// confirmOf matches an agent.user_confirm of this kind.
func confirmOf(kind string) func(any) bool {
	return func(meta any) bool { return meta.(*wsproto.UserConfirm).Kind == kind }
}

// answeredIn reports whether a checkpoint holds an answer to a confirmation
// of this kind not acted on yet.
func answeredIn(cp *checkpoint, kind string) bool {
	return cp != nil && cp.Exec != nil && slices.ContainsFunc(cp.Exec.Answered, func(a answered) bool { return a.Confirm.Kind == kind })
}

func taskIn(run *wsproto.RunState, id string) *wsproto.TaskState {
	if run == nil {
		return nil
	}
	for i := range run.Tasks {
		if run.Tasks[i].ID == id {
			return &run.Tasks[i]
		}
	}
	return nil
}

func statusIs(cp *checkpoint, id, status string) bool {
	if cp == nil {
		return false
	}
	t := taskIn(cp.Run, id)
	return t != nil && t.Status == status
}

func tk(id, desc string, deps ...string) wsproto.Task {
	return wsproto.Task{ID: id, Title: "Task " + id, Description: desc, DependsOn: append([]string{}, deps...)}
}

func yes() *bool { b := true; return &b }

func text(s string) *string { return &s }

func taskIs(id string) func(any) bool {
	return func(m any) bool {
		switch m := m.(type) {
		case *wsproto.SolverStart:
			return m.TaskID == id
		case *wsproto.SolverCompleted:
			return m.TaskID == id
		case *wsproto.SolverCancelled:
			return m.TaskID == id
		case *wsproto.SolverSkipped:
			return m.TaskID == id
		case *wsproto.ExecutionError:
			return m.TaskID == id
		}
		return false
	}
}

// notBefore checks that B's first event of this type came no earlier than
// at: a confirmation's time runs on from its expires_at.
func notBefore(t *testing.T, f *failover, event string, at time.Time) {
	t.Helper()
	i := slices.IndexFunc(f.onB(), func(e client.Frame) bool { return e.Event == event })
	if i < 0 {
		t.Fatalf("no %s on the new server", event)
	}
	if e := f.onB()[i]; e.Timestamp.Before(at) {
		t.Errorf("%s at %s, before the confirmation expired (%s)", event, e.Timestamp, at)
	}
}

func pendingOf(cp *checkpoint, kind string) wsproto.UserConfirm {
	for _, c := range cp.Run.PendingConfirm {
		if c.Kind == kind {
			return c
		}
	}
	return wsproto.UserConfirm{}
}

// TestFailover: a server dies (kill -9: what its store held is all that is
// left) at a chosen moment of a run; another restores the session from the
// store, the client resumes on it through the same address, and the run
// goes on — completed tasks are not run again, running ones start again
// as their next execution, the confirmation that was open is answered with
// its step_id on the new server (or expires at its expires_at), and the
// client sees every seq once, in order.
func TestFailover(t *testing.T) {
	garden := func(ctx context.Context, c *client.Client) error { return c.Message(ctx, "Plan a garden") }
	solve := func(ts ...wsproto.Task) func(context.Context, *client.Client) error {
		return func(ctx context.Context, c *client.Client) error { return c.SolveTasks(ctx, ts) }
	}
	after := func(event string, match func(any) bool) func([]buffer.Entry, *checkpoint) bool {
		return func(unit []buffer.Entry, _ *checkpoint) bool { return unitHas(unit, event, match) }
	}
	confirmed := func(kind string) func([]buffer.Entry, *checkpoint) bool {
		return after(wsproto.EventUserConfirm, confirmOf(kind))
	}
	tests := []scenario{
		{
			name:   "planning",
			start:  garden,
			freeze: after(wsproto.EventPlanStart, nil),
			check: func(t *testing.T, f *failover) {
				if !slices.ContainsFunc(f.onB(), func(e client.Frame) bool { return e.Event == wsproto.EventPlanStart }) {
					t.Errorf("the new server did not plan again")
				}
			},
		},
		{
			name:   "plan confirmation open",
			start:  garden,
			freeze: confirmed(wsproto.ConfirmPlan),
			kind:   wsproto.ConfirmPlan,
			answer: client.Answer{Confirmed: yes()},
			check: func(t *testing.T, f *failover) {
				if slices.ContainsFunc(f.onB(), func(e client.Frame) bool { return e.Event == wsproto.EventPlanStart }) {
					t.Errorf("the new server planned again")
				}
			},
		},
		{
			name:  "plan sent back, the new one not begun",
			start: garden,
			onA: func(c *client.Client, uc wsproto.UserConfirm) *client.Answer {
				if uc.Kind == wsproto.ConfirmPlan {
					c.Replan(context.Background(), "a smaller garden")
					return nil
				}
				return defaultAnswer(uc)
			},
			freeze: func(_ []buffer.Entry, cp *checkpoint) bool {
				return cp != nil && cp.Exec != nil && len(cp.Exec.Rejected) > 0
			},
			check: func(t *testing.T, f *failover) {
				if !slices.ContainsFunc(f.onB(), func(e client.Frame) bool {
					return is(e, wsproto.EventPlanStart, func(m any) bool { return m.(*wsproto.PlanStart).Feedback == "a smaller garden" })
				}) {
					t.Errorf("the new server did not plan again with the feedback")
				}
				if s := f.final.Run.PlanSummary; !strings.Contains(s, "revised: a smaller garden") {
					t.Errorf("plan summary %q: not the revised plan", s)
				}
			},
		},
		{
			name:  "plan confirmation expires on the new server",
			start: garden, freeze: confirmed(wsproto.ConfirmPlan),
			kind: wsproto.ConfirmPlan, noAnswer: true, confirmTimeout: 500 * time.Millisecond,
			ended: func(f *failover) bool { return f.has(wsproto.EventPlanCancelled, nil) },
			check: func(t *testing.T, f *failover) {
				if !f.has(wsproto.EventPlanCancelled, func(m any) bool { return m.(*wsproto.PlanCancelled).Reason == wsproto.ReasonConfirmTimeout }) {
					t.Errorf("the plan was not cancelled for want of an answer")
				}
				notBefore(t, f, wsproto.EventPlanCancelled, pendingOf(f.frozen, wsproto.ConfirmPlan).ExpiresAt)
			},
		},
		{
			name:  "solving, a task completed and one running",
			start: solve(tk("t1", "quick"), tk("t2", "slow (held)"), tk("t3", "last", "t1", "t2")),
			freeze: func(_ []buffer.Entry, cp *checkpoint) bool {
				return statusIs(cp, "t1", wsproto.TaskCompleted) && statusIs(cp, "t2", wsproto.TaskRunning)
			},
			check: func(t *testing.T, f *failover) {
				if r := f.result("t3"); !strings.Contains(r, "building on t1, t2") {
					t.Errorf("t3's result %q does not build on t1 and t2", r)
				}
			},
		},
		{
			name:   "a task failed, its retry not begun",
			start:  solve(tk("t1", "[sim:fail=network*1]")),
			freeze: after(wsproto.EventExecutionError, taskIs("t1")),
			check: func(t *testing.T, f *failover) {
				if c := f.completed("t1"); c == nil || c.Attempt != 2 {
					t.Errorf("t1 completed: %+v, want after 2 executions", c)
				}
			},
		},
		{
			name:   "task_failed decision open",
			start:  solve(tk("t1", "[sim:fail=permanent*1]"), tk("t2", "after", "t1")),
			freeze: confirmed(wsproto.ConfirmTaskFailed),
			kind:   wsproto.ConfirmTaskFailed,
			answer: client.Answer{Action: "retry"},
			check: func(t *testing.T, f *failover) {
				if c := f.completed("t1"); c == nil || c.Attempt != 2 {
					t.Errorf("t1 completed: %+v, want after 2 executions (retried)", c)
				}
			},
		},
		{
			name:      "task_failed answered, the answer not acted on",
			start:     solve(tk("t1", "[sim:fail=permanent*1]"), tk("t2", "after", "t1")),
			freeze:    func(_ []buffer.Entry, cp *checkpoint) bool { return answeredIn(cp, wsproto.ConfirmTaskFailed) },
			kind:      wsproto.ConfirmTaskFailed,
			answer:    client.Answer{Action: "retry"},
			answerOnA: true,
			check: func(t *testing.T, f *failover) {
				if c := f.completed("t1"); c == nil || c.Attempt != 2 {
					t.Errorf("t1 completed: %+v, want after 2 executions (retried)", c)
				}
			},
		},
		{
			name:   "tool_confirm open in a running task",
			start:  solve(tk("t1", `[sim:tool=deploy {"target":"prod"}]`), tk("t2", "other")),
			freeze: confirmed(wsproto.ConfirmTool),
			kind:   wsproto.ConfirmTool,
			answer: client.Answer{Approved: yes()},
			check: func(t *testing.T, f *failover) {
				if n := len(f.a.deploys) + len(f.b.deploys); n != 1 || len(f.b.deploys) != 1 {
					t.Errorf("deployed %d times (%d on the new server), want once, there", n, len(f.b.deploys))
				}
				if r := f.result("t1"); !strings.Contains(r, "deployed to prod") {
					t.Errorf("t1's result %q does not quote the tool's", r)
				}
			},
		},
		{
			name:  "tool_confirm expires on the new server",
			start: solve(tk("t1", `[sim:tool=deploy {"target":"prod"}]`)), freeze: confirmed(wsproto.ConfirmTool),
			kind: wsproto.ConfirmTool, noAnswer: true, confirmTimeout: 500 * time.Millisecond,
			check: func(t *testing.T, f *failover) {
				if n := len(f.a.deploys) + len(f.b.deploys); n != 0 {
					t.Errorf("deployed %d times without an approval", n)
				}
				if r := f.result("t1"); !strings.Contains(r, "declined by the user") {
					t.Errorf("t1's result %q: want the tool declined", r)
				}
				notBefore(t, f, wsproto.EventSolverCompleted, pendingOf(f.frozen, wsproto.ConfirmTool).ExpiresAt)
			},
		},
		{
			name:   "input_request open in a running task",
			start:  solve(tk("t1", "[sim:ask=Which city?]")),
			freeze: confirmed(wsproto.ConfirmInput),
			kind:   wsproto.ConfirmInput,
			answer: client.Answer{Text: text("Lisbon")},
			check: func(t *testing.T, f *failover) {
				if r := f.result("t1"); !strings.Contains(r, "Lisbon") {
					t.Errorf("t1's result %q does not quote the answer", r)
				}
			},
		},
		{
			name:      "input_request answered, the task not told",
			start:     solve(tk("t1", "[sim:ask=Which city?]")),
			freeze:    func(_ []buffer.Entry, cp *checkpoint) bool { return answeredIn(cp, wsproto.ConfirmInput) },
			kind:      wsproto.ConfirmInput,
			answer:    client.Answer{Text: text("Porto")},
			answerOnA: true,
			check: func(t *testing.T, f *failover) {
				if r := f.result("t1"); !strings.Contains(r, "Porto") {
					t.Errorf("t1's result %q does not quote the answer", r)
				}
				if slices.ContainsFunc(f.onB(), func(e client.Frame) bool { return e.Event == wsproto.EventUserConfirm }) {
					t.Errorf("the new server asked again a question already answered")
				}
			},
		},
		{
			name: "plan_adjust open in an adaptive run",
			start: func(ctx context.Context, c *client.Client) error {
				return c.MessageAdaptive(ctx, "Plan a trip [sim:decide=adjust_plan:+Book the hotel]")
			},
			freeze: confirmed(wsproto.ConfirmAdjust),
			kind:   wsproto.ConfirmAdjust,
			answer: client.Answer{Confirmed: yes()},
			check: func(t *testing.T, f *failover) {
				if v := f.final.Run.PlanVersion; v != 2 {
					t.Errorf("plan version %d, want 2", v)
				}
				if adj := taskIn(f.final.Run, "adj1"); adj == nil || adj.Status != wsproto.TaskCompleted {
					t.Errorf("the added task: %+v, want completed", adj)
				}
				after := f.frozen.Exec.Deciding.AfterTask
				if slices.ContainsFunc(f.onB(), func(e client.Frame) bool {
					return is(e, wsproto.EventPlanDecision, func(m any) bool { return m.(*wsproto.PlanDecision).AfterTask == after })
				}) {
					t.Errorf("the new server decided again after %s", after)
				}
			},
		},
		{
			name: "request_input of the decide step open",
			start: func(ctx context.Context, c *client.Client) error {
				return c.MessageAdaptive(ctx, "Plan a trip [sim:decide=request_input:What budget?]")
			},
			freeze: confirmed(wsproto.ConfirmInput),
			kind:   wsproto.ConfirmInput,
			answer: client.Answer{Text: text("900 EUR")},
			check: func(t *testing.T, f *failover) {
				f.b.mu.Lock()
				defer f.b.mu.Unlock()
				if !slices.Contains(f.b.answers, solver.Answer{Question: "What budget?", Text: "900 EUR"}) {
					t.Errorf("the tasks started on the new server did not get the answer: %v", f.b.answers)
				}
			},
		},
		{
			name:  "a running task cancelled by the user, its end not reported",
			start: solve(tk("t1", "long (held)"), tk("t2", "after", "t1"), tk("t3", "other")),
			act: func(ctx context.Context, f *failover, c *client.Client) error {
				if err := f.waitFor(ctx, c, wsproto.EventSolverStart, taskIs("t1")); err != nil {
					return err
				}
				return c.Send(ctx, wsproto.EventUserCancelTask, "", "", map[string]any{"task_id": "t1"})
			},
			freeze: func(_ []buffer.Entry, cp *checkpoint) bool {
				return cp != nil && cp.Exec != nil && cp.Exec.Notes["t1"].Cancel
			},
			check: func(t *testing.T, f *failover) {
				if !f.has(wsproto.EventSolverCancelled, func(m any) bool {
					s := m.(*wsproto.SolverCancelled)
					return s.TaskID == "t1" && s.Reason == wsproto.ReasonUserCancelTask
				}) {
					t.Errorf("t1's cancel was not reported")
				}
				if !f.has(wsproto.EventSolverSkipped, taskIs("t2")) || f.completed("t3") == nil {
					t.Errorf("t2 not skipped, or t3 not completed")
				}
				if n := f.b.executions("t1"); n != 0 {
					t.Errorf("t1, cancelled, ran %d times on the new server", n)
				}
			},
		},
		{
			name:  "the run cancelled by the user, the cancel not carried out",
			start: solve(tk("t1", "long (held)")),
			act: func(ctx context.Context, f *failover, c *client.Client) error {
				if err := f.waitFor(ctx, c, wsproto.EventSolverStart, taskIs("t1")); err != nil {
					return err
				}
				return c.Send(ctx, wsproto.EventUserCancel, "", "", nil)
			},
			freeze: func(_ []buffer.Entry, cp *checkpoint) bool {
				return cp != nil && cp.Exec != nil && cp.Exec.Cancel != ""
			},
			ended: func(f *failover) bool { return f.has(wsproto.EventPipelineCancelled, nil) },
			check: func(t *testing.T, f *failover) {
				if !f.has(wsproto.EventPipelineCancelled, func(m any) bool { return m.(*wsproto.PipelineCancelled).Reason == wsproto.ReasonUserCancel }) {
					t.Errorf("no pipeline.cancelled for the user's cancel")
				}
				if n := f.b.executions("t1"); n != 0 {
					t.Errorf("t1 ran %d times on the new server", n)
				}
			},
		},
		{
			name:   "aggregating",
			start:  solve(tk("t1", "one"), tk("t2", "two", "t1")),
			freeze: after(wsproto.EventAggregateStart, nil),
			check: func(t *testing.T, f *failover) {
				for _, id := range []string{"t1", "t2"} {
					if n := f.b.executions(id); n != 0 {
						t.Errorf("%s ran %d times on the new server", id, n)
					}
				}
			},
		},
		{
			name:   "aggregated, the run not concluded",
			start:  solve(tk("t1", "one")),
			freeze: after(wsproto.EventAggregateCompleted, nil),
			check: func(t *testing.T, f *failover) {
				if slices.ContainsFunc(f.onB(), func(e client.Frame) bool { return e.Event == wsproto.EventAggregateStart }) {
					t.Errorf("the new server aggregated again")
				}
				if !slices.ContainsFunc(f.onB(), func(e client.Frame) bool { return e.Event == wsproto.EventPipelineCompleted }) {
					t.Errorf("no pipeline.completed from the new server")
				}
			},
		},
	}
	for _, sc := range tests {
		t.Run(sc.name, func(t *testing.T) {
			f := runFailover(t, sc)
			checkFailover(t, f, sc)
			sc.check(t, f)
		})
	}
}
