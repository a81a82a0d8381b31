// Package planner turns a user's request into a plan: a short summary and a
// list of tasks with dependencies, and, in adaptive runs, decides after
// each task whether the plan still stands (§11). It defines the Planner
// interface the orchestrator consumes, with its optional capabilities
// (RequestChecker, Decider), and holds the built-in simulated planner (§9
// and §12 of the contract). It knows nothing of sessions, connections or events: progress
// is reported through a callback, and the caller decides what it means.
package planner

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Plan is a planner's proposal.
type Plan struct {
	// Summary says what the plan is for, in a sentence. It is the run's
	// plan_summary for as long as the run lasts, also after the user
	// edits the plan at confirmation or an adjustment changes it, so
	// Baton's own summaries state nothing those change (no task count).
	Summary string
	Tasks   []wsproto.Task
	Usage   wsproto.Usage
}

// Request is what a planner plans for.
type Request struct {
	Text string
	// Attempt counts planning attempts of this run, 1 = first.
	Attempt int
	// Feedback says what was wrong with the previous attempt's plan, when
	// it was unusable, so a model can correct itself.
	Feedback string
	// Rejected are the plans the user sent back with user.replan, oldest
	// first, each with the user's feedback: the new plan should answer
	// the last one.
	Rejected []Rejection
	// History is the session's conversation before this run, oldest
	// first: earlier requests and their answers, within the server's
	// history budget.
	History []wsproto.HistoryEntry
}

// Rejection is a plan the user sent back, and why.
type Rejection struct {
	Plan     Plan
	Feedback string
}

// Planner drafts a plan for a request. step is called once per completed
// planning step, in order, with a short description; it must not block for
// long. Plan returns ctx's error promptly when ctx is done, and a
// *failure.Error when it knows what kind of failure it hit.
type Planner interface {
	Plan(ctx context.Context, req Request, step func(description string)) (Plan, error)
}

// Sim is the simulated planner: no network, no key, deterministic output.
type Sim struct {
	// Delay paces the planning steps. Defaults to 0 (no pause).
	Delay time.Duration
}

// RequestChecker is an optional capability of a Planner, found with a type
// assertion: it refuses, before a run starts, requests it could never plan
// as written. Each string is one problem. The simulated planner refuses
// unknown or malformed fault directives.
type RequestChecker interface {
	CheckRequest(text string) []string
}

var (
	_ Planner        = (*Sim)(nil)
	_ RequestChecker = (*Sim)(nil)
)

// CheckRequest implements RequestChecker: every [sim:…] in the request
// must be a request directive with a well-formed value.
func (p *Sim) CheckRequest(text string) []string {
	return sim.Check(text, sim.RequestDirectives)
}

var aspects = []string{
	"Research the background of",
	"Collect examples for",
	"Analyse the constraints of",
	"Compare approaches to",
	"Outline the answer to",
}

// Plan implements Planner: 3 to 6 tasks chosen by a hash of the request
// (and of the user's last feedback, when a plan was sent back); all but
// the last are independent (one, in larger plans, builds on the first),
// and the last depends on every other. The summary quotes the
// conversation's earlier requests (sim.Earlier). [sim:plan_fail=<type>*<n>] in the
// request makes the first n attempts fail with that type.
func (p *Sim) Plan(ctx context.Context, req Request, step func(string)) (Plan, error) {
	request := req.Text
	if typ, n, ok := sim.PlanFail(request); ok && req.Attempt <= n {
		if err := failure.Wait(ctx, p.Delay); err != nil {
			return Plan{}, err
		}
		return Plan{}, &failure.Error{Type: typ, RetryAfter: sim.RetryAfter(request),
			Message: fmt.Sprintf("simulated planning failure of attempt %d (the first %d fail)", req.Attempt, n)}
	}
	topic := sim.Topic(request, 60)
	h := fnv.New32a()
	h.Write([]byte(request))
	revised := ""
	if k := len(req.Rejected); k > 0 {
		feedback := req.Rejected[k-1].Feedback
		h.Write([]byte("\n" + feedback))
		revised = fmt.Sprintf(" (revised: %s)", sim.Topic(feedback, 60))
	}
	n := 3 + int(h.Sum32()%4)

	tasks := make([]wsproto.Task, 0, n)
	final := make([]string, 0, n-1)
	for i := 1; i < n; i++ {
		t := wsproto.Task{
			ID:          fmt.Sprintf("t%d", i),
			Title:       fmt.Sprintf("%s %s", aspects[(i-1)%len(aspects)], topic),
			Description: fmt.Sprintf("Part %d of %d of the work on %q.", i, n, topic),
			DependsOn:   []string{},
		}
		if n >= 5 && i == n-1 {
			t.DependsOn = []string{"t1"}
		}
		tasks = append(tasks, t)
		final = append(final, t.ID)
	}
	tasks = append(tasks, wsproto.Task{
		ID:          fmt.Sprintf("t%d", n),
		Title:       "Write the answer to " + topic,
		Description: "Combine the results of every other task into one answer.",
		DependsOn:   final,
	})

	steps := []string{
		fmt.Sprintf("Read the request (%d characters)", utf8.RuneCountInString(request)),
		fmt.Sprintf("Split the work into %d tasks", n),
		fmt.Sprintf("Ordered the tasks: %d can start at once", n-1-boolInt(n >= 5)),
	}
	for _, s := range steps {
		if err := failure.Wait(ctx, p.Delay); err != nil {
			return Plan{}, err
		}
		step(s)
	}
	return Plan{
		Summary: fmt.Sprintf("Plan ready for %q%s%s", topic, revised, sim.Earlier(req.History)),
		Tasks:   tasks,
	}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
