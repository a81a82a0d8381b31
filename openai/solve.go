package openai

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

const solveSystem = `You are one worker of a task pipeline. You are given the user's request, the
plan, every task with its status, and the results of the tasks yours depends on. Do only your
task, and reply with its result.`

// Solve implements solver.Model: one streamed completion whose prompt
// carries the request, the plan summary, the whole task list with each
// task's status, and the dependencies' results truncated to the budget.
// Streamed text becomes progress reports, at most one per
// ProgressInterval, each with the text since the previous one.
func (c *Client) Solve(ctx context.Context, in solver.Input, progress func(float64, string)) (solver.Result, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Request:\n%s\n\nPlan: %s\n\nTasks:\n", in.Request, in.PlanSummary)
	for _, t := range in.Tasks {
		fmt.Fprintf(&b, "- [%s] %s: %s", t.Status, t.Task.ID, t.Task.Title)
		if len(t.Task.DependsOn) > 0 {
			fmt.Fprintf(&b, " (after %s)", strings.Join(t.Task.DependsOn, ", "))
		}
		b.WriteByte('\n')
	}
	if len(in.Dependencies) > 0 {
		b.WriteString("\nResults of the tasks yours depends on:\n")
		ids := make([]string, 0, len(in.Dependencies))
		for id := range in.Dependencies {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		each := c.cfg.ResultBudget / len(ids)
		for _, id := range ids {
			fmt.Fprintf(&b, "### %s\n%s\n", id, truncate(in.Dependencies[id], each))
		}
	}
	fmt.Fprintf(&b, "\nYour task: %s — %s\n%s\n", in.Task.ID, in.Task.Title, in.Task.Description)

	expect := float64(c.cfg.MaxOutputTokens) * 4 // bytes, at ~4 bytes a token
	seen := 0
	co := &coalescer{interval: c.cfg.ProgressInterval, now: c.now}
	co.emit = func(text string) {
		progress(min(float64(seen)/expect, 0.95), text)
	}
	text, usage, err := c.stream(ctx, c.request([]goopenai.ChatCompletionMessage{
		{Role: goopenai.ChatMessageRoleSystem, Content: solveSystem},
		{Role: goopenai.ChatMessageRoleUser, Content: b.String()},
	}), func(piece string) {
		seen += len(piece)
		co.add(piece)
	})
	if err != nil {
		return solver.Result{}, err
	}
	progress(1, co.rest()) // the last report says done, with any text not yet reported
	return solver.Result{Text: text, Usage: usage}, nil
}

const aggregateSystem = `You write the final answer of a task pipeline. You are given the user's
request and the outcome of every task. Combine the completed results into one answer to the
request. If no task completed, explain what went wrong instead.`

// Aggregate implements aggregator.Aggregator: a streamed summary of every
// task's outcome; the whole text is both the summary and the answer.
func (c *Client) Aggregate(ctx context.Context, in aggregator.Input, stream func(string)) (aggregator.Output, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Request:\n%s\n\nPlan: %s\n\n", in.Request, in.PlanSummary)
	each := c.cfg.ResultBudget / max(1, len(in.Tasks))
	for _, t := range in.Tasks {
		fmt.Fprintf(&b, "### %s: %s [%s]\n", t.Task.ID, t.Task.Title, t.Status)
		switch t.Status {
		case wsproto.TaskCompleted:
			b.WriteString(truncate(t.Result, each))
		case wsproto.TaskFailed:
			b.WriteString("Error: " + t.Error)
		}
		b.WriteString("\n\n")
	}
	co := &coalescer{interval: c.cfg.ProgressInterval, now: c.now, emit: stream}
	text, usage, err := c.stream(ctx, c.request([]goopenai.ChatCompletionMessage{
		{Role: goopenai.ChatMessageRoleSystem, Content: aggregateSystem},
		{Role: goopenai.ChatMessageRoleUser, Content: b.String()},
	}), co.add)
	if err != nil {
		return aggregator.Output{}, err
	}
	co.flush()
	return aggregator.Output{Summary: text, Answer: text, Usage: usage}, nil
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(" […]"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " […]"
}
