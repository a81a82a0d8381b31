package solver

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// Run is one execution of a task list. Create it with New, start it with
// Execute; CancelTask may be called from any goroutine while it runs.
type Run struct {
	tasks  []wsproto.Task
	model  Model
	events Events
	opts   Options

	cancels chan cancelRequest
	done    chan struct{} // closed when Execute returns
}

type cancelRequest struct {
	taskID string
	reply  chan error
}

// New prepares a run of a task list that has passed wsproto.ValidateTasks.
func New(tasks []wsproto.Task, model Model, events Events, opts Options) *Run {
	if opts.MaxParallel <= 0 {
		opts.MaxParallel = 4
	}
	return &Run{
		tasks:   tasks,
		model:   model,
		events:  events,
		opts:    opts,
		cancels: make(chan cancelRequest),
		done:    make(chan struct{}),
	}
}

// CancelTask cancels one pending or running task; its dependents are
// skipped. ErrUnknownTask if there is no such task, it has already
// finished, or the run is over.
func (r *Run) CancelTask(ctx context.Context, taskID string) error {
	req := cancelRequest{taskID: taskID, reply: make(chan error, 1)}
	select {
	case r.cancels <- req:
		return <-req.reply
	case <-r.done:
		return ErrUnknownTask
	case <-ctx.Done():
		return ctx.Err()
	}
}

// taskResult is what a task's goroutine hands back to the scheduler.
type taskResult struct {
	index   int
	attempt int
	result  string
	err     error
	took    time.Duration
}

// scheduler is the state Execute's goroutine owns.
type scheduler struct {
	*Run
	status   []string
	waiting  []int                     // unmet dependencies per task
	children [][]int                   // dependents per task
	index    map[string]int            // task id → position
	stops    []context.CancelCauseFunc // per running task
	ready    []int
	running  int
	results  map[string]string
	errs     map[string]string
	finished chan taskResult
}

var errTaskCancelled = fmt.Errorf("task cancelled by the user")

// Execute runs the tasks until every one is terminal or ctx is done, and
// waits for every task goroutine it started before returning. When ctx is
// done, running tasks end as cancelled (reason pipeline_cancelled) and
// tasks that never started stay pending.
func (r *Run) Execute(ctx context.Context) Report {
	defer close(r.done)
	n := len(r.tasks)
	s := &scheduler{
		Run:      r,
		status:   make([]string, n),
		waiting:  make([]int, n),
		children: make([][]int, n),
		index:    make(map[string]int, n),
		stops:    make([]context.CancelCauseFunc, n),
		results:  make(map[string]string, n),
		errs:     make(map[string]string),
		finished: make(chan taskResult, n),
	}
	for i, t := range r.tasks {
		s.index[t.ID] = i
		s.status[i] = wsproto.TaskPending
	}
	for i, t := range r.tasks {
		s.waiting[i] = len(t.DependsOn)
		for _, d := range t.DependsOn {
			p := s.index[d]
			s.children[p] = append(s.children[p], i)
		}
		if s.waiting[i] == 0 {
			s.ready = append(s.ready, i)
		}
	}

	stopping := false
	for {
		if !stopping && ctx.Err() != nil {
			stopping = true
		}
		for !stopping && s.running < r.opts.MaxParallel && len(s.ready) > 0 {
			i := s.ready[0]
			s.ready = s.ready[1:]
			if s.status[i] == wsproto.TaskPending { // not skipped while it waited
				s.start(ctx, i, 1)
			}
		}
		if s.running == 0 && (stopping || len(s.ready) == 0) {
			break
		}
		var stop <-chan struct{}
		if !stopping {
			stop = ctx.Done()
		}
		select {
		case res := <-s.finished:
			s.running--
			s.stops[res.index] = nil
			s.finish(ctx, res)
		case req := <-r.cancels:
			req.reply <- s.cancel(req.taskID)
		case <-stop:
			stopping = true
		}
	}
	return s.report()
}

