package aggregator

import (
	"fmt"
	"strings"

	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Explain writes the answer of a run in which no task completed, with no
// model: which tasks failed and why (each task's error, which names its
// category), which were skipped for a dependency and which were
// cancelled. The orchestrator answers such a run with it instead of
// calling an Aggregator, so a model endpoint that is down is not asked to
// explain its own failure.
func Explain(in Input) Output {
	status := make(map[string]string, len(in.Tasks))
	count := map[string]int{}
	for _, t := range in.Tasks {
		status[t.Task.ID] = t.Status
		count[t.Status]++
	}
	var lines strings.Builder
	for _, t := range in.Tasks {
		fmt.Fprintf(&lines, "- %s (%s): ", t.Task.Title, t.Task.ID)
		switch t.Status {
		case wsproto.TaskFailed:
			why := t.Error
			if why == "" {
				why = "no reason was given"
			}
			fmt.Fprintf(&lines, "failed: %s\n", why)
		case wsproto.TaskSkipped:
			var missing []string
			for _, d := range t.Task.DependsOn {
				if status[d] != wsproto.TaskCompleted {
					missing = append(missing, d)
				}
			}
			fmt.Fprintf(&lines, "skipped, because %s did not complete\n", strings.Join(missing, ", "))
		default:
			fmt.Fprintf(&lines, "%s\n", t.Status)
		}
	}
	var tally []string
	for _, s := range []string{wsproto.TaskFailed, wsproto.TaskSkipped, wsproto.TaskCancelled} {
		if count[s] > 0 {
			tally = append(tally, fmt.Sprintf("%d %s", count[s], s))
		}
	}
	topic := sim.Topic(in.Request, 80)
	if topic == "" {
		topic = "your tasks"
	}
	summary := fmt.Sprintf("No task completed for %s (%s).", quote(topic), strings.Join(tally, ", "))
	return Output{Summary: summary, Answer: summary + " Nothing could be produced:\n" + lines.String()}
}
