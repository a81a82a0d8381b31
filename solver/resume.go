package solver

import (
	"context"
	"errors"
	"slices"

	"github.com/baton-run/baton/wsproto"
)

// Resume is where a run continues from when another process takes it over
// (a checkpoint of the task list as it stood): NewResumed starts from it
// instead of from a fresh list.
type Resume struct {
	// Tasks is the task list as it stands, in order, removed tasks left
	// out (see Retired).
	Tasks []ResumeTask
	// Retired are the ids of tasks removed by adjustments: they stay
	// taken.
	Retired []string
	// Version is the plan's version (1 = the confirmed plan).
	Version int
	// Decisions counts the decide steps made so far; AdaptQueue holds the
	// completed tasks whose decide step has not been made (or must be
	// made again), oldest first. Synthesized says a decide step chose
	// synthesize: pending tasks are skipped and no more decisions are
	// made.
	Decisions   int
	AdaptQueue  []string
	Synthesized bool
	// Answers are the user's answers so far, which every prompt carries.
	Answers []Answer
	// Usage is the tokens of the executions completed so far.
	Usage wsproto.Usage
}

// ResumeTask is one task as it stood. Status is a wsproto task status:
//   - completed, failed, skipped and cancelled tasks keep their outcome and
//     are not run again; a completed one's Result feeds its dependents;
//   - pending tasks wait for their dependencies as usual;
//   - running and retrying tasks start again at once, as a new execution
//     (Attempt+1) with a fresh retry budget; a running one with a Journal
//     goes on from its last journaled round (see Journal);
//   - a task with Deciding set gave up and waits for its decision:
//     Events.Decide is called for it again (Status is failed).
//
// Attempt is the executions made so far, Error the failed task's
// (failure.Public) error, Todo its todo list, whose version goes on.
//
// Journal is a running task's rounds so far, in order from round 1, the
// last perhaps not complete (Round.Results short of its calls, or a call
// to retry): the new execution replays them and goes on from there.
type ResumeTask struct {
	wsproto.TaskState
	Deciding bool
	Journal  []Round
}

// NewResumed prepares a run that continues from where another left it:
// Execute starts the tasks that were running, asks again for the decisions
// that were open and goes on from there. The task list must be one a run
// could have made: ids unique, every dependency in the list.
func NewResumed(from Resume, model Model, events Events, opts Options) *Run {
	r := New(nil, model, events, opts)
	r.resume = &from
	r.answers = slices.Clone(from.Answers)
	return r
}

// restore builds the scheduler's state from r.resume, on Execute's
// goroutine, and starts what was running.
func (s *scheduler) restore(ctx context.Context, from *Resume) {
	var restart, ask []int
	for _, t := range from.Tasks {
		i := len(s.tasks)
		s.add(t.Task)
		s.attempts[i] = t.Attempt
		if t.Todo != nil {
			s.todos[i].version = t.Todo.Version
			s.todos[i].items = slices.Clone(t.Todo.Items)
		}
		switch {
		case t.Deciding:
			s.status[i] = deciding
			s.errs[t.ID] = t.Error
			ask = append(ask, i)
		case t.Status == wsproto.TaskRunning || t.Status == wsproto.TaskRetrying:
			// Not pending while the links are rebuilt: it neither waits
			// nor is skipped; it starts below.
			s.status[i] = wsproto.TaskRunning
			s.journals[i] = t.Journal
			restart = append(restart, i)
		case t.Status == wsproto.TaskCompleted:
			s.status[i] = wsproto.TaskCompleted
			s.results[t.ID] = t.Result
		case t.Status == wsproto.TaskFailed:
			s.status[i] = wsproto.TaskFailed
			s.errs[t.ID] = t.Error
		case t.Status == wsproto.TaskSkipped, t.Status == wsproto.TaskCancelled:
			s.status[i] = t.Status
		}
	}
	s.retired = slices.Clone(from.Retired)
	s.version = max(from.Version, 1)
	s.decisions = from.Decisions
	s.usage = from.Usage
	if from.Synthesized {
		s.synthesize()
	} else if s.opts.Adaptive {
		for _, id := range from.AdaptQueue {
			if i, ok := s.index[id]; ok {
				s.adaptQueue = append(s.adaptQueue, i)
			}
		}
	}
	s.relink()
	for _, i := range restart {
		// A task whose dependency was restarted while it ran waits for it
		// (finish makes it ready), as it would have on its next start.
		s.status[i] = wsproto.TaskPending
		if ctx.Err() == nil && s.waiting[i] == 0 {
			s.start(ctx, i)
		} else {
			s.journals[i] = nil // its dependency's result will change: its conversation is stale
		}
	}
	for _, i := range ask {
		if ctx.Err() != nil {
			s.status[i] = wsproto.TaskFailed
			continue
		}
		s.askDecision(ctx, i, errors.New(s.errs[s.tasks[i].ID]))
	}
}
