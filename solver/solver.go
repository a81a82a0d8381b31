package solver

import (
	"context"
	"errors"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// Model executes one task. progress reports a fraction in [0, 1]
// (non-decreasing within one call) and a short message; it must not block
// for long. Solve returns promptly with ctx's error when ctx is done.
type Model interface {
	Solve(ctx context.Context, in Input, progress func(fraction float64, message string)) (string, error)
}

// Input is what a model gets to execute one task.
type Input struct {
	Request     string
	PlanSummary string
	Task        wsproto.Task
	// Tasks is the whole task list with each task's status at the time
	// this execution starts.
	Tasks []TaskStatus
	// Dependencies holds the results of the task's dependencies by id.
	Dependencies map[string]string
	Attempt      int
}

// TaskStatus is a task and where it stands.
type TaskStatus struct {
	Task   wsproto.Task
	Status string
}

// Events receives what happens to tasks, in order for each task. Methods
// are called from the scheduler's goroutine except Progress, which is called
// from the task's own goroutine; implementations must not block for long and
// must not call back into the Run.
type Events interface {
	Started(taskID string, attempt int)
	Progress(taskID string, attempt int, fraction float64, message string)
	Completed(taskID string, attempt int, result string, took time.Duration)
	Failed(taskID string, attempt int, err error)
	Cancelled(taskID, reason string)
	Skipped(taskID, dependency string)
}

// Options tune a Run. The zero value is usable.
type Options struct {
	// MaxParallel is how many tasks may run at once. Defaults to 4.
	MaxParallel int
	// Request and PlanSummary are passed on to the model.
	Request     string
	PlanSummary string
}

// ErrUnknownTask is returned by CancelTask for a task that is not in the
// run or has already finished.
var ErrUnknownTask = errors.New("solver: no such task to cancel")

// Report is the outcome of a run: each task's final status and the results
// of those that completed.
type Report struct {
	Tasks   []TaskStatus
	Results map[string]string
	Errors  map[string]string
}

// Count returns how many tasks ended in the given status.
func (r Report) Count(status string) int {
	n := 0
	for _, t := range r.Tasks {
		if t.Status == status {
			n++
		}
	}
	return n
}
