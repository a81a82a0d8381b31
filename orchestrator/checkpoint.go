package orchestrator

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// A session whose ring is a buffer.Durable is checkpointed at every
// transition, so that another server can take it over from the store
// alone (Server.Restore). A unit the ring writes is one event and the
// checkpoint as of that event, or one change made without an event (an
// answer taken, a replan, a cancel) and its checkpoint: emitLocked and the
// few places that change the state silently end each with Commit.
//
// The checkpoint is built from what the session's lock guards, and from
// nothing else: the session's client-visible state, and runCheckpoint, a
// record the run keeps beside it of what that state does not say. With
// any other ring none of this runs: sess.dur and run.cp are nil.

// checkpointVersion is the encoding's version; Restore refuses others.
const checkpointVersion = 1

// checkpoint is the state of a session as of seq: what Restore needs to
// serve the session and go on with its run on another server.
type checkpoint struct {
	Version int `json:"version"`
	// Seq is the latest seq the checkpoint has folded in.
	Seq   uint64            `json:"seq"`
	Phase string            `json:"phase"`
	Run   *wsproto.RunState `json:"run"`
	// History is the session's finished runs (wsproto.State.History).
	History []wsproto.HistoryEntry `json:"history,omitempty"`
	// Followed is session.followed.
	Followed bool `json:"followed,omitempty"`
	// Exec is the run in flight, nil when there is none.
	Exec *runCheckpoint `json:"exec,omitempty"`
}

// Stages of a run's goroutine, as a checkpoint tells them.
const (
	stageStarting    = "starting"    // accepted, nothing emitted yet
	stagePlanning    = "planning"    // from plan.start
	stageConfirming  = "confirming"  // from plan.completed: the plan is asked for, or about to be
	stageSolving     = "solving"     // from the solver's start
	stageAggregating = "aggregating" // from aggregate.start
)

// runCheckpoint is what a checkpoint records of a run beyond the session's
// state. It is kept up to date under the session's lock, from the events
// emitted (apply) and from notes the run makes where the events do not
// say enough (runStartedLocked, answeredLocked and the like).
type runCheckpoint struct {
	ID       string `json:"id"`
	Request  string `json:"request"`
	Adaptive bool   `json:"adaptive"`
	// Chat marks a chat run (chat.go); its Tasks are its one task.
	Chat    bool      `json:"chat,omitempty"`
	Started time.Time `json:"started"`
	Stage   string    `json:"stage"`
	// Tasks are a user.solve_tasks run's, until it starts solving.
	Tasks []wsproto.Task `json:"tasks,omitempty"`

	// Planning: the attempts begun since plan.start, the planning's
	// tokens, and the plans the user sent back (user.replan).
	PlanAttempts int            `json:"plan_attempts,omitempty"`
	PlanUsage    wsproto.Usage  `json:"plan_usage"`
	Rejected     []rejectedPlan `json:"rejected,omitempty"`
	// Solving on: the confirmed plan's summary, and whether the user
	// confirmed it (adjustments are then confirmed too).
	Summary   string `json:"summary,omitempty"`
	Confirmed bool   `json:"confirmed,omitempty"`

	// Cancel is the reason of a user.cancel (or an abort) the run has not
	// carried out yet.
	Cancel string `json:"cancel,omitempty"`
	// Answered are the answers taken whose confirmation's owner has not
	// acted on them yet.
	Answered []answered `json:"answered,omitempty"`

	// Solving: where each task stands beyond its status, the tool calls
	// not answered yet, the ids removed by adjustments, the tokens of the
	// completed executions and of the decide steps.
	Notes     map[string]taskNote `json:"notes,omitempty"`
	OpenTools []wsproto.ToolCall  `json:"open_tools,omitempty"`
	Retired   []string            `json:"retired,omitempty"`
	Usage     wsproto.Usage       `json:"usage"`

	// Journal is each running task's rounds so far (journal.go).
	Journal map[string][]journalRound `json:"journal,omitempty"`

	// The decide step (§11): decisions told, completed tasks waiting for
	// theirs, whether one said synthesize, and the one told and not
	// carried out yet.
	Decisions   int         `json:"decisions,omitempty"`
	AdaptQueue  []string    `json:"adapt_queue,omitempty"`
	Synthesized bool        `json:"synthesized,omitempty"`
	Deciding    *decideStep `json:"deciding,omitempty"`

	// Aggregating: the aggregation's product once aggregate.completed is
	// out, and pipeline.completed once it is.
	Aggregated *aggregated                `json:"aggregated,omitempty"`
	Completed  *wsproto.PipelineCompleted `json:"completed,omitempty"`

	// ended is set by the run's last event: a checkpoint then has no run.
	ended bool
}