// start launches attempt of task i in its own goroutine. The scheduler
// waits for every such goroutine through s.finished before Execute returns.
func (s *scheduler) start(ctx context.Context, i, attempt int) {
	t := s.tasks[i]
	s.status[i] = wsproto.TaskRunning
	s.running++
	tctx, stop := context.WithCancelCause(ctx)
	s.stops[i] = stop
	in := Input{
		Request:      s.opts.Request,
		PlanSummary:  s.opts.PlanSummary,
		Task:         t,
		Tasks:        s.snapshot(),
		Dependencies: make(map[string]string, len(t.DependsOn)),
		Attempt:      attempt,
	}
	for _, d := range t.DependsOn {
		in.Dependencies[d] = s.results[d]
	}
	s.events.Started(t.ID, attempt)
	go func() {
		defer stop(nil)
		began := time.Now()
		last := 0.0
		result, err := s.model.Solve(tctx, in, func(f float64, msg string) {
			if f != f { // NaN
				f = last
			}
			f = min(max(f, last), 1) // the contract: in [0,1], non-decreasing
			last = f
			s.events.Progress(t.ID, attempt, f, msg)
		})
		if err == nil && tctx.Err() != nil {
			err = context.Cause(tctx)
		}
		s.finished <- taskResult{index: i, attempt: attempt, result: result, err: err, took: time.Since(began)}
	}()
}

// finish records a task's end and releases or skips its dependents.
func (s *scheduler) finish(ctx context.Context, res taskResult) {
	i, id := res.index, s.tasks[res.index].ID
	switch {
	case res.err == nil:
		s.status[i] = wsproto.TaskCompleted
		s.results[id] = res.result
		s.events.Completed(id, res.attempt, res.result, res.took)
		for _, c := range s.children[i] {
			if s.waiting[c]--; s.waiting[c] == 0 && s.status[c] == wsproto.TaskPending {
				s.ready = append(s.ready, c)
			}
		}
		return
	case ctx.Err() != nil:
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(id, wsproto.ReasonPipelineCancelled)
	case res.err == errTaskCancelled:
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(id, wsproto.ReasonUserCancelTask)
	default:
		s.status[i] = wsproto.TaskFailed
		s.errs[id] = res.err.Error()
		s.events.Failed(id, res.attempt, res.err)
	}
	s.skipDependents(i)
}

// cancel handles CancelTask on the scheduler's goroutine.
func (s *scheduler) cancel(taskID string) error {
	i, ok := s.index[taskID]
	if !ok {
		return ErrUnknownTask
	}
	switch s.status[i] {
	case wsproto.TaskRunning:
		s.stops[i](errTaskCancelled) // finish reports it when the goroutine returns
		return nil
	case wsproto.TaskPending:
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(taskID, wsproto.ReasonUserCancelTask)
		for k, r := range s.ready {
			if r == i {
				s.ready = append(s.ready[:k], s.ready[k+1:]...)
				break
			}
		}
		s.skipDependents(i)
		return nil
	}
	return ErrUnknownTask
}

// skipDependents marks every task downstream of i skipped, breadth first,
// naming the task that failed first on each path as the dependency.
func (s *scheduler) skipDependents(i int) {
	queue := []int{i}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range s.children[p] {
			if s.status[c] != wsproto.TaskPending {
				continue
			}
			s.status[c] = wsproto.TaskSkipped
			s.events.Skipped(s.tasks[c].ID, s.tasks[p].ID)
			queue = append(queue, c)
		}
	}
}

func (s *scheduler) snapshot() []TaskStatus {
	out := make([]TaskStatus, len(s.tasks))
	for i, t := range s.tasks {
		out[i] = TaskStatus{Task: t, Status: s.status[i]}
	}
	return out
}

func (s *scheduler) report() Report {
	return Report{Tasks: s.snapshot(), Results: s.results, Errors: s.errs}
}
