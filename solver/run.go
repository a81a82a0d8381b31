package solver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/tool"
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

	// answersMu guards answers: what the user answered during the run,
	// which every later prompt carries.
	answersMu sync.Mutex
	answers   []Answer
}

// AddAnswer records an answer of the user's; every model turn that begins
// after it carries it. Safe for concurrent use.
func (r *Run) AddAnswer(a Answer) {
	r.answersMu.Lock()
	defer r.answersMu.Unlock()
	r.answers = append(r.answers, a)
}

// Answers returns the user's answers so far, oldest first.
func (r *Run) Answers() []Answer {
	r.answersMu.Lock()
	defer r.answersMu.Unlock()
	return slices.Clone(r.answers)
}

type cancelRequest struct {
	taskID string
	reply  chan error
}

// New prepares a run of a task list that has passed wsproto.ValidateTasks.
func New(tasks []wsproto.Task, model Model, events Events, opts Options) *Run {
	opts.withDefaults()
	return &Run{
		tasks:   tasks,
		model:   model,
		events:  events,
		opts:    opts,
		cancels: make(chan cancelRequest),
		done:    make(chan struct{}),
	}
}

// CancelTask cancels one pending, running, retrying or undecided task; its
// dependents are skipped. ErrUnknownTask if there is no such task, it has
// already finished, or the run is over.
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

// Internal task states besides the wsproto ones.
const deciding = "deciding" // gave up; waiting for Decide

// outcome is what a task's goroutine hands back to the scheduler.
type outcome struct {
	index   int
	attempt int    // last execution number used
	result  Result // when err == nil
	err     error  // nil: completed; otherwise why it stopped
	gaveUp  bool   // out of retries: ask for a decision
}

type decided struct {
	index    int
	decision Decision
}

var errTaskCancelled = errors.New("task cancelled by the user")

// scheduler is the state Execute's goroutine owns.
type scheduler struct {
	*Run
	status   []string
	attempts []int                     // executions so far per task
	waiting  []int                     // unmet dependencies per task
	children [][]int                   // dependents per task
	index    map[string]int            // task id → position
	stops    []context.CancelCauseFunc // per running or deciding task
	ready    []int
	busy     int // task goroutines and Decide goroutines alive
	running  int // tasks holding a parallel slot
	results  map[string]string
	errs     map[string]string
	usage    wsproto.Usage
	outcomes chan outcome
	answers  chan decided

	// The agent loop's state. todos[i] is task i's todo list, touched
	// only by the task's goroutine (handed over through the channels that
	// start and end it). specs are the offered tools' specs. view is the
	// task list with statuses as of the scheduler's last step, for the
	// prompts of rounds running meanwhile.
	todos []*todoList
	specs []tool.Spec
	view  atomic.Pointer[[]TaskStatus]

	// A task waiting on the user gives its parallel slot back (slots,
	// release) and asks for it again when the answer is in; resumes are the
	// tasks waiting for a slot again, served before new starts. holding[i]
	// says whether task i holds a slot now.
	slots   chan slotRequest
	resumes []slotRequest
	holding []bool
}

type slotRequest struct {
	index   int
	release bool
	grant   chan struct{} // cap 1; when !release
}