type rejectedPlan struct {
	Summary  string         `json:"summary"`
	Tasks    []wsproto.Task `json:"tasks"`
	Feedback string         `json:"feedback"`
}

// taskNote is what a task's status in the state does not say.
type taskNote struct {
	// Failing: an execution failed and the retry is not reported yet (the
	// state says failed; the task is still in its retry budget).
	Failing bool `json:"failing,omitempty"`
	// Deciding: the task gave up; the user's decision is pending.
	Deciding bool `json:"deciding,omitempty"`
	// Retry: the user decided retry; the task has not started again.
	Retry bool `json:"retry,omitempty"`
	// Cancel: user.cancel_task stopped the task; its end is not reported.
	Cancel bool `json:"cancel,omitempty"`
}

// answered is a confirmation answered and the answer.
type answered struct {
	Confirm wsproto.UserConfirm `json:"confirm"`
	Answer  answer              `json:"answer"`
}

// answer is a user.response's metadata.
type answer struct {
	Confirmed *bool          `json:"confirmed,omitempty"`
	Tasks     []wsproto.Task `json:"tasks"` // null when absent; [] is an edit
	Action    string         `json:"action,omitempty"`
	Approved  *bool          `json:"approved,omitempty"`
	Text      *string        `json:"text,omitempty"`
}

func answerOf(r *wsproto.Response) answer {
	return answer{Confirmed: r.Confirmed, Tasks: r.Tasks, Action: r.Action, Approved: r.Approved, Text: r.Text}
}

func (a answer) response(stepID string) *wsproto.Response {
	return &wsproto.Response{StepID: stepID, Confirmed: a.Confirmed, Tasks: a.Tasks, Action: a.Action, Approved: a.Approved, Text: a.Text}
}

// decideStep is a decision of the decide step told to the client
// (plan.decision) and not carried out yet: being asked to the user, or
// (Decided) an adjustment the user confirmed, waiting to be applied.
type decideStep struct {
	Number    int            `json:"number"`
	AfterTask string         `json:"after_task"`
	Action    string         `json:"action"`
	Reason    string         `json:"reason"`
	Add       []wsproto.Task `json:"add,omitempty"`
	Remove    []string       `json:"remove,omitempty"`
	Question  string         `json:"question,omitempty"`
	Context   string         `json:"context,omitempty"`
	Decided   bool           `json:"decided,omitempty"`
}

func (d *decideStep) decision() planner.Decision {
	return planner.Decision{Action: d.Action, Reason: d.Reason, Add: d.Add, Remove: d.Remove, Question: d.Question, Context: d.Context}
}

type aggregated struct {
	Summary string        `json:"summary"`
	Answer  string        `json:"answer"`
	Usage   wsproto.Usage `json:"usage"`
}

// durable is a session's link to its durable ring.
type durable struct {
	ring buffer.Durable
	seq  uint64 // the latest seq appended

	// waiters wait for seqs to be durable (journal.go's Settled), until
	// deliver says they are.
	waiters []durableWaiter

	// history is the encoding of the session's history as of the entry
	// historyLast (the newest entry's run, "" for none): the history
	// changes only when a run ends, and every checkpoint carries it, so it
	// is encoded once per change, not at every transition.
	history     []byte
	historyLast string

	// parts, when the ring takes its checkpoint in parts (cpparts.go).
	parts *cpParts
}

