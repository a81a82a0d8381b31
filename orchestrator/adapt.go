package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// Adapt is the decide step of an adaptive run (§11), after a task
// completed: the model proposes what follows, the client is told
// (plan.decision), and the decision is carried out — the user asked, an
// adjustment confirmed first in a run the user confirmed, or the run
// synthesized. It runs on a goroutine the solver owns, while no new task
// starts.
//
// A restored run whose decide step had told its decision (plan.decision)
// goes on with that decision instead of asking the model again.
func (e taskEvents) Adapt(ctx context.Context, in solver.AdaptInput) solver.Adaptation {
	r := e.r
	sched := r.scheduler()
	var out solver.Adaptation
	if step := r.resumedStep(in.AfterTask); step != nil {
		out = r.resumeStep(ctx, sched, step)
	} else {
		d, after, details, usage := r.nextStep(ctx, sched, in)
		out.Usage = usage
		r.spend(usage)
		if ctx.Err() != nil {
			return out
		}
		r.emitNoting(func(x *runCheckpoint) { x.decision(in.Number, in.AfterTask, d) }, wsproto.EventPlanDecision, d.Reason,
			&wsproto.PlanDecision{RunID: r.id, AfterTask: in.AfterTask, Action: d.Action, Reason: d.Reason, Details: details})
		out = r.carryOut(ctx, sched, d, after, nil, out)
	}
	if ctx.Err() == nil {
		r.adapted(out)
	}
	return out
}

// carryOut carries out a decision told to the client: asks the user, has
// an adjustment confirmed in a run the user confirmed, or synthesizes. c
// is the confirmation a restored run had open for it, if any.
func (r *run) carryOut(ctx context.Context, sched *solver.Run, d planner.Decision, after []wsproto.Task, c *confirm, out solver.Adaptation) solver.Adaptation {
	switch d.Action {
	case wsproto.ActionSynthesize:
		out.Synthesize = true
	case wsproto.ActionRequestInput:
		if c == nil {
			c = r.openConfirm(&wsproto.UserConfirm{Kind: wsproto.ConfirmInput, Question: d.Question, Context: d.Context},
				d.Question, r.sess.srv.opts.ConfirmTimeout)
		}
		if answer, err := r.await(ctx, c, time.Until(c.expires), nil); err == nil {
			sched.AddAnswer(solver.Answer{Question: d.Question, Text: *answer.Text})
		}
	case wsproto.ActionAdjustPlan:
		change := &solver.Change{Add: d.Add, Remove: d.Remove, Reason: d.Reason}
		if r.confirmed {
			change = r.confirmChange(ctx, sched, change, after, c)
		}
		out.Change = change
	}
	return out
}

// scheduler returns the solver run in progress.
func (r *run) scheduler() *solver.Run {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	return r.sched
}

// nextStep asks the model what follows a completed task and checks the
// answer. A proposal that cannot be used is sent back once with its
// problems; if the second cannot be used either, or the model fails or has
// no decide step, the decision is continue (with the refused adjustment's
// problems as details). For an adjustment it also returns the task list
// the change would make.
func (r *run) nextStep(ctx context.Context, sched *solver.Run, in solver.AdaptInput) (planner.Decision, []wsproto.Task, []wsproto.TaskProblem, wsproto.Usage) {
	var usage wsproto.Usage
	decider, ok := r.sess.srv.models.Planner.(planner.Decider)
	if !ok {
		return planner.Decision{Action: wsproto.ActionContinue, Reason: "The model makes no decisions: the plan stands."}, nil, nil, usage
	}
	din := planner.DecideInput{Request: r.request, PlanSummary: r.summary, Number: in.Number, AfterTask: in.AfterTask, Tasks: in.Tasks}
	for _, a := range in.Answers {
		din.Answers = append(din.Answers, wsproto.AnswerState{Question: a.Question, Text: a.Text})
	}
	for attempt := 1; ; attempt++ {
		began := time.Now()
		d, err := failure.Protect(func() (planner.Decision, error) { return decider.Decide(ctx, din) }) // a panic fails the step
		r.sess.srv.obs.ModelCall(CallDecide, callResult(ctx, err), time.Since(began), d.Usage)
		usage = usage.Add(d.Usage)
		if ctx.Err() != nil {
			return d, nil, nil, usage
		}
		if err != nil {
			// The client hears the failure's category in Baton's words;
			// the log keeps the detail.
			return planner.Decision{Action: wsproto.ActionContinue,
				Reason: "The decide step failed (" + r.public(err, "stage", "decide") + "): the plan stands."}, nil, nil, usage
		}
		after, problem, details := r.checkDecision(ctx, sched, d)
		if problem == "" {
			if d.Reason == "" {
				d.Reason = "The model gave no reason."
			}
			return d, after, nil, usage
		}
		if attempt == 2 {
			return planner.Decision{Action: wsproto.ActionContinue,
				Reason: "The proposed decision was refused (" + problem + "): the plan stands."}, nil, details, usage
		}
		din.Feedback = problem
	}
}

