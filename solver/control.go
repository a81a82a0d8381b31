package solver

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-run/baton/wsproto"
)

// Errors of the commands a client sends while a run is solving. The
// errors returned wrap them with the task and the reason.
var (
	// ErrUnknownTask: the run has no such task (or, for CancelTask, it
	// has already finished).
	ErrUnknownTask = errors.New("solver: no such task")
	// ErrNotSolving: Execute has returned, or the run is stopping.
	ErrNotSolving = errors.New("solver: the run is not solving")
	// ErrTaskBusy: the task cannot be restarted as it stands (running,
	// retrying, not started yet, or waiting on a dependency that failed).
	ErrTaskBusy = errors.New("solver: the task cannot be restarted now")
)

// errOver is do's answer once Execute has returned.
var errOver = errors.New("solver: the run is over")

// do runs fn on Execute's goroutine, which owns the scheduling state, and
// waits for it. errOver when Execute has returned.
func (r *Run) do(ctx context.Context, fn func(s *scheduler)) error {
	ran := make(chan struct{})
	select {
	case r.calls <- func(s *scheduler) { defer close(ran); fn(s) }:
	case <-r.done:
		return errOver
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ran // the scheduler runs a call as soon as it takes it
	return nil
}

// CancelTask cancels one pending, running, retrying or undecided task; its
// dependents are skipped. ErrUnknownTask if there is no such task, it has
// already finished, or the run is over.
func (r *Run) CancelTask(ctx context.Context, taskID string) error {
	var err error
	switch derr := r.do(ctx, func(s *scheduler) { err = s.cancel(taskID) }); {
	case errors.Is(derr, errOver):
		return fmt.Errorf("cancel %q: %w", taskID, ErrUnknownTask)
	case derr != nil:
		return fmt.Errorf("cancel %q: %w", taskID, derr)
	}
	return err
}

// RestartTask runs a completed, failed, skipped or cancelled task again
// with a fresh retry budget (execution numbers go on counting), and with it
// every task downstream of it that is not running and can run again:
// Restarted is reported for each, in that order, before RestartTask
// returns. The errors wrap ErrUnknownTask, ErrNotSolving or ErrTaskBusy.
func (r *Run) RestartTask(ctx context.Context, taskID string) error {
	var err error
	switch derr := r.do(ctx, func(s *scheduler) { err = s.restart(taskID) }); {
	case errors.Is(derr, errOver):
		return fmt.Errorf("restart %q: %w", taskID, ErrNotSolving)
	case derr != nil:
		return fmt.Errorf("restart %q: %w", taskID, derr)
	}
	return err
}

// cancel handles CancelTask on the scheduler's goroutine.
func (s *scheduler) cancel(taskID string) error {
	i, ok := s.index[taskID]
	if !ok {
		return fmt.Errorf("cancel %q: %w", taskID, ErrUnknownTask)
	}
	switch s.status[i] {
	case wsproto.TaskRunning:
		s.stops[i](errTaskCancelled) // finish reports it when the goroutine returns
		return nil
	case deciding:
		s.stops[i](errTaskCancelled) // closes the question
		s.gen[i]++                   // and its answer is ignored
		fallthrough
	case wsproto.TaskPending:
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(taskID, wsproto.ReasonUserCancelTask)
		s.skipDependents(i)
		return nil
	}
	return fmt.Errorf("cancel %q: it has finished: %w", taskID, ErrUnknownTask)
}

// restartable reports whether a task in this state may run again.
func restartable(status string) bool {
	switch status {
	case wsproto.TaskCompleted, wsproto.TaskFailed, wsproto.TaskSkipped, wsproto.TaskCancelled, deciding:
		return true
	}
	return false
}

// restart handles RestartTask on the scheduler's goroutine.
func (s *scheduler) restart(taskID string) error {
	i, ok := s.index[taskID]
	switch {
	case !ok || s.status[i] == removed:
		return fmt.Errorf("restart %q: %w", taskID, ErrUnknownTask)
	case s.stopping:
		return fmt.Errorf("restart %q: %w", taskID, ErrNotSolving)
	case s.status[i] == wsproto.TaskRunning:
		return fmt.Errorf("restart %q: it is running or retrying: %w", taskID, ErrTaskBusy)
	case !restartable(s.status[i]):
		return fmt.Errorf("restart %q: it has not run yet: %w", taskID, ErrTaskBusy)
	}
	if p, blocked := s.blockedBy(i, nil); blocked {
		return fmt.Errorf("restart %q: it depends on %q, which is %s; restart that first: %w",
			taskID, s.tasks[p].ID, s.status[p], ErrTaskBusy)
	}
	for _, k := range s.restartSet(i) {
		if s.status[k] == deciding {
			s.stops[k](errRestarted) // closes the question; its answer is ignored
		}
		s.gen[k]++
		s.status[k] = wsproto.TaskPending
		delete(s.results, s.tasks[k].ID)
		delete(s.errs, s.tasks[k].ID)
		s.events.Restarted(s.tasks[k].ID)
	}
	s.relink()
	return nil
}

var errRestarted = errors.New("task restarted by the user")

// restartSet is task i and the tasks downstream of it that run again with
// it: those that are not running or pending and whose every dependency is
// completed, will run, or runs again with them. i comes first, then the
// others breadth first.
func (s *scheduler) restartSet(i int) []int {
	in := map[int]bool{i: true}
	var downstream []int
	seen := map[int]bool{i: true}
	for queue := []int{i}; len(queue) > 0; queue = queue[1:] {
		for _, c := range s.children[queue[0]] {
			if seen[c] {
				continue
			}
			seen[c] = true
			queue = append(queue, c)
			if restartable(s.status[c]) {
				downstream = append(downstream, c)
				in[c] = true
			}
		}
	}
	// Leave out, until nothing changes, those that another failed task
	// would hold back anyway.
	for changed := true; changed; {
		changed = false
		for _, c := range downstream {
			if _, blocked := s.blockedBy(c, in); in[c] && blocked {
				in[c], changed = false, true
			}
		}
	}
	out := []int{i}
	for _, c := range downstream {
		if in[c] {
			out = append(out, c)
		}
	}
	return out
}