// newDurable returns the link to ring when it is durable, else nil.
func newDurable(ring buffer.Ring) *durable {
	d, ok := ring.(buffer.Durable)
	if !ok {
		return nil
	}
	dur := &durable{ring: d}
	if p, ok := ring.(buffer.Parted); ok {
		dur.parts = &cpParts{ring: p, fresh: true}
	}
	return dur
}

// neutral reports whether an event leaves the checkpoint as it was: the
// high-frequency ones, which neither the state nor the run's record
// folds. Their units are committed without a checkpoint; Restore folds
// whatever of them follows the last checkpoint.
func neutral(event string) bool {
	switch event {
	case wsproto.EventSolverProgress, wsproto.EventAggregateProgress,
		wsproto.EventPlanStepCompleted, wsproto.EventRecoverySuccess:
		return true
	}
	return false
}

// transitionLocked ends the unit of an event emitLocked has appended (seq)
// and folded into the state: the run's record folds it too, and unless it
// is neutral, the checkpoint goes with it. Only with a durable ring.
func (sess *session) transitionLocked(seq uint64, event string, meta any) {
	sess.dur.seq = seq
	if r := sess.run; r != nil && r.cp != nil {
		r.cp.apply(meta)
	}
	if !neutral(event) {
		sess.checkpointLocked(scopeOf(meta))
	}
	sess.dur.ring.Commit()
}

// changedLocked ends the unit of a change made without an event.
func (sess *session) changedLocked() { sess.changedScopeLocked(scopeAll) }

// changedScopeLocked ends the unit of a change made without an event,
// which changed only what sc says of the tasks and their journals.
func (sess *session) changedScopeLocked(sc scope) {
	if sess.dur == nil || sess.closed || sess.ctx.Err() != nil {
		return // a session being freed (or a server closing) changes nothing in the store
	}
	sess.checkpointLocked(sc)
	sess.dur.ring.Commit()
}

// checkpointLocked gives the ring the checkpoint: in parts, of which sc
// says which may have changed, when it takes parts; else whole.
func (sess *session) checkpointLocked(sc scope) {
	if sess.dur.parts != nil {
		if err := sess.checkpointPartsLocked(sc); err != nil {
			sess.srv.log.Error("encode checkpoint", "session", sess.id, "err", err)
		}
		return
	}
	cp := checkpoint{Version: checkpointVersion, Seq: sess.dur.seq, Phase: sess.state.Phase, Run: sess.state.Run, Followed: sess.followed}
	if r := sess.run; r != nil && r.cp != nil && !r.cp.ended {
		cp.Exec = r.cp
	}
	b, err := json.Marshal(&cp)
	if err == nil {
		b, err = sess.dur.appendHistory(b, sess.state.History)
	}
	if err != nil {
		sess.srv.log.Error("encode checkpoint", "session", sess.id, "err", err)
		return
	}
	sess.dur.ring.Checkpoint(b)
}

// appendHistory adds "history" to a checkpoint's encoding (an object,
// encoded without it): the cached encoding of history, made again only
// when a run's end has changed it. Entries are only ever appended (and the
// oldest dropped), and run ids are unique, so the newest entry's run names
// the history's state.
func (d *durable) appendHistory(b []byte, history []wsproto.HistoryEntry) ([]byte, error) {
	if len(history) == 0 {
		return b, nil
	}
	if last := history[len(history)-1].RunID; d.history == nil || last != d.historyLast {
		h, err := json.Marshal(history)
		if err != nil {
			return nil, fmt.Errorf("encode history: %w", err)
		}
		d.history, d.historyLast = h, last
	}
	const key = `,"history":`
	out := make([]byte, 0, len(b)+len(key)+len(d.history))
	out = append(append(out, b[:len(b)-1]...), key...) // b ends with the object's '}'
	out = append(out, d.history...)
	return append(out, '}'), nil
}

