package solver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Sim is the simulated model: no network, no key. Each execution reports
// progress in three steps and returns a result derived from the task and
// its dependencies' results. In a task's description, [sim:sleep=<duration>]
// sets how long an execution takes and [sim:fail=<error_type>*<n>] makes the
// first n executions fail with that type after one step
// ([sim:retry_after=<duration>] adds a Retry-After to the failure).
type Sim struct {
	// Delay paces the progress steps when no directive says otherwise.
	// Defaults to 0.
	Delay time.Duration
}

var (
	_ Model       = (*Sim)(nil)
	_ TaskChecker = (*Sim)(nil)
)

// CheckTask implements TaskChecker: every [sim:…] in the description must
// be a task directive with a well-formed value.
func (m *Sim) CheckTask(t wsproto.Task) []string {
	return sim.Check(t.Description, sim.TaskDirectives)
}

const simSteps = 3

// Solve implements Model.
func (m *Sim) Solve(ctx context.Context, in Input, progress func(float64, string)) (Result, error) {
	step := m.Delay
	if d, ok := sim.Sleep(in.Task.Description); ok {
		step = d / simSteps
	}
	messages := [simSteps]string{"Gathering material", "Working through it", "Checking the result"}
	for i, msg := range messages {
		if err := failure.Wait(ctx, step); err != nil {
			return Result{}, err
		}
		if typ, n, ok := sim.Fail(in.Task.Description); ok && i == 0 && in.Attempt <= n {
			return Result{}, &failure.Error{Type: typ, RetryAfter: sim.RetryAfter(in.Task.Description),
				Message: fmt.Sprintf("simulated failure of execution %d (the first %d fail)", in.Attempt, n)}
		}
		progress(float64(i+1)/simSteps, msg)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: done", sim.Topic(in.Task.Title, 80))
	if len(in.Dependencies) > 0 {
		deps := make([]string, 0, len(in.Dependencies))
		for id := range in.Dependencies {
			deps = append(deps, id)
		}
		sort.Strings(deps)
		fmt.Fprintf(&b, ", building on %s", strings.Join(deps, ", "))
	}
	b.WriteString(".")
	return Result{Text: b.String()}, nil
}
