package solver

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-run/baton/wsproto"
)

// AdaptInput is what the decide step of an adaptive run (§11) gets after a
// task completes.
type AdaptInput struct {
	// Number counts the run's decisions: 1 is the first.
	Number int
	// AfterTask is the id of the task that completed.
	AfterTask string
	// Tasks is the run's task list as it stands, each task with its
	// status, attempts, and result or error.
	Tasks []wsproto.TaskState
	// Answers are the user's answers so far.
	Answers []Answer
}

// Adaptation is what the decide step chose.
type Adaptation struct {
	// Change, when not nil, is applied: checked again against the run as
	// it is then (a removed task that was skipped or cancelled meanwhile
	// stays as it is), then reported with PlanUpdated.
	Change *Change
	// Synthesize skips every pending task (reason synthesized) and ends
	// the decide step: the run ends when the running tasks do.
	Synthesize bool
	// Usage is the decide step's tokens, counted in the run's.
	Usage wsproto.Usage
}

// Change is an adjustment of the task list: tasks to add, ids of pending
// tasks to remove, and why.
type Change struct {
	Add    []wsproto.Task
	Remove []string
	Reason string
}

// adapt starts the decide step for the next completed task in the queue,
// on a goroutine of its own. Until it reports, no task starts.
func (s *scheduler) adapt(ctx context.Context) {
	i := s.adaptQueue[0]
	s.adaptQueue = s.adaptQueue[1:]
	s.decisions++
	in := AdaptInput{Number: s.decisions, AfterTask: s.tasks[i].ID, Tasks: s.states(), Answers: s.Answers()}
	s.busy++
	s.adapting = true
	go func() { s.adaptations <- s.events.Adapt(ctx, in) }()
}

// adapted applies what the decide step chose.
func (s *scheduler) adapted(a Adaptation) {
	s.busy--
	s.adapting = false
	s.usage = s.usage.Add(a.Usage)
	switch {
	case s.stopping:
	case a.Synthesize:
		s.synthesize()
	case a.Change != nil:
		s.apply(*a.Change)
	}
}

// synthesize skips every pending task and stops deciding.
func (s *scheduler) synthesize() {
	s.synthesized = true
	s.adaptQueue = nil
	for i, t := range s.tasks {
		if s.status[i] == wsproto.TaskPending {
			s.status[i] = wsproto.TaskSkipped
			s.events.Skipped(t.ID, wsproto.ReasonSynthesized, "")
		}
	}
}

// apply makes a change the decide step chose (and the user confirmed) and
// reports it. Only a race can make it invalid here — the hook checked it
// with Propose — and then nothing changes.
func (s *scheduler) apply(c Change) {
	var remove []string
	for _, id := range dedupe(c.Remove) {
		if i, ok := s.index[id]; ok && s.status[i] == wsproto.TaskPending {
			remove = append(remove, id)
		}
	}
	if len(remove) == 0 && len(c.Add) == 0 {
		return
	}
	after, probs := s.check(c.Add, remove)
	if probs != nil {
		return
	}
	for _, id := range remove {
		s.status[s.index[id]] = removed
		s.retired = append(s.retired, id)
	}
	added := wsproto.NormalizeTasks(append([]wsproto.Task{}, c.Add...)) // [] when nothing is added, as §11 writes it
	for _, t := range added {
		s.add(t)
	}
	s.version++
	s.events.PlanUpdated(&wsproto.PlanUpdated{Version: s.version, Added: added,
		Removed: append([]string{}, remove...), Tasks: after, Reason: c.Reason})
	s.relink() // after plan.updated: a new task whose dependency failed is skipped
}

// check validates a change against the run as it stands: §11's rules, and
// what the model refuses in the added tasks. It returns the whole list
// after the change, or the problems.
func (s *scheduler) check(add []wsproto.Task, remove []string) ([]wsproto.Task, []wsproto.TaskProblem) {
	run := s.states()
	after, probs := wsproto.ValidateAdjustment(run, s.retired, add, remove, s.opts.MaxTasks)
	if checker, ok := s.model.(TaskChecker); ok {
		kept := len(run) - len(remove)
		for k, t := range add {
			for _, p := range checker.CheckTask(t) {
				i := kept + k
				probs = append(probs, wsproto.TaskProblem{Code: wsproto.ProblemInvalidDirective,
					Message: fmt.Sprintf("task %d (%q): %s", i, t.ID, p), Index: &i, TaskID: t.ID})
			}
		}
	}
	if probs != nil {
		return nil, probs
	}
	return after, nil
}

// states is the task list as the decide step and the checks see it.
func (s *scheduler) states() []wsproto.TaskState {
	out := make([]wsproto.TaskState, 0, len(s.tasks))
	for i, t := range s.tasks {
		st, ok := s.visibleStatus(i)
		if !ok {
			continue
		}
		out = append(out, wsproto.TaskState{Task: t, Status: st, Attempt: s.attempts[i], Result: s.results[t.ID], Error: s.errs[t.ID]})
	}
	return out
}

// Propose checks a change against the run as it stands (§11): the added
// tasks as in §5.1 against the whole run, only pending tasks removed, no
// task left depending on a removed one, and what the model refuses. It
// returns the whole task list the change would make, or the problems; the
// error wraps ErrNotSolving once the run is over.
func (r *Run) Propose(ctx context.Context, c Change) ([]wsproto.Task, []wsproto.TaskProblem, error) {
	var after []wsproto.Task
	var probs []wsproto.TaskProblem
	if err := r.do(ctx, func(s *scheduler) { after, probs = s.check(c.Add, dedupe(c.Remove)) }); err != nil {
		return nil, nil, proposeErr(err)
	}
	return after, probs, nil
}

// ProposeList is Propose for an edited whole list, as a user may answer a
// plan_adjust confirmation: it returns the change the list amounts to
// (tasks it adds, pending tasks it leaves out) and the list after it.
func (r *Run) ProposeList(ctx context.Context, tasks []wsproto.Task) (Change, []wsproto.Task, []wsproto.TaskProblem, error) {
	var c Change
	var after []wsproto.Task
	var probs []wsproto.TaskProblem
	err := r.do(ctx, func(s *scheduler) {
		if c.Add, c.Remove, probs = wsproto.DiffTasks(s.states(), tasks); probs == nil {
			after, probs = s.check(c.Add, c.Remove)
		}
	})
	if err != nil {
		return Change{}, nil, nil, proposeErr(err)
	}
	return c, after, probs, nil
}

func proposeErr(err error) error {
	if errors.Is(err, errOver) {
		err = ErrNotSolving
	}
	return fmt.Errorf("propose a change: %w", err)
}

func dedupe(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