// apply folds an event of the run into its record.
func (x *runCheckpoint) apply(meta any) {
	switch m := meta.(type) {
	case *wsproto.PlanStart:
		x.Stage, x.PlanAttempts, x.Tasks = stagePlanning, 1, nil
	case *wsproto.RecoveryStarted:
		if m.TaskID == "" {
			x.PlanAttempts = m.Attempt + 1 // m.Attempt retries before this one
		} else {
			x.note(m.TaskID, func(n *taskNote) { n.Failing = false })
		}
	case *wsproto.PlanCompleted:
		x.Stage = stageConfirming
	case *wsproto.ExecutionError:
		if m.TaskID != "" {
			x.note(m.TaskID, func(n *taskNote) { n.Failing = true })
			x.dropJournal(m.TaskID)
		}
	case *wsproto.RecoveryFailed:
		x.note(m.TaskID, func(n *taskNote) { n.Failing, n.Deciding = false, true })
		x.dropJournal(m.TaskID)
	case *wsproto.SolverStart:
		x.endTask(m.TaskID) // the journal stays: a restored task's execution goes on with it
	case *wsproto.SolverCompleted:
		x.endTask(m.TaskID)
		x.dropJournal(m.TaskID)
		x.Usage = x.Usage.Add(m.Usage)
		if x.Adaptive && !x.Synthesized {
			x.AdaptQueue = append(x.AdaptQueue, m.TaskID)
		}
	case *wsproto.SolverCancelled:
		x.endTask(m.TaskID)
		x.dropJournal(m.TaskID)
	case *wsproto.SolverRestarted:
		delete(x.Notes, m.TaskID)
		x.dropJournal(m.TaskID)
	case *wsproto.ToolCall:
		x.OpenTools = append(x.OpenTools, *m)
		x.journalCall(m)
	case *wsproto.ToolResult:
		x.OpenTools = slices.DeleteFunc(x.OpenTools, func(c wsproto.ToolCall) bool { return c.StepID == m.StepID })
		x.journalResult(m)
		// The tool has run with the answer its confirmation got.
		x.dropAnswered(func(c *wsproto.UserConfirm) bool {
			return c.TaskID == m.TaskID && (c.Kind == wsproto.ConfirmTool && c.Tool == m.Tool ||
				c.Kind == wsproto.ConfirmInput && m.Tool == askUserTool)
		})
	case *wsproto.PlanUpdated:
		x.Retired = append(x.Retired, m.Removed...)
		x.Deciding = nil
	case *wsproto.AggregateStart:
		x.Stage = stageAggregating
	case *wsproto.PipelineCompleted:
		c := *m
		x.Completed = &c
	case *wsproto.FinalAnswer, *wsproto.PlanCancelled, *wsproto.PipelineCancelled:
		x.ended = true
	}
}

// askUserTool is the name of the tool through which a task asks the user.
const askUserTool = "ask_user"

func (x *runCheckpoint) note(taskID string, change func(n *taskNote)) {
	n := x.Notes[taskID]
	change(&n)
	if n == (taskNote{}) {
		delete(x.Notes, taskID)
		return
	}
	if x.Notes == nil {
		x.Notes = make(map[string]taskNote)
	}
	x.Notes[taskID] = n
}

// endTask forgets what was pending for a task whose execution starts or
// ends: its note, and answers given to the questions of an earlier one.
func (x *runCheckpoint) endTask(taskID string) {
	delete(x.Notes, taskID)
	x.dropAnswered(func(c *wsproto.UserConfirm) bool { return c.TaskID == taskID })
}

func (x *runCheckpoint) dropAnswered(drop func(c *wsproto.UserConfirm) bool) {
	x.Answered = slices.DeleteFunc(x.Answered, func(a answered) bool { return drop(&a.Confirm) })
}

// decision records a decision of the decide step as it is told.
func (x *runCheckpoint) decision(number int, afterTask string, d planner.Decision) {
	x.Decisions++
	if i := slices.Index(x.AdaptQueue, afterTask); i >= 0 {
		x.AdaptQueue = slices.Delete(x.AdaptQueue, i, i+1)
	}
	x.Deciding = nil
	switch d.Action {
	case wsproto.ActionSynthesize:
		x.Synthesized, x.AdaptQueue = true, nil
	case wsproto.ActionRequestInput, wsproto.ActionAdjustPlan:
		x.Deciding = &decideStep{Number: number, AfterTask: afterTask, Action: d.Action, Reason: d.Reason,
			Add: d.Add, Remove: d.Remove, Question: d.Question, Context: d.Context}
	}
}