// Execute runs the tasks until every one is terminal or ctx is done, and
// waits for every goroutine it started before returning. When ctx is done,
// running tasks end as cancelled (reason pipeline_cancelled) and tasks that
// never started stay pending.
func (r *Run) Execute(ctx context.Context) Report {
	defer close(r.done)
	n := len(r.tasks)
	s := &scheduler{
		Run:      r,
		status:   make([]string, n),
		attempts: make([]int, n),
		waiting:  make([]int, n),
		children: make([][]int, n),
		index:    make(map[string]int, n),
		stops:    make([]context.CancelCauseFunc, n),
		results:  make(map[string]string, n),
		errs:     make(map[string]string),
		outcomes: make(chan outcome, n),
		answers:  make(chan decided, n),
		todos:    make([]*todoList, n),
		slots:    make(chan slotRequest),
		holding:  make([]bool, n),
	}
	for i := range s.todos {
		s.todos[i] = newTodoList(r.opts.Loop.TodoCompleteAfter, r.opts.Loop.TodoBlockAfter)
	}
	for _, t := range r.opts.Loop.Tools.All() {
		s.specs = append(s.specs, t.Spec())
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
		for len(s.resumes) > 0 && s.running < r.opts.MaxParallel {
			req := s.resumes[0]
			s.resumes = s.resumes[1:]
			s.running++
			s.holding[req.index] = true
			req.grant <- struct{}{}
		}
		for !stopping && s.running < r.opts.MaxParallel && len(s.ready) > 0 {
			i := s.ready[0]
			s.ready = s.ready[1:]
			if s.status[i] == wsproto.TaskPending { // not skipped or cancelled while it waited
				s.start(ctx, i)
			}
		}
		view := s.snapshot()
		s.view.Store(&view)
		if s.busy == 0 && (stopping || len(s.ready) == 0) {
			break
		}
		var stop <-chan struct{}
		if !stopping {
			stop = ctx.Done()
		}
		select {
		case o := <-s.outcomes:
			s.busy--
			s.release(o.index)
			s.resumes = slices.DeleteFunc(s.resumes, func(q slotRequest) bool { return q.index == o.index })
			s.stops[o.index] = nil
			s.finish(ctx, o)
		case req := <-s.slots:
			if req.release {
				s.release(req.index)
			} else {
				s.resumes = append(s.resumes, req)
			}
		case a := <-s.answers:
			s.busy--
			s.stops[a.index] = nil
			s.decide(ctx, a)
		case req := <-r.cancels:
			req.reply <- s.cancel(req.taskID)
		case <-stop:
			stopping = true
		}
	}
	return s.report()
}

// start launches task i in a goroutine of its own, which runs executions
// and retries until the task completes, gives up or is cancelled.
func (s *scheduler) start(ctx context.Context, i int) {
	t := s.tasks[i]
	s.status[i] = wsproto.TaskRunning
	s.busy++
	s.running++
	s.holding[i] = true
	tctx, stop := context.WithCancelCause(ctx)
	s.stops[i] = stop
	in := Input{
		Request:      s.opts.Request,
		PlanSummary:  s.opts.PlanSummary,
		Task:         t,
		Tasks:        s.snapshot(),
		Dependencies: make(map[string]string, len(t.DependsOn)),
	}
	for _, d := range t.DependsOn {
		in.Dependencies[d] = s.results[d]
	}
	first := s.attempts[i] + 1
	go func() {
		defer stop(nil)
		s.outcomes <- s.execute(tctx, i, in, first)
	}()
}

// release gives task i's parallel slot back, if it holds one.
func (s *scheduler) release(i int) {
	if s.holding[i] {
		s.holding[i] = false
		s.running--
	}
}

// waitingOnUser runs wait, which waits for the user, with task i's
// parallel slot given back meanwhile, and takes a slot again before it
// returns — unless ctx is done, when the task is ending anyway. It runs on
// the task's goroutine.
func (s *scheduler) waitingOnUser(ctx context.Context, i int, wait func()) {
	select {
	case s.slots <- slotRequest{index: i, release: true}:
	case <-ctx.Done():
		wait()
		return
	}
	wait()
	req := slotRequest{index: i, grant: make(chan struct{}, 1)}
	select {
	case s.slots <- req:
	case <-ctx.Done():
		return
	}
	select {
	case <-req.grant:
	case <-ctx.Done():
	}
}

// execute runs one retry budget of a task, starting at execution number
// attempt. It runs on the task's goroutine.
func (s *scheduler) execute(ctx context.Context, i int, in Input, attempt int) outcome {
	id := s.tasks[i].ID
	delays := s.opts.Retry.Backoff()
	for retry := 0; ; retry++ {
		in.Attempt = attempt
		s.events.Started(id, attempt)
		began := time.Now()
		result, err := s.once(ctx, in)
		if ctx.Err() != nil {
			return outcome{index: i, attempt: attempt, err: context.Cause(ctx)}
		}
		if err == nil {
			s.events.Completed(id, attempt, result, time.Since(began))
			if retry > 0 {
				s.events.Recovered(id, attempt)
			}
			return outcome{index: i, attempt: attempt, result: result}
		}
		class := failure.Classify(err)
		s.events.Failed(id, attempt, class, err)
		if !class.Recoverable || retry >= s.opts.Retry.MaxAttempts {
			s.events.GaveUp(id, retry+1, err)
			return outcome{index: i, attempt: attempt, err: err, gaveUp: true}
		}
		delay := delays.Next(class)
		s.events.Retrying(id, retry+1, s.opts.Retry.MaxAttempts, delay)
		if failure.Wait(ctx, delay) != nil {
			return outcome{index: i, attempt: attempt, err: context.Cause(ctx)}
		}
		attempt++
	}
}

