package orchestrator

import (
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// What a model returns is cut where it enters the run, before the state,
// the ring, a checkpoint or a later stage holds it: each text to
// Options.MaxResultBytes, ending in wsproto.CutMarker, its event marked
// truncated with original_bytes the text's length before — the marker a
// frame cut to fit MaxFrameBytes carries, so clients need nothing new.
// The solver cuts task results itself (solver.Options.MaxResultBytes);
// the planner's and the aggregator's texts are cut here.

// cutText is s within limit bytes, and its length when it was cut (0 when
// it is whole).
func cutText(s string, limit int) (string, int) {
	if len(s) <= limit {
		return s, 0
	}
	return solver.Truncate(s, limit), len(s)
}

// cutPlan cuts a plan's summary and every task's title and description to
// limit bytes each. It returns the plan's metadata: marked truncated, with
// the longest cut text's length, when anything was cut.
func cutPlan(runID string, p *planner.Plan, limit int) *wsproto.PlanCompleted {
	m := &wsproto.PlanCompleted{RunID: runID}
	cut := func(s *string) {
		var n int
		if *s, n = cutText(*s, limit); n > 0 {
			m.Truncated, m.OriginalBytes = true, max(m.OriginalBytes, n)
		}
	}
	cut(&p.Summary)
	for i := range p.Tasks {
		cut(&p.Tasks[i].Title)
		cut(&p.Tasks[i].Description)
	}
	m.PlanSummary, m.Tasks = p.Summary, p.Tasks
	return m
}