// checkDecision says what is wrong with a decision, if anything; for an
// adjustment, its problems against the run, else the list it would make.
func (r *run) checkDecision(ctx context.Context, sched *solver.Run, d planner.Decision) ([]wsproto.Task, string, []wsproto.TaskProblem) {
	switch d.Action {
	case wsproto.ActionContinue, wsproto.ActionSynthesize:
		return nil, "", nil
	case wsproto.ActionRequestInput:
		if d.Question == "" {
			return nil, "request_input needs a question", nil
		}
		return nil, "", nil
	case wsproto.ActionAdjustPlan:
		after, probs, err := sched.Propose(ctx, solver.Change{Add: d.Add, Remove: d.Remove})
		if err != nil {
			return nil, err.Error(), nil
		}
		if probs != nil {
			return nil, problemsText(probs), probs
		}
		return after, "", nil
	}
	return nil, fmt.Sprintf("%q is not an action (continue, adjust_plan, request_input, synthesize)", d.Action), nil
}

// confirmChange asks the user to approve an adjustment (kind plan_adjust)
// and returns the change to make: the proposed one, the one the user's
// edited list amounts to, or nil when declined, expired or no longer
// valid. c is the confirmation a restored run had open, if any.
func (r *run) confirmChange(ctx context.Context, sched *solver.Run, change *solver.Change, after []wsproto.Task, c *confirm) *solver.Change {
	if c == nil {
		c = r.openConfirm(&wsproto.UserConfirm{
			Kind:    wsproto.ConfirmAdjust,
			Added:   wsproto.NormalizeTasks(append([]wsproto.Task{}, change.Add...)),
			Removed: append([]string{}, change.Remove...),
			Tasks:   after,
		}, "Adjust the plan?", r.sess.srv.opts.ConfirmTimeout)
	}
	answer, err := r.await(ctx, c, time.Until(c.expires), nil)
	if err != nil || !*answer.Confirmed {
		return nil
	}
	if answer.Tasks == nil {
		return change
	}
	// Checked when the answer came (respond); checked again here, as the
	// run may have moved on since.
	edited, _, probs, err := sched.ProposeList(ctx, answer.Tasks)
	if err != nil || probs != nil {
		return nil
	}
	edited.Reason = change.Reason
	return &edited
}

// PlanUpdated reports an applied adjustment.
func (e taskEvents) PlanUpdated(m *wsproto.PlanUpdated) {
	m.RunID = e.r.id
	e.r.emit(wsproto.EventPlanUpdated, fmt.Sprintf("Plan version %d: %d added, %d removed", m.Version, len(m.Added), len(m.Removed)), m)
}

// checkAdjustEdit checks, before respond takes the answer, the task list a
// user.response edits a plan_adjust confirmation with. It runs without
// the session lock: the scheduler it asks may be emitting. A response that
// is anything else passes (respond decides).
func (sess *session) checkAdjustEdit(resp *wsproto.Response) *wsproto.Error {
	if resp.Tasks == nil || resp.Confirmed == nil || !*resp.Confirmed {
		return nil
	}
	sess.mu.Lock()
	c, ok := sess.confirms[resp.StepID]
	var sched *solver.Run
	if ok && c.kind == wsproto.ConfirmAdjust {
		sched = c.run.sched
	}
	sess.mu.Unlock()
	if sched == nil {
		return nil
	}
	_, _, probs, err := sched.ProposeList(c.run.ctx, resp.Tasks)
	if err != nil || probs == nil {
		return nil // the run has ended (respond finds the step closed), or the edit is fine
	}
	e := invalidTasks(probs)
	e.RefType = wsproto.EventUserResponse
	return e
}
