package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// Errors of Restore, wrapped with the session's id.
var (
	// ErrSessionExists: the server already has a session with this id.
	ErrSessionExists = errors.New("orchestrator: the session exists on this server")
	// ErrCheckpointVersion: the checkpoint was written by an incompatible
	// version of Baton.
	ErrCheckpointVersion = errors.New("orchestrator: unknown checkpoint version")
)

// Restore takes over session id from what another server left of it in
// a shared store: ring holds the session's retained events (the next
// Append continues its seqs), data is the session's latest checkpoint and
// tail the ring's entries after it, which are folded into the state. The
// session is then served here like any other — it waits for its client
// to resume it (user.reconnect_with_state with token) and expires after
// SessionTTL without one — and its run, if one was in flight, goes on
// from where the checkpoint left it:
//
//   - planning: planning starts again, as a new attempt;
//   - a plan confirmation open: it stays open, with its step_id and what
//     remains of its time;
//   - solving: completed, failed, skipped and cancelled tasks keep their
//     outcome and are not run again; running ones start again as a new
//     execution that goes on from the task's last journaled round (the
//     model replies and tool results already in are not asked for again;
//     a tool call left without its result is made again as a retry,
//     tool.Retry); a task_failed, tool_confirm, input_request or
//     plan_adjust confirmation stays answerable with its step_id (see
//     claim for the questions of running tasks); tool calls left without
//     their result get one (ok:false, "cancelled");
//   - aggregating: aggregation runs again, unless its result was out.
//
// Restore must be called without any session's lock held; ctx bounds the
// ring calls it makes. token is the session's resume token. The session
// belongs to the anonymous subject: with Options.Authenticate set,
// sessions move between servers through a Cluster, whose store keeps
// their subject.
func (s *Server) Restore(ctx context.Context, id, token string, ring buffer.Ring, data []byte, tail []buffer.Entry) error {
	_, err := s.restore(ctx, id, Record{TokenHash: sha256.Sum256([]byte(token))}, ring, data, tail, nil, nil)
	return err
}

// restore is Restore with the session's record as a store keeps it (the
// token's hash and the subject); data nil is a session that never had a
// checkpoint. bind, when not nil, is called with the session before it is
// registered and its run goes on. admit, when not nil, is called under
// s.mu right before the session is registered: an error it returns is
// restore's, and nothing is registered nor started — a takeover's lease
// check (fence.go), made in the step that registers the session and
// starts its run.
func (s *Server) restore(ctx context.Context, id string, rec Record, ring buffer.Ring, data []byte,
	tail []buffer.Entry, bind func(*session), admit func() error) (*session, error) {
	cp := checkpoint{Version: checkpointVersion}
	if data != nil {
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, fmt.Errorf("restore session %s: decode checkpoint: %w", id, err)
		}
	}
	if cp.Version != checkpointVersion {
		return nil, fmt.Errorf("restore session %s: version %d: %w", id, cp.Version, ErrCheckpointVersion)
	}
	state := wsproto.State{Phase: cp.Phase, Run: cp.Run, History: cp.History, HistoryLimit: s.opts.HistoryRuns}
	for _, e := range tail {
		if e.Seq <= cp.Seq {
			continue
		}
		if err := applyFrame(&state, e.Data); err != nil {
			return nil, fmt.Errorf("restore session %s: event %d: %w", id, e.Seq, err)
		}
	}
	sess := &session{id: id, tokenHash: rec.TokenHash, prevHash: rec.PrevTokenHash, rot: rec.ConnRot, followHash: rec.FollowHash, subject: rec.Subject,
		owner: ownerKey(rec.Subject, ""), srv: s, ring: ring, state: state, confirms: make(map[string]*confirm), followed: cp.Followed}
	sess.used.Store(true) // restored from somewhere: it keeps SessionTTL
	sess.ctx, sess.cancel = context.WithCancel(s.ctx)
	if sess.dur = newDurable(ring); sess.dur != nil {
		seq, _, err := ring.Last(ctx)
		if err != nil {
			sess.cancel()
			return nil, fmt.Errorf("restore session %s: read ring: %w", id, err)
		}
		sess.dur.seq = seq
	}
	// No connection here yet: its TTL runs, from when its client left,
	// wherever that was — a takeover does not give it a new one. A client
	// attached when its server died left then, about now.
	sess.detachedAt.Store(detachedAt(rec, time.Now()).UnixNano())
	var r *run
	if cp.Exec != nil {
		r = sess.restoreRun(cp.Exec)
	}

	if bind != nil {
		bind(sess)
	}
	// discard drops the session unregistered: its run, never started, is
	// cancelled with it.
	discard := func(err error) (*session, error) {
		if r != nil {
			r.cancel(err)
		}
		sess.cancel()
		return nil, fmt.Errorf("restore session %s: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return discard(ErrServerClosed)
	case s.sessions[id] != nil:
		return discard(ErrSessionExists)
	}
	if admit != nil {
		if err := admit(); err != nil {
			return discard(err)
		}
	}
	s.sessions[id] = sess // counted, never refused: the session exists (sessioncap.go)
	s.ownLocked(sess.owner)
	s.obs.SessionOpened(true)
	s.log.Info("session restored", "session", id, "checkpoint_seq", cp.Seq, "tail", len(tail), "run", r != nil)
	if r != nil {
		// Under s.mu, so that Close, which waits for runs once closed is
		// set, sees this one.
		s.runWG.Add(1)
		go r.resume()
	}
	return sess, nil
}

