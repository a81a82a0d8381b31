package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// run is one pipeline execution of a session. Its goroutine (execute) is
// the only emitter of its events besides the solver's task goroutines,
// which it waits for.
type run struct {
	id       string
	sess     *session
	request  string
	adaptive bool // the decide step runs after each task (§11)
	chat     bool // a chat run: one task, the request, answered directly (chat.go)
	started  time.Time
	usage    wsproto.Usage // planning's tokens; only the run's goroutine touches it
	// prior is the conversation before this run that its models see: the
	// session's history within Options.HistoryBudget (history.go). Set
	// before the run's goroutine starts.
	prior []wsproto.HistoryEntry
	// summary is the confirmed plan's, and confirmed says the user
	// confirmed it (a user.message run: adjustments are confirmed too).
	// Set before solving starts; read by the decide step.
	summary   string
	confirmed bool

	ctx    context.Context
	cancel context.CancelCauseFunc

	// sched is the solver run while solving, nil otherwise. Guarded by
	// sess.mu.
	sched *solver.Run
	// completed is the run's pipeline.completed, for its end log; ended
	// is set once that log is written (under sess.mu).
	completed *wsproto.PipelineCompleted
	ended     bool

	// cp is what a checkpoint records of the run beyond the session's
	// state: nil unless the session's ring is durable (checkpoint.go).
	// Guarded by sess.mu.
	cp *runCheckpoint
	// restored holds what a run taken over from another server had left
	// open (restore.go); nil for a run that started here. Set before the
	// run's goroutine starts.
	restored *restoredRun
}

// confirm is an open agent.user_confirm waiting for its user.response.
type confirm struct {
	stepID  string
	kind    string
	run     *run
	meta    *wsproto.UserConfirm // as asked; not modified after
	expires time.Time
	// answer receives exactly one answer, or (plan_confirm only) replan
	// the feedback of the user.replan that withdrew it. Both have cap 1.
	answer chan *wsproto.Response
	replan chan string
}

// replanned is await's error when a user.replan withdrew the plan's
// confirmation.
type replanned struct{ feedback string }

func (replanned) Error() string { return "the user asked for a new plan" }

// Causes of a run's cancellation that the client asked for.
var (
	errUserCancel = errors.New("cancelled by the user")
	errUserAbort  = errors.New("aborted by the user")
)

// startRun starts a pipeline for request, or for tasks without planning
// when tasks is non-nil; adaptive (or the server's Adaptive option) adds
// the decide step. It runs on the connection's reader goroutine.
func (sess *session) startRun(request string, tasks []wsproto.Task, adaptive bool) *wsproto.Error {
	return sess.start(request, tasks, adaptive, false)
}

// start starts a run: a chat run (tasks then hold its one task, which the
// model may refuse as a task: invalid_message, the client sent a message)
// or a pipeline as startRun says.
func (sess *session) start(request string, tasks []wsproto.Task, adaptive, chat bool) *wsproto.Error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.run != nil {
		return &wsproto.Error{Code: wsproto.CodeBusy, Message: "a run is already active in this session"}
	}
	if sess.srv.draining.Load() {
		return errDraining()
	}
	if chat {
		if probs := sess.srv.validateTasks(tasks); probs != nil {
			return chatRefused(probs)
		}
	} else if tasks != nil {
		if probs := sess.srv.validateTasks(tasks); probs != nil {
			return invalidTasks(probs)
		}
	} else if probs := sess.srv.checkRequest(request); probs != nil {
		return &wsproto.Error{Code: wsproto.CodeInvalidMessage,
			Message: "the request cannot be planned: " + strings.Join(probs, "; ")}
	}
	if e := sess.budgetStart(); e != nil {
		return e
	}
	r := &run{id: "run_" + uuid.NewString(), sess: sess, request: request, started: time.Now(),
		adaptive: !chat && (adaptive || sess.srv.opts.Adaptive), chat: chat}
	r.ctx, r.cancel = context.WithCancelCause(sess.srv.ctx)
	r.prior = sess.priorLocked()
	sess.run = r
	sess.runStartedLocked(r, tasks)
	r.logStart(tasks)
	sess.srv.runWG.Add(1)
	go r.execute(tasks)
	return nil
}