// once is one execution, bounded by the task timeout.
func (s *scheduler) once(ctx context.Context, in Input) (Result, error) {
	ectx := ctx
	if s.opts.TaskTimeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, s.opts.TaskTimeout)
		defer cancel()
	}
	last := 0.0
	result, err := s.agent(ectx, in, func(f float64, msg string) {
		if f != f { // NaN
			f = last
		}
		f = min(max(f, last), 1) // the contract: in [0,1], non-decreasing
		last = f
		s.events.Progress(in.Task.ID, in.Attempt, f, msg)
	})
	if ctx.Err() == nil && ectx.Err() != nil {
		return Result{}, &failure.Error{Type: failure.Timeout,
			Message: fmt.Sprintf("the execution took longer than %s", s.opts.TaskTimeout)}
	}
	return result, err
}

// finish records the end of a task's goroutine.
func (s *scheduler) finish(ctx context.Context, o outcome) {
	i, id := o.index, s.tasks[o.index].ID
	s.attempts[i] = o.attempt
	switch {
	case o.err == nil:
		s.status[i] = wsproto.TaskCompleted
		s.results[id] = o.result.Text
		s.usage = s.usage.Add(o.result.Usage)
		delete(s.errs, id)
		for _, c := range s.children[i] {
			if s.waiting[c]--; s.waiting[c] == 0 && s.status[c] == wsproto.TaskPending {
				s.ready = append(s.ready, c)
			}
		}
	case o.gaveUp && ctx.Err() == nil:
		s.status[i] = deciding
		s.errs[id] = failure.Public(o.err)
		s.busy++
		dctx, stop := context.WithCancelCause(ctx)
		s.stops[i] = stop
		go func() {
			defer stop(nil)
			s.answers <- decided{index: i, decision: s.events.Decide(dctx, id, o.err)}
		}()
	case ctx.Err() != nil:
		// The whole run is stopping: its dependents stay pending rather
		// than being reported skipped.
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(id, wsproto.ReasonPipelineCancelled)
	case errors.Is(o.err, errTaskCancelled):
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(id, wsproto.ReasonUserCancelTask)
		s.skipDependents(i)
	default:
		s.status[i] = wsproto.TaskFailed
		s.errs[id] = failure.Public(o.err)
		s.skipDependents(i)
	}
}

// decide applies the answer for a task that gave up.
func (s *scheduler) decide(ctx context.Context, a decided) {
	i := a.index
	if s.status[i] != deciding {
		return // cancelled while the question was open
	}
	switch {
	case ctx.Err() != nil:
		s.status[i] = wsproto.TaskFailed
	case a.decision == Retry:
		s.status[i] = wsproto.TaskPending
		s.ready = append([]int{i}, s.ready...)
	default: // Skip, Abort (the caller cancels the run)
		s.status[i] = wsproto.TaskFailed
		s.skipDependents(i)
	}
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
	case deciding:
		s.stops[i](errTaskCancelled) // closes the question; decide ignores the answer
		fallthrough
	case wsproto.TaskPending:
		s.status[i] = wsproto.TaskCancelled
		s.events.Cancelled(taskID, wsproto.ReasonUserCancelTask)
		s.skipDependents(i)
		return nil
	}
	return ErrUnknownTask
}

// skipDependents marks every pending task downstream of i skipped, breadth
// first, naming the task it was waiting on as the dependency.
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
		st := s.status[i]
		if st == deciding {
			st = wsproto.TaskFailed
		}
		out[i] = TaskStatus{Task: t, Status: st}
	}
	return out
}

func (s *scheduler) report() Report {
	return Report{Tasks: s.snapshot(), Results: s.results, Errors: s.errs, Usage: s.usage}
}
