package orchestrator

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// readLoop reads client frames until the connection ends, answering each
// bad one with system.error and changing nothing for it. It returns the
// error that ended the connection.
func (c *conn) readLoop() error {
	for {
		// No per-read deadline: cancelling a Read's context closes the
		// connection, and liveness is the pinger's job.
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			return err
		}
		c.frames++
		c.read = time.Now()
		if !c.admitFrame(c.read) {
			continue
		}
		c.handle(typ, data)
		if c.onlyResume() { // beyond a session cap, and this frame did not resume one
			c.closeOverCap()
		}
	}
}

// handle applies a client frame, answering a bad one with system.error.
func (c *conn) handle(typ websocket.MessageType, data []byte) {
	if typ != websocket.MessageText {
		c.sendError(&wsproto.Error{Code: wsproto.CodeInvalidMessage, Message: "binary frames are not accepted; send JSON text frames"})
		return
	}
	req, e := wsproto.DecodeText(data)
	if e == nil {
		if e = c.dispatch(req, data); e != nil && e.RefType == "" {
			e.RefType = req.Event() // every answer to a decoded frame names it
		}
	}
	if e != nil {
		c.sendError(e)
	}
}

func (c *conn) dispatch(req wsproto.Request, data []byte) *wsproto.Error {
	if r, ok := req.(*wsproto.Reconnect); ok {
		if c.sess.unrecorded.Load() {
			c.sess.resuming.Store(true) // recordIdle leaves a resume's fresh session alone
		}
		e := c.srv.resume(c, r)
		switch {
		case e == nil: // counted with its answer
		case e.Code == wsproto.CodeResumeRejected:
			c.srv.obs.Resumed(ResumeRejected, 0)
		case e.Code == wsproto.CodeBusy:
			c.srv.obs.Resumed(ResumeBusy, 0)
		default:
			c.srv.obs.Resumed(ResumeFailed, 0)
		}
		return e
	}
	if c.remote != nil {
		return c.forward(data)
	}
	if c.onlyResume() {
		return nil // not applied: the connection is closed with 4029 (sessioncap.go)
	}
	if e := c.srv.record(c.srv.ctx, c.sess); e != nil { // not a resume: the fresh session is used
		return e
	}
	if a, ok := req.(*wsproto.Ack); ok {
		return c.sess.ack(c.id, a.LastSeq) // this connection's cursor (members.go)
	}
	return c.sess.apply(req)
}

// apply carries out a client's command on the session.
func (sess *session) apply(req wsproto.Request) *wsproto.Error {
	switch req := req.(type) {
	case *wsproto.Message:
		if sess.messageMode(req) == wsproto.ModeChat {
			return sess.startChat(req.Text)
		}
		return sess.startRun(req.Text, nil, req.Adaptive)
	case *wsproto.SolveTasks:
		if req.Tasks == nil {
			req.Tasks = []wsproto.Task{}
		}
		return sess.startRun("", req.Tasks, req.Adaptive)
	case *wsproto.Response:
		return sess.respond(req)
	case *wsproto.Cancel:
		return sess.cancelRun(errUserCancel)
	case *wsproto.CancelTask:
		return sess.cancelTask(req.TaskID)
	case *wsproto.RestartTask:
		return sess.restartTask(req.TaskID)
	case *wsproto.Replan:
		return sess.replan(req.Feedback)
	}
	return &wsproto.Error{Code: wsproto.CodeUnknownType, Message: "unsupported event", RefType: req.Event()}
}