// validateTasks checks a client's task list: §5.1, then whatever the
// solver model refuses (the simulated one: malformed fault directives).
func (s *Server) validateTasks(tasks []wsproto.Task) []wsproto.TaskProblem {
	probs := wsproto.ValidateTasks(tasks, s.opts.MaxTasks)
	checker, ok := s.models.Solver.(solver.TaskChecker)
	if !ok {
		return probs
	}
	for i, t := range tasks {
		for _, p := range checker.CheckTask(t) {
			probs = append(probs, wsproto.TaskProblem{Code: wsproto.ProblemInvalidDirective,
				Message: fmt.Sprintf("task %d (%q): %s", i, t.ID, p), Index: &i, TaskID: t.ID})
		}
	}
	return probs
}

// checkRequest returns what the planner model refuses in a request.
func (s *Server) checkRequest(text string) []string {
	if checker, ok := s.models.Planner.(planner.RequestChecker); ok {
		return checker.CheckRequest(text)
	}
	return nil
}

func invalidTasks(probs []wsproto.TaskProblem) *wsproto.Error {
	return &wsproto.Error{Code: wsproto.CodeInvalidTasks,
		Message: fmt.Sprintf("the task list has %d problem(s)", len(probs)), Details: probs}
}

func (r *run) execute(tasks []wsproto.Task) {
	defer r.sess.srv.runWG.Done()
	defer r.cancel(nil)
	r.markRunning(true)
	defer r.markRunning(false)
	r.pipeline(tasks, planFrom{})
}

// planFrom is where a run's planning starts: from nothing for a new run;
// a restored run may have plans the user sent back, planning attempts
// made, or a plan waiting for its confirmation (open, or answered).
type planFrom struct {
	rejected []planner.Rejection
	attempts int
	plan     *planner.Plan
	confirm  *confirm
}

// pipeline plans (unless tasks are given) until the user confirms a plan,
// then solves and aggregates.
func (r *run) pipeline(tasks []wsproto.Task, from planFrom) {
	summary := ""
	rejected := from.rejected
	for tasks == nil {
		plan := from.plan
		if plan == nil {
			p, ok := r.plan(rejected, from.attempts)
			if !ok {
				return
			}
			plan = &p
		}
		var feedback *string
		var ok bool
		if tasks, feedback, ok = r.confirmPlan(plan.Summary, plan.Tasks, from.confirm); !ok {
			return
		}
		from = planFrom{}
		if feedback != nil { // user.replan: plan again with the feedback
			rejected = append(rejected, planner.Rejection{Plan: *plan, Feedback: *feedback})
			continue
		}
		summary = plan.Summary
		r.confirmed = true
	}
	r.summary = summary
	report, ok := r.solve(tasks, summary, nil)
	if !ok {
		return
	}
	r.aggregate(summary, report)
}

// emitNoting is emit with note applied to the run's checkpoint record in
// the same step, for what the event's metadata does not carry.
func (r *run) emitNoting(note func(x *runCheckpoint), event, content string, meta any) {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	if r.cp != nil {
		note(r.cp)
	}
	r.sess.emitLocked(event, "", content, meta)
}

func (r *run) emit(event, content string, meta any) {
	r.sess.emit(event, "", content, meta)
}

// finish emits the run's last event (if event is not empty) and ends the
// run in one step, so a client that has the event may start the next run.
func (r *run) finish(event, content string, meta any) {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	r.finishLocked(event, content, meta)
}

func (r *run) finishLocked(event, content string, meta any) {
	r.stampEndLocked(meta)
	if event != "" {
		r.sess.emitLocked(event, "", content, meta)
	}
	r.logEnd(meta)
	for id, c := range r.sess.confirms {
		if c.run == r {
			r.sess.closeConfirmLocked(id)
		}
	}
	if r.sess.run == r {
		r.sess.run = nil
		r.sess.runEndedLocked()
	}
}

