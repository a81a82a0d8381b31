package orchestrator

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// taskEvents turns the solver's reports into sequenced events.
type taskEvents struct{ r *run }

var _ solver.Events = taskEvents{}

func (e taskEvents) Started(id string, attempt int) {
	m := &wsproto.SolverStart{RunID: e.r.id, TaskID: id, Attempt: attempt}
	if e.r.chat {
		task := chatTask(e.r.request)
		m.Mode, m.Task = wsproto.ModeChat, &task
	}
	e.r.emit(wsproto.EventSolverStart, "Started "+id, m)
}

func (e taskEvents) Progress(id string, attempt int, f float64, msg string) {
	e.r.emit(wsproto.EventSolverProgress, msg, &wsproto.SolverProgress{
		RunID: e.r.id, TaskID: id, Attempt: attempt, Progress: f, Message: msg})
}

func (e taskEvents) Completed(id string, attempt int, res solver.Result, took time.Duration) {
	e.r.endParked(id)
	e.r.spend(res.Usage)
	e.r.emit(wsproto.EventSolverCompleted, "Completed "+id, &wsproto.SolverCompleted{
		RunID: e.r.id, TaskID: id, Attempt: attempt, Result: res.Text, DurationMS: took.Milliseconds(), Usage: res.Usage,
		Truncated: res.Truncated, OriginalBytes: res.OriginalBytes})
}

func (e taskEvents) Failed(id string, attempt int, c failure.Class, err error) {
	e.r.sess.srv.obs.Failure(StageTask, c.Type)
	e.r.emit(wsproto.EventExecutionError, "Task "+id+" failed", &wsproto.ExecutionError{
		RunID: e.r.id, TaskID: id, Attempt: attempt, ErrorType: c.Type, Message: e.r.public(err, "task", id, "attempt", attempt),
		Recoverable: c.Recoverable, SuggestedAction: c.SuggestedAction})
}

func (e taskEvents) Retrying(id string, retry, maxAttempts int, errorType string, delay time.Duration) {
	e.r.sess.srv.obs.Retry(StageTask, errorType)
	e.r.emit(wsproto.EventRecoveryStarted, "Retrying "+id, &wsproto.RecoveryStarted{
		RunID: e.r.id, TaskID: id, RecoveryStrategy: "retry", Attempt: retry,
		MaxAttempts: maxAttempts, DelayMS: delay.Milliseconds()})
}

func (e taskEvents) Recovered(id string, attempt int) {
	e.r.emit(wsproto.EventRecoverySuccess, "Recovered "+id, &wsproto.RecoverySuccess{RunID: e.r.id, TaskID: id, Attempt: attempt})
}

func (e taskEvents) GaveUp(id string, attempts int, err error) {
	e.r.endParked(id)
	e.r.emit(wsproto.EventRecoveryFailed, "Gave up on "+id, &wsproto.RecoveryFailed{
		RunID: e.r.id, TaskID: id, Attempts: attempts, LastError: failure.Public(err)})
}

// Decide asks the user what to do with a task that gave up (kind
// task_failed). No answer within the confirm timeout counts as skip; abort
// cancels the run.
//
// A restored run asks again with the confirmation it had open.
func (e taskEvents) Decide(ctx context.Context, id string, err error) solver.Decision {
	c := e.r.reclaim(wsproto.ConfirmTaskFailed, id)
	if c == nil {
		c = e.r.openConfirm(&wsproto.UserConfirm{
			Kind:    wsproto.ConfirmTaskFailed,
			TaskID:  id,
			Options: []string{"retry", "skip", "abort"},
		}, "Task "+id+" failed: retry, skip or abort?", e.r.sess.srv.opts.ConfirmTimeout)
	}
	answer, aerr := e.r.await(ctx, c, time.Until(c.expires), nil)
	d := solver.Skip
	switch {
	case aerr != nil:
	case answer.Action == "retry":
		d = solver.Retry
	case answer.Action == "abort":
		e.r.cancel(errUserAbort)
		d = solver.Abort
	}
	if ctx.Err() == nil {
		e.r.decided(id, d)
	}
	return d
}