// detachedAt is when a session's client left, as rec says: rec.Detached
// when the store recorded it and no connection is recorded since, now
// otherwise.
func detachedAt(rec Record, now time.Time) time.Time {
	if rec.Conn == "" && !rec.Detached.IsZero() && rec.Detached.Before(now) {
		return rec.Detached
	}
	return now
}

// expiredIn reports whether rec is of a session whose client left longer
// than ttl before now.
func expiredIn(rec Record, now time.Time, ttl time.Duration) bool {
	return now.Sub(detachedAt(rec, now)) >= ttl
}

// restoredRun is what a run taken over had left open. The lists are
// guarded by the session's lock; the rest is set before the run's
// goroutine starts and only read after (the record itself, r.cp, changes
// under the lock from then on).
type restoredRun struct {
	stage     string
	cancel    string
	tasks     []wsproto.Task // stageStarting
	rejected  []planner.Rejection
	attempts  int
	openTools []wsproto.ToolCall
	usage     wsproto.Usage // the solving's
	aggregate *aggregated
	completed *wsproto.PipelineCompleted

	// reopened are the confirmations of the run's goroutine, its
	// decisions and its decide step, open or answered, until their owner
	// reclaims them.
	reopened []*confirm
	// parked are the questions of running tasks, until the restarted task
	// claims them or ends.
	parked []*parked
	// step is the decide step told and not carried out, until the solver
	// gets to it again.
	step *decideStep
	// solver is where solving goes on from; cancelled the tasks a
	// user.cancel_task had stopped.
	solver    *solver.Resume
	cancelled []string
	// plan is the plan waiting for its confirmation.
	plan *planner.Plan
	// wg counts the goroutines watching the parked questions.
	wg sync.WaitGroup
}

// restoreRun rebuilds the run x records, with its confirmations open
// again. Called before the session is visible to anyone.
func (sess *session) restoreRun(x *runCheckpoint) *run {
	r := &run{id: x.ID, sess: sess, request: x.Request, adaptive: x.Adaptive, chat: x.Chat, started: x.Started, prior: sess.priorLocked(),
		usage: x.PlanUsage, summary: x.Summary, confirmed: x.Confirmed}
	r.ctx, r.cancel = context.WithCancelCause(sess.srv.ctx)
	if sess.dur != nil {
		r.cp = x
	}
	rs := &restoredRun{stage: x.Stage, cancel: x.Cancel, tasks: x.Tasks, attempts: x.PlanAttempts,
		openTools: slices.Clone(x.OpenTools), usage: x.Usage, aggregate: x.Aggregated, completed: x.Completed, step: x.Deciding}
	for _, p := range x.Rejected {
		rs.rejected = append(rs.rejected, planner.Rejection{Plan: planner.Plan{Summary: p.Summary, Tasks: p.Tasks}, Feedback: p.Feedback})
	}
	r.restored = rs
	sess.run = r
	st := sess.state.Run
	if st == nil {
		st = &wsproto.RunState{}
	}
	for _, m := range st.PendingConfirm {
		rs.hold(r, m, nil)
	}
	for _, a := range x.Answered {
		rs.hold(r, a.Confirm, a.Answer.response(a.Confirm.StepID))
	}
	switch x.Stage {
	case stageConfirming:
		plan := &planner.Plan{Summary: st.PlanSummary}
		for _, t := range st.Tasks {
			plan.Tasks = append(plan.Tasks, t.Task)
		}
		rs.plan = plan
	case stageSolving:
		rs.solver, rs.cancelled = resumeFrom(st, x)
	}
	return r
}