// stopped ends a run whose context is done: with pipeline.cancelled when
// the user asked for it, silently when the session or server is going away.
func (r *run) stopped() {
	switch context.Cause(r.ctx) {
	case errUserCancel:
		r.finish(wsproto.EventPipelineCancelled, "Run cancelled",
			&wsproto.PipelineCancelled{RunID: r.id, Reason: wsproto.ReasonUserCancel})
	case errUserAbort:
		r.finish(wsproto.EventPipelineCancelled, "Run aborted",
			&wsproto.PipelineCancelled{RunID: r.id, Reason: wsproto.ReasonUserAbort})
	default:
		r.finish("", "", nil)
	}
}

// plan drafts the plan, retrying model failures and unusable plans per
// the retry policy (§5.2): error.execution and error.recovery_started with
// stage "plan", then plan.completed, or plan.cancelled when out of retries.
// rejected are the plans the user sent back so far (user.replan, §11);
// made is the attempts made before (a restored run's), which count
// against the retries.
func (r *run) plan(rejected []planner.Rejection, made int) (planner.Plan, bool) {
	opts, obs := r.sess.srv.opts, r.sess.srv.obs
	defer r.stageDone(StagePlan, time.Now())
	start := &wsproto.PlanStart{RunID: r.id, Request: r.request}
	content := "Planning"
	if k := len(rejected); k > 0 {
		start.Feedback, content = rejected[k-1].Feedback, "Planning again"
	}
	r.emit(wsproto.EventPlanStart, content, start)
	delays := opts.retryPolicy().Backoff()
	step := 0
	req := planner.Request{Text: r.request, Rejected: rejected, History: r.prior}
	for retry := made; ; retry++ {
		req.Attempt = retry + 1
		began := time.Now()
		p, err := failure.Protect(func() (planner.Plan, error) { // a panic fails the planning
			return r.sess.srv.models.Planner.Plan(r.ctx, req, func(desc string) {
				desc, _ = cutText(desc, opts.MaxResultBytes)
				step++
				r.emit(wsproto.EventPlanStepCompleted, desc, &wsproto.PlanStep{RunID: r.id, Step: step, Description: desc})
			})
		})
		obs.ModelCall(CallPlan, callResult(r.ctx, err), time.Since(began), p.Usage)
		if r.ctx.Err() != nil {
			r.stopped()
			return p, false
		}
		if err == nil {
			probs := wsproto.ValidateTasks(p.Tasks, opts.MaxTasks)
			if probs == nil {
				r.usage = r.usage.Add(p.Usage)
				r.spend(p.Usage)
				wsproto.NormalizeTasks(p.Tasks)
				m := cutPlan(r.id, &p, opts.MaxResultBytes)
				r.emitNoting(func(x *runCheckpoint) { x.PlanUsage = r.usage },
					wsproto.EventPlanCompleted, p.Summary, m)
				return p, true
			}
			req.Feedback = problemsText(probs)
			err = failure.New(failure.Validation, "unusable plan: %s", req.Feedback)
		}
		class := failure.Classify(err)
		obs.Failure(StagePlan, class.Type)
		r.emit(wsproto.EventExecutionError, "Planning failed", &wsproto.ExecutionError{
			RunID: r.id, Stage: "plan", Attempt: req.Attempt, ErrorType: class.Type, Message: r.public(err, "stage", "plan", "attempt", req.Attempt),
			Recoverable: class.Recoverable, SuggestedAction: class.SuggestedAction})
		if !class.Recoverable || retry >= opts.MaxRetries {
			r.sess.srv.log.Info("planning failed", "session", r.sess.id, "run", r.id, "attempts", req.Attempt, "type", class.Type)
			r.finish(wsproto.EventPlanCancelled, "Planning failed", &wsproto.PlanCancelled{
				RunID: r.id, Reason: wsproto.ReasonPlanFailed, Error: failure.Public(err)})
			return p, false
		}
		delay := delays.Next(class)
		obs.Retry(StagePlan, class.Type)
		r.emit(wsproto.EventRecoveryStarted, "Retrying the plan", &wsproto.RecoveryStarted{
			RunID: r.id, Stage: "plan", RecoveryStrategy: "retry", Attempt: retry + 1,
			MaxAttempts: opts.MaxRetries, DelayMS: delay.Milliseconds()})
		if failure.Wait(r.ctx, delay) != nil {
			r.stopped()
			return p, false
		}
	}
}