// Notes of the run, each the end of a unit without an event of its own.

// runStartedLocked records a run the session has just accepted.
func (sess *session) runStartedLocked(r *run, tasks []wsproto.Task) {
	if sess.dur == nil {
		return
	}
	r.cp = &runCheckpoint{ID: r.id, Request: r.request, Adaptive: r.adaptive, Chat: r.chat, Started: r.started,
		Stage: stageStarting, Tasks: tasks}
	sess.changedLocked()
}

// solvingLocked records that the run's solver has started: the plan
// confirmed (and its answer acted on), or the client's tasks taken.
func (sess *session) solvingLocked(r *run) {
	x := r.cp
	if x == nil {
		return
	}
	x.Stage, x.Summary, x.Confirmed, x.Tasks = stageSolving, r.summary, r.confirmed, nil
	x.dropAnswered(func(c *wsproto.UserConfirm) bool { return c.Kind == wsproto.ConfirmPlan })
	sess.changedLocked()
}

// answeredLocked records the answer respond gave a confirmation, until
// the confirmation's owner acts on it.
func (sess *session) answeredLocked(c *confirm, resp *wsproto.Response) {
	x := c.run.cp
	if x == nil {
		return
	}
	x.Answered = append(x.Answered, answered{Confirm: *c.meta, Answer: answerOf(resp)})
	if c.kind == wsproto.ConfirmTaskFailed && resp.Action == "abort" {
		x.Cancel = wsproto.ReasonUserAbort
	}
	sess.changedLocked()
}

// replannedLocked records a user.replan that withdrew c.
func (sess *session) replannedLocked(c *confirm, feedback string) {
	x := c.run.cp
	if x == nil {
		return
	}
	x.Rejected = append(x.Rejected, rejectedPlan{Summary: c.meta.PlanSummary, Tasks: c.meta.Tasks, Feedback: feedback})
	x.Stage = stagePlanning
	sess.changedLocked()
}

// cancelled records a user.cancel of r.
func (sess *session) cancelled(r *run, cause error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if r.cp == nil || sess.run != r {
		return
	}
	if cause == errUserAbort {
		r.cp.Cancel = wsproto.ReasonUserAbort
	} else {
		r.cp.Cancel = wsproto.ReasonUserCancel
	}
	sess.changedLocked()
}

// taskCancelled records a user.cancel_task the scheduler took.
func (sess *session) taskCancelled(r *run, taskID string) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if r.cp == nil || sess.run != r {
		return
	}
	r.cp.note(taskID, func(n *taskNote) { n.Cancel = true })
	sess.changedLocked()
}

// decided records the decision taken for a task that gave up.
func (r *run) decided(taskID string, d solver.Decision) {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	x := r.cp
	if x == nil {
		return
	}
	x.note(taskID, func(n *taskNote) { n.Deciding, n.Retry = false, d == solver.Retry })
	x.dropAnswered(func(c *wsproto.UserConfirm) bool { return c.Kind == wsproto.ConfirmTaskFailed && c.TaskID == taskID })
	r.sess.changedLocked()
}

// adapted records what a decide step came to: the change to apply, if
// any, stays until plan.updated says it is applied.
func (r *run) adapted(out solver.Adaptation) {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	x := r.cp
	if x == nil {
		return
	}
	x.Usage = x.Usage.Add(out.Usage)
	if out.Change != nil && x.Deciding != nil {
		x.Deciding.Decided = true
		x.Deciding.Add, x.Deciding.Remove, x.Deciding.Reason = out.Change.Add, out.Change.Remove, out.Change.Reason
	} else {
		x.Deciding = nil
	}
	x.dropAnswered(func(c *wsproto.UserConfirm) bool {
		return c.Kind == wsproto.ConfirmAdjust || c.Kind == wsproto.ConfirmInput && c.TaskID == ""
	})
	r.sess.changedLocked()
}