func (e taskEvents) Cancelled(id, reason string) {
	e.r.endParked(id)
	e.r.emit(wsproto.EventSolverCancelled, "Cancelled "+id, &wsproto.SolverCancelled{RunID: e.r.id, TaskID: id, Reason: reason})
}

func (e taskEvents) Skipped(id, reason, dependency string) {
	e.r.emit(wsproto.EventSolverSkipped, "Skipped "+id, &wsproto.SolverSkipped{
		RunID: e.r.id, TaskID: id, Reason: reason, Dependency: dependency})
}

func (e taskEvents) Restarted(id string) {
	e.r.emit(wsproto.EventSolverRestarted, "Restarting "+id, &wsproto.SolverRestarted{
		RunID: e.r.id, TaskID: id, Reason: wsproto.ReasonUserRestart})
}

func (e taskEvents) ToolCall(m *wsproto.ToolCall) {
	m.RunID = e.r.id
	e.r.sess.emit(wsproto.EventToolCall, m.StepID, "Calling "+m.Tool, m)
}

func (e taskEvents) ToolResult(m *wsproto.ToolResult) {
	m.RunID = e.r.id
	content := m.Tool + " answered"
	if !m.OK {
		content = m.Tool + " failed"
	}
	e.r.sess.emit(wsproto.EventToolResult, m.StepID, content, m)
}

func (e taskEvents) TodoUpdated(m *wsproto.TodoUpdated) {
	m.RunID = e.r.id
	e.r.emit(wsproto.EventTodoUpdated, "Todo list of "+m.TaskID, m)
}

func (e taskEvents) TodoItemProgress(m *wsproto.TodoItemProgress) {
	m.RunID = e.r.id
	e.r.emit(wsproto.EventTodoItemProgress, m.Item.Content+": "+m.Item.Status, m)
}

func (e taskEvents) TodoCompleted(m *wsproto.TodoCompleted) {
	m.RunID = e.r.id
	e.r.emit(wsproto.EventTodoCompleted, "Todo list of "+m.TaskID+" completed", m)
}

// ConfirmTool asks the user to approve a call of a tool that changes the
// world (kind tool_confirm). Declined or expired is false.
//
// A restarted task of a restored run that asks what it had asked before
// the takeover gets that confirmation again (claim).
func (e taskEvents) ConfirmTool(ctx context.Context, id, tool string, args json.RawMessage) bool {
	if answer, ok, err := e.r.claim(ctx, wsproto.ConfirmTool, id, func(m *wsproto.UserConfirm) bool {
		return m.Tool == tool && sameJSON(m.Arguments, args)
	}); ok {
		return err == nil && *answer.Approved
	}
	timeout := e.r.sess.srv.opts.ConfirmTimeout
	c := e.r.openConfirm(&wsproto.UserConfirm{Kind: wsproto.ConfirmTool, TaskID: id, Tool: tool, Arguments: args},
		"Allow "+tool+"?", timeout)
	answer, err := e.r.await(ctx, c, timeout, nil)
	return err == nil && *answer.Approved
}

// AskUser asks the user a question for a task (kind input_request); ok is
// false when it expired or the task ended first.
//
// Like ConfirmTool, it claims the question a restored run had open.
func (e taskEvents) AskUser(ctx context.Context, id, question, context string) (string, bool) {
	if answer, ok, err := e.r.claim(ctx, wsproto.ConfirmInput, id, func(m *wsproto.UserConfirm) bool {
		return m.Question == question
	}); ok {
		if err != nil {
			return "", false
		}
		return *answer.Text, true
	}
	timeout := e.r.sess.srv.opts.ConfirmTimeout
	c := e.r.openConfirm(&wsproto.UserConfirm{Kind: wsproto.ConfirmInput, TaskID: id, Question: question, Context: context},
		question, timeout)
	answer, err := e.r.await(ctx, c, timeout, nil)
	if err != nil {
		return "", false
	}
	return *answer.Text, true
}