func problemsText(probs []wsproto.TaskProblem) string {
	msgs := make([]string, len(probs))
	for i, p := range probs {
		msgs[i] = p.Message
	}
	return strings.Join(msgs, "; ")
}

// confirmPlan asks the user to confirm the plan and returns the tasks to
// solve: the plan's, or the user's edit of them; or, when a user.replan
// withdrew the confirmation, the user's feedback. c is the confirmation
// a restored run had open, if any; nil opens one.
func (r *run) confirmPlan(summary string, tasks []wsproto.Task, c *confirm) ([]wsproto.Task, *string, bool) {
	if c == nil {
		c = r.openConfirm(&wsproto.UserConfirm{
			Kind:        wsproto.ConfirmPlan,
			PlanSummary: summary,
			Tasks:       tasks,
		}, "Confirm the plan", r.sess.srv.opts.ConfirmTimeout)
	}
	answer, err := r.await(r.ctx, c, time.Until(c.expires), func() {
		r.finishLocked(wsproto.EventPlanCancelled, "No answer: plan cancelled",
			&wsproto.PlanCancelled{RunID: r.id, Reason: wsproto.ReasonConfirmTimeout})
	})
	var again replanned
	switch {
	case errors.As(err, &again):
		return nil, &again.feedback, true
	case err != nil:
		if err != errExpired {
			r.stopped()
		}
		return nil, nil, false
	}
	if !*answer.Confirmed {
		r.finish(wsproto.EventPlanCancelled, "Plan rejected",
			&wsproto.PlanCancelled{RunID: r.id, Reason: wsproto.ReasonUserReject})
		return nil, nil, false
	}
	if answer.Tasks != nil {
		tasks = answer.Tasks
	}
	return tasks, nil, true
}

// openConfirm registers a confirmation and emits its agent.user_confirm in
// one step, so no answer can arrive for a step_id the session does not know.
func (r *run) openConfirm(meta *wsproto.UserConfirm, content string, timeout time.Duration) *confirm {
	c := newConfirm(r, meta.Kind, confirmPrefix[meta.Kind]+uuid.NewString())
	meta.RunID, meta.StepID = r.id, c.stepID
	meta.ExpiresAt = time.Now().Add(timeout).UTC()
	c.meta, c.expires = meta, meta.ExpiresAt
	r.sess.mu.Lock()
	r.sess.confirms[c.stepID] = c
	r.sess.emitLocked(wsproto.EventUserConfirm, c.stepID, content, meta)
	r.sess.cancelAbsentLocked()
	r.sess.mu.Unlock()
	return c
}

func newConfirm(r *run, kind, stepID string) *confirm {
	c := &confirm{stepID: stepID, kind: kind, run: r, answer: make(chan *wsproto.Response, 1)}
	if kind == wsproto.ConfirmPlan {
		c.replan = make(chan string, 1)
	}
	return c
}

// confirmPrefix begins the step_id of each kind of confirmation, so a log
// or a person reading frames can tell them apart.
var confirmPrefix = map[string]string{
	wsproto.ConfirmPlan:       "confirm_plan_",
	wsproto.ConfirmTaskFailed: "confirm_task_",
	wsproto.ConfirmTool:       "confirm_tool_",
	wsproto.ConfirmInput:      "confirm_input_",
	wsproto.ConfirmAdjust:     "confirm_adjust_",
}