// respond pairs a user.response with its open confirmation by step_id.
func (sess *session) respond(resp *wsproto.Response) *wsproto.Error {
	if e := sess.checkAdjustEdit(resp); e != nil {
		return e
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	c, ok := sess.confirms[resp.StepID]
	if !ok {
		return &wsproto.Error{Code: wsproto.CodeStepIDMismatch, RefType: wsproto.EventUserResponse,
			Message: "no open confirmation has this step_id (unknown, already answered or expired)"}
	}
	switch c.kind {
	case wsproto.ConfirmPlan:
		if resp.Confirmed == nil {
			return &wsproto.Error{Code: wsproto.CodeInvalidMessage, RefType: wsproto.EventUserResponse,
				Message: `a plan confirmation needs "confirmed": true or false`}
		}
		if *resp.Confirmed && resp.Tasks != nil {
			if probs := sess.srv.validateTasks(resp.Tasks); probs != nil {
				e := invalidTasks(probs)
				e.RefType = wsproto.EventUserResponse
				return e
			}
		}
	case wsproto.ConfirmAdjust:
		if resp.Confirmed == nil {
			return &wsproto.Error{Code: wsproto.CodeInvalidMessage, RefType: wsproto.EventUserResponse,
				Message: `a plan_adjust confirmation needs "confirmed": true or false`}
		}
	case wsproto.ConfirmTaskFailed:
		switch resp.Action {
		case "retry", "skip", "abort":
		default:
			return &wsproto.Error{Code: wsproto.CodeInvalidMessage, RefType: wsproto.EventUserResponse,
				Message: `a task_failed confirmation needs "action": "retry", "skip" or "abort"`}
		}
	case wsproto.ConfirmTool:
		if resp.Approved == nil {
			return &wsproto.Error{Code: wsproto.CodeInvalidMessage, RefType: wsproto.EventUserResponse,
				Message: `a tool_confirm confirmation needs "approved": true or false`}
		}
	case wsproto.ConfirmInput:
		if resp.Text == nil {
			return &wsproto.Error{Code: wsproto.CodeInvalidMessage, RefType: wsproto.EventUserResponse,
				Message: `an input_request confirmation needs "text": the answer`}
		}
	}
	if c.kind == wsproto.ConfirmInput {
		sess.state.Answer(resp.StepID, *resp.Text) // the snapshot carries the answers given
	}
	sess.closeConfirmLocked(resp.StepID)
	if sess.followed {
		sess.emitLocked(wsproto.EventConfirmSettled, "", "", settled(c, resp)) // §2: step_id on the envelope of no other event; it is in the metadata
	}
	c.answer <- resp
	sess.answeredLocked(c, resp)
	return nil
}

// settled is the agent.confirm_settled that tells the devices following a
// session how c was answered: the answer's fields of c's kind.
func settled(c *confirm, resp *wsproto.Response) wsproto.ConfirmSettled {
	m := wsproto.ConfirmSettled{RunID: c.meta.RunID, StepID: resp.StepID, Kind: c.kind, TaskID: c.meta.TaskID}
	switch c.kind {
	case wsproto.ConfirmPlan, wsproto.ConfirmAdjust:
		m.Confirmed = resp.Confirmed
		if *resp.Confirmed {
			m.Tasks = resp.Tasks
		}
	case wsproto.ConfirmTaskFailed:
		m.Action = resp.Action
	case wsproto.ConfirmTool:
		m.Approved = resp.Approved
	case wsproto.ConfirmInput:
		m.Text = resp.Text
	}
	return m
}

func (sess *session) cancelRun(cause error) *wsproto.Error {
	sess.mu.Lock()
	r := sess.run
	sess.mu.Unlock()
	if r == nil {
		return &wsproto.Error{Code: wsproto.CodeNoActiveRun, RefType: wsproto.EventUserCancel, Message: "no run to cancel"}
	}
	sess.cancelled(r, cause)
	r.cancel(cause)
	return nil
}

// active returns the session's run and, while it is solving, its
// scheduler; each is nil when there is none.
func (sess *session) active() (*run, *solver.Run) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.run == nil {
		return nil, nil
	}
	return sess.run, sess.run.sched
}

func (sess *session) cancelTask(taskID string) *wsproto.Error {
	r, sched := sess.active()
	if r == nil {
		return &wsproto.Error{Code: wsproto.CodeNoActiveRun, RefType: wsproto.EventUserCancelTask, Message: "no run to cancel a task of"}
	}
	// Called without the session lock: the scheduler may be emitting.
	if sched == nil || sched.CancelTask(r.ctx, taskID) != nil {
		return &wsproto.Error{Code: wsproto.CodeUnknownTask, RefType: wsproto.EventUserCancelTask,
			Message: "no pending or running task has this id"}
	}
	sess.taskCancelled(r, taskID)
	return nil
}

// replan withdraws the run's open plan confirmation and sends the planner
// back with the user's feedback (§11).
func (sess *session) replan(feedback string) *wsproto.Error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for id, c := range sess.confirms {
		if c.kind == wsproto.ConfirmPlan && c.run == sess.run {
			sess.closeConfirmLocked(id) // its step_id is answered step_id_mismatch from now on
			c.replan <- feedback
			sess.replannedLocked(c, feedback)
			return nil
		}
	}
	return &wsproto.Error{Code: wsproto.CodeInvalidState, RefType: wsproto.EventUserReplan,
		Message: "no plan is waiting for confirmation"}
}

// restartTask runs a finished task again (§11), with its dependents that
// are not running.
func (sess *session) restartTask(taskID string) *wsproto.Error {
	r, sched := sess.active()
	if sched == nil {
		return &wsproto.Error{Code: wsproto.CodeNoActiveRun, RefType: wsproto.EventUserRestart, Message: "no run is solving"}
	}
	// Called without the session lock: the scheduler emits solver.restarted.
	err := sched.RestartTask(r.ctx, taskID)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, solver.ErrUnknownTask):
		return &wsproto.Error{Code: wsproto.CodeUnknownTask, RefType: wsproto.EventUserRestart, Message: "the run has no task with this id"}
	case errors.Is(err, solver.ErrTaskBusy):
		return &wsproto.Error{Code: wsproto.CodeInvalidState, RefType: wsproto.EventUserRestart, Message: describe(err)}
	}
	return &wsproto.Error{Code: wsproto.CodeNoActiveRun, RefType: wsproto.EventUserRestart, Message: "no run is solving"}
}

// describe is a solver error as a message for the client: what it says
// about the task, without the package prefixes of the errors it wraps.
func describe(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": solver: "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}
