package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/wsproto"
)

// A run writes two info lines, at its start and at its end, with its ids,
// its outcome and its duration — never the request or any model text.

// logStart notes a run that starts with planning (tasks == nil) or with
// the client's tasks.
func (r *run) logStart(tasks []wsproto.Task) {
	kind := RunPlan
	attrs := []any{"session", r.sess.id, "run", r.id, "kind", RunPlan}
	switch {
	case r.chat:
		kind = RunChat
		attrs[len(attrs)-1] = RunChat
	case tasks != nil:
		kind = RunTasks
		attrs = append(attrs[:len(attrs)-1], RunTasks, "tasks", len(tasks))
	}
	if r.sess.srv.opts.Authenticate != nil {
		attrs = append(attrs, "subject", r.sess.subject)
	}
	r.sess.srv.obs.RunStarted(kind)
	r.sess.srv.log.Info("run started", attrs...)
}

// logEnd notes how the run ended, from its last event's metadata (nil
// when the run ended silently: session expiry or shutdown). Called with
// the session locked; only the first call logs.
func (r *run) logEnd(meta any) {
	if r.ended {
		return
	}
	r.ended = true
	attrs := []any{"session", r.sess.id, "run", r.id, "duration_ms", time.Since(r.started).Milliseconds()}
	outcome, reason := "cancelled", ""
	switch m := meta.(type) {
	case *wsproto.FinalAnswer:
		if p := r.completed; p != nil {
			outcome = p.Status
			attrs = append(attrs, "completed", p.Completed, "failed", p.Failed, "skipped", p.Skipped, "cancelled", p.Cancelled)
		}
	case *wsproto.PlanCancelled:
		outcome = map[string]string{
			wsproto.ReasonPlanFailed:     "plan_failed",
			wsproto.ReasonUserReject:     "rejected",
			wsproto.ReasonConfirmTimeout: "confirm_timeout",
		}[m.Reason]
	case *wsproto.PipelineCancelled:
		reason = m.Reason
		attrs = append(attrs, "reason", reason)
	default:
		cause := context.Cause(r.ctx)
		if errors.Is(cause, ErrServerClosed) && r.sess.srv.opts.Cluster != nil {
			// Close sealed the session before stopping the run, which the
			// store still has in flight: another server continues it from
			// its last checkpoint (markRunning). Not a cancellation.
			outcome = OutcomeHandedOver
			break
		}
		reason = "unknown"
		switch {
		case errors.Is(cause, errSessionExpired):
			reason = "session_expired"
		case errors.Is(cause, ErrServerClosed):
			reason = "server_closed"
		case errors.Is(cause, errSessionLost):
			reason = "session_lost"
		case errors.Is(cause, errUserAbsent):
			reason = ReasonUserAbsent
		}
		attrs = append(attrs, "reason", reason)
	}
	r.sess.srv.obs.RunEnded(outcome, reason)
	r.sess.srv.log.Info("run ended", append([]any{"outcome", outcome}, attrs...)...)
}

// public logs a model failure with every detail and the run's ids, and
// returns what the client may be told about it (failure.Public): an
// error's text goes to a client only through here or failure.Public.
func (r *run) public(err error, attrs ...any) string {
	attrs = append([]any{"session", r.sess.id, "run", r.id, "type", failure.Classify(err).Type, "err", err}, attrs...)
	if stack := failure.Stack(err); stack != nil { // a panic (failure.Protect)
		attrs = append(attrs, "stack", string(stack))
	}
	r.sess.srv.log.Warn("model call failed", attrs...)
	return failure.Public(err)
}