var errExpired = errors.New("confirmation expired")

// await waits for c's answer. When the timeout passes first it closes the
// confirmation and calls expired with the session locked (unless an answer
// won the race) and returns errExpired; when ctx is done first it closes
// the confirmation and returns ctx's error. A plan confirmation withdrawn
// by user.replan returns a replanned error.
func (r *run) await(ctx context.Context, c *confirm, timeout time.Duration, expired func()) (*wsproto.Response, error) {
	defer func(began time.Time) { r.sess.srv.obs.ConfirmWaited(c.kind, time.Since(began)) }(time.Now())
	t := time.NewTimer(timeout)
	defer t.Stop()
	var err error
	select {
	case a := <-c.answer:
		return a, nil
	case fb := <-c.replan:
		return nil, replanned{fb}
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = errExpired
	}
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	if _, open := r.sess.confirms[c.stepID]; open {
		r.sess.closeConfirmLocked(c.stepID)
		if err == errExpired && expired != nil {
			expired()
		}
		return nil, err
	}
	// Closed: answered or withdrawn just before (respond and replan close
	// and send in one step, under the lock), or closed with its run —
	// which a tool call abandoned at its timeout or cancel can outlive.
	select {
	case a := <-c.answer:
		return a, nil
	case fb := <-c.replan:
		return nil, replanned{fb}
	default:
		return nil, err
	}
}

// solve runs the tasks, or, for a restored run, goes on from where from
// says they stood.
func (r *run) solve(tasks []wsproto.Task, summary string, from *solver.Resume) (solver.Report, bool) {
	opts := r.sess.srv.opts
	sopts := solver.Options{
		MaxParallel: opts.MaxParallel,
		Retry:       opts.retryPolicy(),
		TaskTimeout: opts.TaskTimeout,
		Request:     r.request,
		PlanSummary: summary,
		History:     r.prior,
		Adaptive:    r.adaptive,
		Chat:        r.chat,
		MaxTasks:    opts.MaxTasks,
		Loop:        opts.Loop,

		MaxResultBytes: opts.MaxResultBytes,
	}
	defer r.stageDone(StageSolve, time.Now())
	model := observedModel{r.sess.srv.models.Solver, r.sess.srv.obs}
	var sched *solver.Run
	if from != nil {
		sched = solver.NewResumed(*from, model, taskEvents{r}, sopts)
	} else {
		sched = solver.New(tasks, model, taskEvents{r}, sopts)
	}
	r.sess.mu.Lock()
	if from == nil {
		r.sess.state.BeginSolvingMode(r.id, r.request, r.mode(), tasks)
	}
	r.sched = sched
	r.sess.solvingLocked(r)
	r.sess.mu.Unlock()

	// A tool logs what it keeps from the client with the session's and
	// run's ids (mcptool: a crashed server's stderr).
	report := sched.Execute(tool.WithLogAttrs(r.ctx, "session", r.sess.id, "run_id", r.id))

	r.sess.mu.Lock()
	r.sched = nil
	r.sess.mu.Unlock()
	if r.ctx.Err() != nil {
		r.stopped()
		return report, false
	}
	return report, true
}

func aggregateCounts(runID string, report solver.Report) wsproto.AggregateStart {
	return wsproto.AggregateStart{
		RunID:     runID,
		Completed: report.Count(wsproto.TaskCompleted),
		Failed:    report.Count(wsproto.TaskFailed),
		Skipped:   report.Count(wsproto.TaskSkipped),
		Cancelled: report.Count(wsproto.TaskCancelled),
	}
}

