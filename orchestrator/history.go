package orchestrator

import (
	"strings"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// A session is a conversation: every run ends with an entry in the
// session's history (wsproto.State.History, at most Options.HistoryRuns of
// them), made from the run's last event, which carries the entry's request,
// status and end time (stampEndLocked). Each later run's models — the
// planner, every task's agent loop and the aggregator — see the newest
// entries within Options.HistoryBudget as the conversation before the
// run's request (prior).

// Defaults of the history options.
const (
	// DefaultHistoryBudget is how much prior conversation a model is
	// given: 16 KiB, about 4,000 tokens — a few runs' answers at the
	// length a person reads, small beside any model's context and beside
	// the loop's own budget (solver's MaxContextBytes, 64 KiB), so the
	// conversation never crowds out the task at hand.
	DefaultHistoryBudget = 16 << 10
	// DefaultHistoryRuns is how many finished runs a session keeps: the
	// thread a page shows after a reload, and every checkpoint and
	// snapshot carries them.
	DefaultHistoryRuns = 10
)

// fitHistory returns the newest entries of history whose requests and
// answers add up to at most budget bytes, oldest first: the oldest are
// elided first, and an entry goes whole or not at all (a model is better
// served by fewer runs than by a cut answer). The current request is not
// in history and is never elided. A budget ≤ 0 keeps nothing.
func fitHistory(history []wsproto.HistoryEntry, budget int) []wsproto.HistoryEntry {
	if budget <= 0 {
		return nil
	}
	used, from := 0, len(history)
	for from > 0 {
		e := history[from-1]
		n := len(e.Request) + len(e.Answer)
		if used+n > budget {
			break
		}
		used += n
		from--
	}
	if from == len(history) {
		return nil
	}
	return history[from:len(history):len(history)]
}

// priorLocked is the conversation a run starting now gives its models.
// The entries are never changed once made, so the run may keep the slice.
func (sess *session) priorLocked() []wsproto.HistoryEntry {
	return fitHistory(sess.state.History, sess.srv.opts.HistoryBudget)
}

// stampEndLocked completes the metadata of a run's last event with what
// the run's history entry needs: the request (a user.solve_tasks run's task
// titles), when it ended and, for agent.final_answer, pipeline.completed's
// status.
func (r *run) stampEndLocked(meta any) {
	now := time.Now().UTC()
	switch m := meta.(type) {
	case *wsproto.FinalAnswer:
		m.Request, m.EndedAt = r.historyRequestLocked(), now
		if r.completed != nil {
			m.Status = r.completed.Status
		}
	case *wsproto.PlanCancelled:
		m.Request, m.EndedAt = r.historyRequestLocked(), now
	case *wsproto.PipelineCancelled:
		m.Request, m.EndedAt = r.historyRequestLocked(), now
	}
}

// historyRequestLocked is the run's request as its history entry says it,
// within Options.MaxResultBytes: a user.solve_tasks run has none, so its
// entry names the tasks it solved, their titles joined by "; ".
func (r *run) historyRequestLocked() string {
	text := r.request
	if text == "" {
		if st := r.sess.state.Run; st != nil && st.RunID == r.id {
			titles := make([]string, len(st.Tasks))
			for i, t := range st.Tasks {
				titles[i] = t.Title
			}
			text = strings.Join(titles, "; ")
		}
	}
	text, _ = cutText(text, r.sess.srv.opts.MaxResultBytes)
	return text
}