// hold makes the confirmation m answerable again under its step_id, or,
// when it was answered (a), holds the answer for its owner.
func (rs *restoredRun) hold(r *run, m wsproto.UserConfirm, a *wsproto.Response) {
	c := newConfirm(r, m.Kind, m.StepID)
	c.meta, c.expires = &m, m.ExpiresAt
	if a != nil {
		c.answer <- a
	} else {
		r.sess.confirms[c.stepID] = c
	}
	if m.TaskID != "" && (m.Kind == wsproto.ConfirmTool || m.Kind == wsproto.ConfirmInput) {
		p := &parked{c: c, done: make(chan struct{})}
		p.ctx, p.stop = context.WithCancel(r.ctx)
		rs.parked = append(rs.parked, p)
		return
	}
	rs.reopened = append(rs.reopened, c)
}

// resumeFrom is where the solver goes on from: each task's state, with
// what the record adds to it — a failed task still in its retry budget
// starts again, one whose decision is pending is asked again, one the user
// decided to retry waits to run, one the user cancelled while it ran is
// cancelled (returned, to be reported).
func resumeFrom(st *wsproto.RunState, x *runCheckpoint) (*solver.Resume, []string) {
	from := &solver.Resume{Retired: slices.Clone(x.Retired), Version: st.PlanVersion, Decisions: x.Decisions,
		AdaptQueue: slices.Clone(x.AdaptQueue), Synthesized: x.Synthesized, Usage: x.Usage}
	if d := x.Deciding; d != nil && !x.Synthesized {
		// Told but not carried out: the solver gets to it again first.
		from.Decisions = d.Number - 1
		from.AdaptQueue = append([]string{d.AfterTask}, from.AdaptQueue...)
	}
	for _, a := range st.Answers {
		from.Answers = append(from.Answers, solver.Answer{Question: a.Question, Text: a.Text})
	}
	asked := map[string]bool{} // tasks with a task_failed confirmation open or answered
	for _, c := range st.PendingConfirm {
		if c.Kind == wsproto.ConfirmTaskFailed {
			asked[c.TaskID] = true
		}
	}
	for _, a := range x.Answered {
		if a.Confirm.Kind == wsproto.ConfirmTaskFailed {
			asked[a.Confirm.TaskID] = true
		}
	}
	var cancelled []string
	for _, t := range st.Tasks {
		rt := solver.ResumeTask{TaskState: t}
		n := x.Notes[t.ID]
		switch t.Status {
		case wsproto.TaskFailed:
			switch {
			case n.Deciding || asked[t.ID]:
				rt.Deciding = true
			case n.Retry:
				rt.Status = wsproto.TaskPending
			case n.Failing:
				rt.Status = wsproto.TaskRunning
			}
		}
		if rt.Status == wsproto.TaskRunning || rt.Status == wsproto.TaskRetrying {
			if n.Cancel {
				rt.Status = wsproto.TaskCancelled
				cancelled = append(cancelled, t.ID)
			} else {
				rt.Journal = x.resumeJournal(t.ID)
			}
		}
		from.Tasks = append(from.Tasks, rt)
	}
	return from, cancelled
}

// resume is a restored run's goroutine: it goes on from the stage its
// checkpoint recorded.
func (r *run) resume() {
	defer r.sess.srv.runWG.Done()
	defer r.restored.wg.Wait() // after the cancel below ends the watchers
	defer r.cancel(nil)
	rs := r.restored
	r.sess.srv.log.Info("run restored", "session", r.sess.id, "run", r.id, "stage", rs.stage)
	r.sess.srv.obs.RunStarted(RunTakenOver)
	r.watchParked()
	switch rs.cancel {
	case wsproto.ReasonUserCancel:
		r.cancel(errUserCancel)
		r.stopped()
		return
	case wsproto.ReasonUserAbort:
		r.cancel(errUserAbort)
		r.stopped()
		return
	}
	switch rs.stage {
	case stageStarting:
		r.pipeline(rs.tasks, planFrom{})
	case stagePlanning:
		r.pipeline(nil, planFrom{rejected: rs.rejected, attempts: rs.attempts})
	case stageConfirming:
		r.pipeline(nil, planFrom{rejected: rs.rejected, plan: rs.plan, confirm: r.reclaim(wsproto.ConfirmPlan, "")})
	case stageSolving:
		r.resumeSolving()
	case stageAggregating:
		r.resumeAggregating()
	default:
		r.sess.srv.log.Error("restore: unknown stage", "session", r.sess.id, "run", r.id, "stage", rs.stage)
		r.finish("", "", nil)
	}
}

