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
// Execute; CancelTask and RestartTask may be called from any goroutine
// while it runs.
type Run struct {
	initial []wsproto.Task
	resume  *Resume // where a restored run starts (NewResumed); nil for New
	model   Model
	events  Events
	opts    Options
	// ownCalls says whether opts.Loop.Calls is the Run's own, which
	// Execute waits on.
	ownCalls bool

	calls chan func(*scheduler) // run on Execute's goroutine
	done  chan struct{}         // closed when Execute returns

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

// New prepares a run of a task list that has passed wsproto.ValidateTasks.
func New(tasks []wsproto.Task, model Model, events Events, opts Options) *Run {
	ownCalls := opts.Loop.Calls == nil
	opts.withDefaults()
	return &Run{
		ownCalls: ownCalls,
		initial:  tasks,
		model:    model,
		events:   events,
		opts:     opts,
		calls:    make(chan func(*scheduler)),
		done:     make(chan struct{}),
	}
}

// Internal task states besides the wsproto ones.
const (
	deciding = "deciding" // gave up; waiting for Decide
	removed  = "removed"  // taken out of the plan by an adjustment; kept so its id stays taken
)

// outcome is what a task's goroutine hands back to the scheduler.
type outcome struct {
	index   int
	attempt int    // last execution number used
	result  Result // when err == nil
	took    time.Duration
	retried bool  // completed after at least one retry
	err     error // nil: completed; otherwise why it stopped
	gaveUp  bool  // out of retries: ask for a decision
}

type decided struct {
	index    int
	gen      int // the task's generation when the question was asked
	decision Decision
}

var errTaskCancelled = errors.New("task cancelled by the user")

// scheduler is the state Execute's goroutine owns. The per-task slices
// are indexed by a task's position, which never changes: an adjustment
// appends tasks and marks removed ones, so a position handed to a task's
// goroutine stays valid.
type scheduler struct {
	*Run
	tasks    []wsproto.Task
	status   []string
	attempts []int                     // executions so far per task
	waiting  []int                     // unmet dependencies per task
	children [][]int                   // dependents per task
	gen      []int                     // bumped when a task's open question is withdrawn
	index    map[string]int            // task id → position
	stops    []context.CancelCauseFunc // per running or deciding task
	ready    []int                     // may hold stale entries: checked when popped
	busy     int                       // task goroutines and Decide goroutines alive
	running  int                       // tasks holding a parallel slot
	stopping bool                      // ctx is done: nothing new starts
	results  map[string]string
	errs     map[string]string
	usage    wsproto.Usage
	outcomes chan outcome
	answers  chan decided

	// The decide step of an adaptive run (§11): completed tasks waiting
	// for their decision, in order; whether one is being made (no task
	// starts meanwhile); how many were made; whether one said synthesize
	// (no more are made). version is the plan's, retired the ids of
	// removed tasks.
	adaptQueue  []int
	adapting    bool
	decisions   int
	synthesized bool
	adaptations chan Adaptation
	version     int
	retired     []string

	// The agent loop's state. todos[i] is task i's todo list, touched
	// only by the task's goroutine (handed over through the channels that
	// start and end it). specs are the offered tools' specs. view is the
	// task list with statuses as of the scheduler's last step, for the
	// prompts of rounds running meanwhile.
	todos []*todoList
	specs []tool.Spec
	view  atomic.Pointer[[]TaskStatus]

	// journals[i] is what a resumed run's task i replays when it starts
	// (ResumeTask.Journal), until it does.
	journals [][]Round

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
	if r.ownCalls {
		defer r.opts.Loop.Calls.Wait(context.Background())
	}
	n := len(r.initial)
	s := &scheduler{
		Run:      r,
		index:    make(map[string]int, n),
		results:  make(map[string]string, n),
		errs:     make(map[string]string),
		outcomes: make(chan outcome),
		answers:  make(chan decided),
		slots:    make(chan slotRequest),

		adaptations: make(chan Adaptation),
		version:     1,
	}
	for _, t := range r.opts.Loop.Tools.All() {
		s.specs = append(s.specs, t.Spec())
	}
	if r.resume != nil {
		s.restore(ctx, r.resume)
	} else {
		for _, t := range r.initial {
			s.add(t)
		}
		s.relink()
	}

	for {
		if !s.stopping && ctx.Err() != nil {
			s.stopping = true
		}
		for len(s.resumes) > 0 && s.running < r.opts.MaxParallel {
			req := s.resumes[0]
			s.resumes = s.resumes[1:]
			s.running++
			s.holding[req.index] = true
			req.grant <- struct{}{}
		}
		if !s.stopping && !s.adapting && len(s.adaptQueue) > 0 {
			s.adapt(ctx)
		}
		for !s.stopping && !s.adapting && s.running < r.opts.MaxParallel && len(s.ready) > 0 {
			i := s.ready[0]
			s.ready = s.ready[1:]
			// Not skipped, cancelled or removed while it waited, and not
			// waiting again for a restarted dependency.
			if s.status[i] == wsproto.TaskPending && s.waiting[i] == 0 {
				s.start(ctx, i)
			}
		}
		view := s.snapshot()
		s.view.Store(&view)
		if s.busy == 0 && (s.stopping || len(s.ready) == 0) {
			break
		}
		var stop <-chan struct{}
		if !s.stopping {
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
			if a.gen == s.gen[a.index] { // not withdrawn by a cancel or a restart
				s.stops[a.index] = nil
				s.decide(ctx, a)
			}
		case a := <-s.adaptations:
			s.adapted(a)
		case call := <-r.calls:
			call(s)
		case <-stop:
			s.stopping = true
		}
	}
	return s.report()
}

// add appends a task to the scheduler's state, pending. The caller
// relinks.
func (s *scheduler) add(t wsproto.Task) {
	s.index[t.ID] = len(s.tasks)
	s.tasks = append(s.tasks, t)
	s.status = append(s.status, wsproto.TaskPending)
	s.attempts = append(s.attempts, 0)
	s.waiting = append(s.waiting, 0)
	s.children = append(s.children, nil)
	s.gen = append(s.gen, 0)
	s.stops = append(s.stops, nil)
	s.todos = append(s.todos, newTodoList(s.opts.Loop.TodoCompleteAfter, s.opts.Loop.TodoBlockAfter))
	s.holding = append(s.holding, false)
	s.journals = append(s.journals, nil)
}

// relink rebuilds the dependency links and counts after the task list or
// statuses changed (at the start, after an adjustment or a restart): a
// pending task whose dependency failed, was skipped or was cancelled is
// skipped; one whose dependencies have all completed is ready.
func (s *scheduler) relink() {
	for i := range s.children {
		s.children[i] = s.children[i][:0]
	}
	for i, t := range s.tasks {
		if s.status[i] == removed {
			continue
		}
		s.waiting[i] = 0
		for _, d := range t.DependsOn {
			p := s.index[d]
			s.children[p] = append(s.children[p], i)
			if s.status[p] != wsproto.TaskCompleted {
				s.waiting[i]++
			}
		}
	}
	for i := range s.tasks {
		if s.status[i] != wsproto.TaskPending {
			continue
		}
		if p, ok := s.blockedBy(i, nil); ok {
			s.status[i] = wsproto.TaskSkipped
			s.events.Skipped(s.tasks[i].ID, wsproto.ReasonDependencyFailed, s.tasks[p].ID)
			s.skipDependents(i)
		} else if s.waiting[i] == 0 && !slices.Contains(s.ready, i) {
			s.ready = append(s.ready, i)
		}
	}
}

// blockedBy returns a dependency of task i that can no longer complete —
// failed, skipped or cancelled — unless it is in also (which will run
// again).
func (s *scheduler) blockedBy(i int, also map[int]bool) (int, bool) {
	for _, d := range s.tasks[i].DependsOn {
		p := s.index[d]
		switch s.status[p] {
		case wsproto.TaskFailed, wsproto.TaskSkipped, wsproto.TaskCancelled:
			if !also[p] {
				return p, true
			}
		}
	}
	return 0, false
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
		History:      s.opts.History,
		PlanSummary:  s.opts.PlanSummary,
		Chat:         s.opts.Chat,
		Task:         t,
		Tasks:        s.snapshot(),
		Dependencies: make(map[string]string, len(t.DependsOn)),
	}
	for _, d := range t.DependsOn {
		in.Dependencies[d] = s.results[d]
	}
	first := s.attempts[i] + 1
	x := execution{index: i, id: t.ID, todo: s.todos[i], journal: s.journals[i]}
	s.journals[i] = nil // its first execution's only
	// Reported here rather than on the task's goroutine, so that the start
	// comes before any completion the scheduler handles after it (and so
	// before that completion's decision, §11).
	s.events.Started(t.ID, first)
	go func() {
		defer stop(nil)
		s.outcomes <- s.execute(tctx, x, in, first)
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

// execution is what a task's goroutine knows of its task: it must not
// read the scheduler's slices, which an adjustment may grow meanwhile.
type execution struct {
	index int
	id    string
	todo  *todoList // the task's, handed over for the goroutine's life
	// journal is the rounds a resumed task's first execution replays
	// (ResumeTask.Journal); nil for any other.
	journal []Round
}

// execute runs one retry budget of a task, starting at execution number
// attempt. It runs on the task's goroutine.
func (s *scheduler) execute(ctx context.Context, x execution, in Input, attempt int) outcome {
	i, id := x.index, x.id
	delays := s.opts.Retry.Backoff()
	for retry := 0; ; retry++ {
		in.Attempt = attempt
		if retry > 0 { // the first was reported by start
			s.events.Started(id, attempt)
		}
		began := time.Now()
		result, err := s.once(ctx, x, in)
		x.journal = nil // a retry starts from scratch
		if ctx.Err() != nil {
			return outcome{index: i, attempt: attempt, err: context.Cause(ctx)}
		}
		if err == nil {
			// finish reports it, in the step that also queues the
			// decide step: no task starts in between.
			return outcome{index: i, attempt: attempt, result: result, took: time.Since(began), retried: retry > 0}
		}
		class := failure.Classify(err)
		s.events.Failed(id, attempt, class, err)
		if !class.Recoverable || retry >= s.opts.Retry.MaxRetries {
			s.events.GaveUp(id, retry+1, err)
			return outcome{index: i, attempt: attempt, err: err, gaveUp: true}
		}
		delay := delays.Next(class)
		s.events.Retrying(id, retry+1, s.opts.Retry.MaxRetries, class.Type, delay)
		if failure.Wait(ctx, delay) != nil {
			return outcome{index: i, attempt: attempt, err: context.Cause(ctx)}
		}
		attempt++
	}
}

// once is one execution, bounded by the task timeout.
func (s *scheduler) once(ctx context.Context, x execution, in Input) (Result, error) {
	ectx := ctx
	if s.opts.TaskTimeout > 0 {
		var cancel context.CancelFunc
		ectx, cancel = context.WithTimeout(ctx, s.opts.TaskTimeout)
		defer cancel()
	}
	last := 0.0
	// A panic in the model or the agent loop is this execution's failure
	// (permanent), not the process's end.
	result, err := failure.Protect(func() (Result, error) {
		return s.agent(ectx, x, in, func(f float64, msg string) {
			if f != f { // NaN
				f = last
			}
			f = min(max(f, last), 1) // the contract: in [0,1], non-decreasing
			last = f
			s.events.Progress(in.Task.ID, in.Attempt, f, msg)
		})
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
		s.events.Completed(id, o.attempt, o.result, o.took)
		if o.retried {
			s.events.Recovered(id, o.attempt)
		}
		s.status[i] = wsproto.TaskCompleted
		s.results[id] = o.result.Text
		s.usage = s.usage.Add(o.result.Usage)
		delete(s.errs, id)
		for _, c := range s.children[i] {
			if s.waiting[c]--; s.waiting[c] == 0 && s.status[c] == wsproto.TaskPending {
				s.ready = append(s.ready, c)
			}
		}
		if s.opts.Adaptive && !s.synthesized {
			s.adaptQueue = append(s.adaptQueue, i)
		}
	case o.gaveUp && ctx.Err() == nil:
		s.status[i] = deciding
		s.errs[id] = failure.Public(o.err)
		s.askDecision(ctx, i, o.err)
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

// askDecision asks, on a goroutine of its own, what to do with task i,
// which gave up (its status is deciding).
func (s *scheduler) askDecision(ctx context.Context, i int, err error) {
	id := s.tasks[i].ID
	s.busy++
	dctx, stop := context.WithCancelCause(ctx)
	s.stops[i] = stop
	gen := s.gen[i]
	go func() {
		defer stop(nil)
		s.answers <- decided{index: i, gen: gen, decision: s.events.Decide(dctx, id, err)}
	}()
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
			s.events.Skipped(s.tasks[c].ID, wsproto.ReasonDependencyFailed, s.tasks[p].ID)
			queue = append(queue, c)
		}
	}
}

// snapshot is the task list with statuses as a client sees them: removed
// tasks left out, a task waiting for its decision failed.
func (s *scheduler) snapshot() []TaskStatus {
	out := make([]TaskStatus, 0, len(s.tasks))
	for i, t := range s.tasks {
		if st, ok := s.visibleStatus(i); ok {
			out = append(out, TaskStatus{Task: t, Status: st})
		}
	}
	return out
}

// visibleStatus is task i's status as clients and the decide step see it:
// a task waiting for its decision counts as failed; a removed one is not
// there (ok false).
func (s *scheduler) visibleStatus(i int) (status string, ok bool) {
	switch st := s.status[i]; st {
	case removed:
		return "", false
	case deciding:
		return wsproto.TaskFailed, true
	default:
		return st, true
	}
}

func (s *scheduler) report() Report {
	return Report{Tasks: s.snapshot(), Results: s.results, Errors: s.errs, Usage: s.usage}
}
