// Package aggregator turns the outcome of a run's tasks into a summary and
// the final answer for the user. It defines the Aggregator interface the
// orchestrator consumes and holds the built-in simulated aggregator (§9 of
// the contract). It knows nothing of sessions, connections or events:
// streamed text is reported through a callback.
package aggregator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Input is what an aggregator works from.
type Input struct {
	Request string
	// History is the session's conversation before this run, oldest
	// first, within the server's history budget.
	History     []wsproto.HistoryEntry
	PlanSummary string
	Tasks       []TaskOutcome
	// MaxAnswerBytes is the most of the answer the run keeps (Baton's
	// --max-result-bytes): an aggregator need not build more than a few
	// bytes past it, and says how long the whole answer was in
	// Output.AnswerBytes. 0: no limit.
	MaxAnswerBytes int
}

// TaskOutcome is one task with how it ended.
type TaskOutcome struct {
	Task   wsproto.Task
	Status string // a wsproto.Task* status
	Result string // when completed
	Error  string // when failed
}

// Output is an aggregator's product.
type Output struct {
	Summary string // aggregate.completed
	Answer  string // agent.final_answer
	Usage   wsproto.Usage
	// AnswerBytes is the answer's length before the aggregator stopped
	// building it, past Input.MaxAnswerBytes; 0 when Answer is whole.
	AnswerBytes int
}

// Aggregator summarises a run. stream is called with successive pieces of
// text as they are produced (possibly never); it must not block for long.
// When no task completed, the answer explains the failure instead of
// summarising results (the orchestrator uses Explain then, and does not
// call the Aggregator).
type Aggregator interface {
	Aggregate(ctx context.Context, in Input, stream func(text string)) (Output, error)
}

// Sim is the simulated aggregator.
type Sim struct {
	// Delay paces the streamed pieces. Defaults to 0.
	Delay time.Duration
}

var _ Aggregator = (*Sim)(nil)

// Aggregate implements Aggregator: one streamed line per task, then an
// answer that quotes the conversation's earlier requests (sim.Earlier),
// built from the completed tasks' results — no further than a line
// past MaxAnswerBytes, the whole length then in AnswerBytes.
func (a *Sim) Aggregate(ctx context.Context, in Input, stream func(string)) (Output, error) {
	topic := sim.Topic(in.Request, 80)
	if topic == "" {
		topic = "your tasks" // a user.solve_tasks run has no request
	}
	var answer strings.Builder
	done, total := 0, 0 // total: the answer's length, built or not
	for _, t := range in.Tasks {
		if err := failure.Wait(ctx, a.Delay); err != nil {
			return Output{}, err
		}
		var line string
		switch t.Status {
		case wsproto.TaskCompleted:
			done++
			line = fmt.Sprintf("- %s", t.Result)
		case wsproto.TaskFailed:
			line = fmt.Sprintf("- %s: failed (%s)", t.Task.Title, t.Error)
		default:
			line = fmt.Sprintf("- %s: %s", t.Task.Title, t.Status)
		}
		stream(line)
		total += len(line) + 1
		if in.MaxAnswerBytes <= 0 || answer.Len() <= in.MaxAnswerBytes {
			answer.WriteString(line)
			answer.WriteByte('\n')
		}
	}
	if done == 0 {
		return Explain(in), nil
	}
	summary := fmt.Sprintf("%d of %d tasks completed for %s.", done, len(in.Tasks), quote(topic))
	out := Output{
		Summary: summary,
		Answer:  fmt.Sprintf("Answer to %s%s:\n%s", quote(topic), sim.Earlier(in.History), answer.String()),
	}
	if answer.Len() < total {
		out.AnswerBytes = len(out.Answer) - answer.Len() + total
	}
	return out, nil
}

func quote(topic string) string {
	if topic == "your tasks" {
		return topic
	}
	return fmt.Sprintf("%q", topic)
}