// resumeSolving answers the tool calls the dead server left open and
// reports the cancels it had not, then lets the solver go on.
func (r *run) resumeSolving() {
	rs := r.restored
	for _, c := range rs.openTools {
		r.sess.emit(wsproto.EventToolResult, c.StepID, c.Tool+" failed", &wsproto.ToolResult{RunID: r.id, TaskID: c.TaskID,
			Attempt: c.Attempt, Round: c.Round, StepID: c.StepID, Tool: c.Tool, OK: false, Result: "cancelled"})
	}
	for _, id := range rs.cancelled {
		r.emit(wsproto.EventSolverCancelled, "Cancelled "+id, &wsproto.SolverCancelled{RunID: r.id, TaskID: id, Reason: wsproto.ReasonUserCancelTask})
	}
	report, ok := r.solve(nil, r.summary, rs.solver)
	if !ok {
		return
	}
	r.aggregate(r.summary, report)
}

// resumeAggregating aggregates again, or, when the aggregation's result
// was out, ends the run with it.
func (r *run) resumeAggregating() {
	rs := r.restored
	r.sess.mu.Lock()
	report := solver.Report{Results: map[string]string{}, Errors: map[string]string{}, Usage: rs.usage}
	if st := r.sess.state.Run; st != nil {
		for _, t := range st.Tasks {
			report.Tasks = append(report.Tasks, solver.TaskStatus{Task: t.Task, Status: t.Status})
			switch t.Status {
			case wsproto.TaskCompleted:
				report.Results[t.ID] = t.Result
			case wsproto.TaskFailed:
				report.Errors[t.ID] = t.Error
			}
		}
	}
	r.sess.mu.Unlock()
	switch a := rs.aggregate; {
	case a != nil && rs.completed != nil:
		r.completed = rs.completed
		r.finish(wsproto.EventFinalAnswer, a.Answer, &wsproto.FinalAnswer{RunID: r.id, Content: a.Answer})
	case a != nil:
		r.conclude(aggregateCounts(r.id, report), len(report.Tasks), report.Usage.Add(a.Usage), &wsproto.FinalAnswer{RunID: r.id, Content: a.Answer})
	default:
		r.aggregate(r.summary, report)
	}
}

// reclaim returns the confirmation of this kind (and task) that a
// restored run had open or answered when it was taken over, once: the
// one whose owner now asks again. nil for any other run.
func (r *run) reclaim(kind, taskID string) *confirm {
	rs := r.restored
	if rs == nil {
		return nil
	}
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	for i, c := range rs.reopened {
		if c.kind == kind && c.meta.TaskID == taskID {
			rs.reopened = slices.Delete(rs.reopened, i, i+1)
			return c
		}
	}
	return nil
}

// resumedStep returns the decide step told and not carried out, when the
// solver gets to the task it follows; once.
func (r *run) resumedStep(afterTask string) *decideStep {
	rs := r.restored
	if rs == nil {
		return nil
	}
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	step := rs.step
	if step == nil || step.AfterTask != afterTask {
		return nil
	}
	rs.step = nil
	return step
}

// resumeStep carries out a decision told before the takeover: an
// adjustment the user confirmed is applied, one the user was asked about
// is asked with the same confirmation, a question likewise.
func (r *run) resumeStep(ctx context.Context, sched *solver.Run, step *decideStep) solver.Adaptation {
	d := step.decision()
	if step.Decided {
		return solver.Adaptation{Change: &solver.Change{Add: d.Add, Remove: d.Remove, Reason: d.Reason}}
	}
	var c *confirm
	var after []wsproto.Task
	switch d.Action {
	case wsproto.ActionRequestInput:
		c = r.reclaim(wsproto.ConfirmInput, "")
	case wsproto.ActionAdjustPlan:
		if c = r.reclaim(wsproto.ConfirmAdjust, ""); c == nil && r.confirmed {
			// Not asked yet: ask, with the list as it would be now.
			var probs []wsproto.TaskProblem
			var err error
			if after, probs, err = sched.Propose(ctx, solver.Change{Add: d.Add, Remove: d.Remove}); err != nil || probs != nil {
				return solver.Adaptation{}
			}
		}
	}
	return r.carryOut(ctx, sched, d, after, c, solver.Adaptation{})
}