func (r *run) aggregate(summary string, report solver.Report) {
	defer r.stageDone(StageAggregate, time.Now())
	counts := aggregateCounts(r.id, report)
	r.emit(wsproto.EventAggregateStart, "Aggregating results", &counts)

	in := aggregator.Input{Request: r.request, History: r.prior, PlanSummary: summary, Tasks: make([]aggregator.TaskOutcome, len(report.Tasks)),
		MaxAnswerBytes: r.sess.srv.opts.MaxResultBytes}
	for i, t := range report.Tasks {
		in.Tasks[i] = aggregator.TaskOutcome{Task: t.Task, Status: t.Status,
			Result: report.Results[t.Task.ID], Error: report.Errors[t.Task.ID]}
	}
	var out aggregator.Output
	var err error
	if r.chat && counts.Completed == 1 {
		out = chatAnswer(report) // the answer is the task's: nothing to combine
	} else if counts.Completed == 0 {
		// Nothing to summarise: the answer explains the failure without
		// asking the model again (it may be what failed).
		out = aggregator.Explain(in)
	} else {
		began := time.Now()
		out, err = failure.Protect(func() (aggregator.Output, error) { // a panic fails the summary
			return r.sess.srv.models.Aggregator.Aggregate(r.ctx, in, func(text string) {
				text, _ = cutText(text, r.sess.srv.opts.MaxResultBytes)
				r.emit(wsproto.EventAggregateProgress, text, &wsproto.AggregateProgress{RunID: r.id, Message: text})
			})
		})
		r.sess.srv.obs.ModelCall(CallAggregate, callResult(r.ctx, err), time.Since(began), out.Usage)
	}
	r.spend(out.Usage)
	if r.ctx.Err() != nil {
		r.stopped()
		return
	}
	if err != nil {
		out.Summary = "The results could not be summarised: " + r.public(err, "stage", "aggregate")
		out.Answer = out.Summary
	}
	limit := r.sess.srv.opts.MaxResultBytes
	done := &wsproto.AggregateCompleted{RunID: r.id}
	if done.Summary, done.OriginalBytes = cutText(out.Summary, limit); done.OriginalBytes > 0 {
		done.Truncated = true
	}
	answer := &wsproto.FinalAnswer{RunID: r.id}
	if answer.Content, answer.OriginalBytes = cutText(out.Answer, limit); answer.OriginalBytes > 0 || out.AnswerBytes > 0 {
		answer.Truncated, answer.OriginalBytes = true, max(answer.OriginalBytes, out.AnswerBytes)
		if !strings.HasSuffix(answer.Content, wsproto.CutMarker) { // the aggregator stopped short of the limit
			answer.Content += wsproto.CutMarker
		}
	}
	out.Summary, out.Answer = done.Summary, answer.Content
	r.emitNoting(func(x *runCheckpoint) {
		x.Aggregated = &aggregated{Summary: out.Summary, Answer: out.Answer, Usage: out.Usage}
	},
		wsproto.EventAggregateCompleted, out.Summary, done)
	r.conclude(counts, len(report.Tasks), report.Usage.Add(out.Usage), answer)
}

// stageDone tells the Observer a stage that began at began has ended.
func (r *run) stageDone(stage string, began time.Time) {
	r.sess.srv.obs.StageDone(stage, time.Since(began))
}

// conclude ends a run whose results are aggregated: pipeline.completed
// and the final answer. usage is the solving's and the aggregation's.
func (r *run) conclude(counts wsproto.AggregateStart, tasks int, usage wsproto.Usage, answer *wsproto.FinalAnswer) {
	status := wsproto.StatusPartial
	switch counts.Completed {
	case tasks:
		status = wsproto.StatusSucceeded
	case 0:
		status = wsproto.StatusFailed
	}
	r.completed = &wsproto.PipelineCompleted{
		RunID:      r.id,
		Status:     status,
		Completed:  counts.Completed,
		Failed:     counts.Failed,
		Skipped:    counts.Skipped,
		Cancelled:  counts.Cancelled,
		DurationMS: time.Since(r.started).Milliseconds(),
		Usage:      r.usage.Add(usage),
	}
	r.emit(wsproto.EventPipelineCompleted, "Run "+status, r.completed)
	r.finish(wsproto.EventFinalAnswer, answer.Content, answer)
}
