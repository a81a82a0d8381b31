package orchestrator

import (
	"errors"

	"github.com/baton-run/baton/budget"
	"github.com/baton-run/baton/wsproto"
)

// The budget (Options.Budget) is per subject and per server: a run start
// is asked of it on the server that runs the run — the session's owner —
// and every model call's tokens are counted there as they are reported:
// each plan, completed execution, decide step and aggregation.

// budgetStart asks the budget for a run start by the session's subject;
// a refusal is rate_limited, saying when to retry. Called with the
// session locked (the budget does no I/O).
func (sess *session) budgetStart() *wsproto.Error {
	err := sess.srv.budget.Start(sess.subject)
	if err == nil {
		return nil
	}
	limit := ""
	if ex := (*budget.ExceededError)(nil); errors.As(err, &ex) {
		limit = ex.Limit
	}
	sess.srv.log.Info("run refused by the budget", "session", sess.id, "subject", sess.subject, "limit", limit)
	return &wsproto.Error{Code: wsproto.CodeRateLimited, Message: err.Error()}
}

// spend counts tokens a model call of the run used against its subject's
// daily budget.
func (r *run) spend(u wsproto.Usage) {
	n := u.TotalTokens
	if n == 0 {
		n = u.PromptTokens + u.CompletionTokens
	}
	r.sess.srv.budget.Spend(r.sess.subject, int64(n))
}
