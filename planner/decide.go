package planner

import (
	"context"
	"fmt"
	"slices"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Decider is an optional capability of a Planner, found with a type
// assertion: the decide step of adaptive runs (§11). After each task
// completes, it proposes what follows — continue, adjust the plan, ask the
// user, or synthesize the answer now. The caller checks the proposal
// against the run; Decide returns ctx's error promptly when ctx is done.
type Decider interface {
	Decide(ctx context.Context, in DecideInput) (Decision, error)
}

// DecideInput is what the decide step sees.
type DecideInput struct {
	Request     string
	PlanSummary string
	// Number counts the run's decisions: 1 is the first.
	Number int
	// AfterTask is the id of the task that has just completed.
	AfterTask string
	// Tasks is the run's task list as it stands, each task with its
	// status and, once completed, its result.
	Tasks []wsproto.TaskState
	// Answers are the user's answers so far in this run.
	Answers []wsproto.AnswerState
	// Feedback says what was wrong with the previous proposal for this
	// decision, so a model can correct itself.
	Feedback string
}

// Decision is the decide step's proposal. Action is one of wsproto's
// Action constants; Add and Remove go with adjust_plan, Question and
// Context with request_input.
type Decision struct {
	Action   string
	Reason   string
	Add      []wsproto.Task
	Remove   []string
	Question string
	Context  string
	Usage    wsproto.Usage
}

var _ Decider = (*Sim)(nil)

// Decide implements Decider (§12): the decision after a task completes is
// the [sim:decide=ACTION] of the task's description (a Baton extension, so
// user.solve_tasks runs can be steered too); failing that, the first
// decision is the request's [sim:decide=ACTION]; every other is continue.
// adjust_plan:+TITLE adds a task with that title depending on the task
// that completed.
func (p *Sim) Decide(ctx context.Context, in DecideInput) (Decision, error) {
	if err := failure.Wait(ctx, p.Delay); err != nil {
		return Decision{}, err
	}
	var d sim.Decision
	ok := false
	for _, t := range in.Tasks {
		if t.ID == in.AfterTask {
			d, ok = sim.Decide(t.Description)
		}
	}
	if !ok && in.Number == 1 {
		d, ok = sim.Decide(in.Request)
	}
	after := in.AfterTask
	switch {
	case !ok || d.Action == wsproto.ActionContinue:
		return Decision{Action: wsproto.ActionContinue, Reason: fmt.Sprintf("%s is done; the plan stands.", after)}, nil
	case d.Action == wsproto.ActionSynthesize:
		return Decision{Action: d.Action, Reason: fmt.Sprintf("%s gives enough to answer now.", after)}, nil
	case d.Action == wsproto.ActionRequestInput:
		return Decision{Action: d.Action, Question: d.Question,
			Reason: fmt.Sprintf("%s left a question only the user can answer.", after)}, nil
	case d.Remove != "":
		return Decision{Action: d.Action, Remove: []string{d.Remove},
			Reason: fmt.Sprintf("%s made %s unnecessary.", after, d.Remove)}, nil
	}
	task := wsproto.Task{ID: freeID(in), Title: d.Add, DependsOn: []string{after},
		Description: fmt.Sprintf("Added after %s.", after)}
	return Decision{Action: d.Action, Add: []wsproto.Task{task},
		Reason: fmt.Sprintf("%s showed that %q is needed.", after, d.Add)}, nil
}

// freeID is an id for a task the simulated decide step adds: adj<N>, N
// the decision's number or the first above it that no task has.
func freeID(in DecideInput) string {
	for n := in.Number; ; n++ {
		id := fmt.Sprintf("adj%d", n)
		if !slices.ContainsFunc(in.Tasks, func(t wsproto.TaskState) bool { return t.ID == id }) {
			return id
		}
	}
}
