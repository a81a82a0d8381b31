package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// Turn implements solver.Model: one streamed completion of a round of the
// agent loop, with the round's tools offered as functions. The solver
// builds the conversation (system prompt, task, earlier rounds); Turn maps
// it onto chat messages, streams the reply, and gathers tool calls from
// their deltas. Streamed text becomes progress reports, at most one per
// ProgressInterval, each with the text since the previous one.
func (c *Client) Turn(ctx context.Context, t *solver.Turn, progress func(float64, string)) (solver.Reply, error) {
	req := c.request(chatMessages(t.Messages))
	for _, spec := range t.Tools {
		params := spec.InputSchema
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		req.Tools = append(req.Tools, goopenai.Tool{Type: goopenai.ToolTypeFunction, Function: &goopenai.FunctionDefinition{
			Name: spec.Name, Description: spec.Description, Parameters: params}})
	}
	// Progress runs through the rounds: round r of n reports within
	// [(r-1)/n, r/n), by the text streamed against what a full reply
	// would hold.
	rounds := float64(max(t.MaxRounds, 1))
	base := float64(t.Round-1) / rounds
	expect := float64(c.cfg.MaxOutputTokens) * 4 // bytes, at ~4 bytes a token
	seen := 0
	co := &coalescer{interval: c.cfg.ProgressInterval, now: c.now}
	co.emit = func(text string) {
		progress(min(base+float64(seen)/expect/rounds, 0.95), text)
	}
	out, err := c.stream(ctx, req, t.MaxReplyBytes, func(piece string) {
		seen += len(piece)
		co.add(piece)
	})
	if err != nil {
		return solver.Reply{Usage: out.usage}, err
	}
	if len(out.calls) == 0 {
		progress(1, co.rest()) // the answer: done, with any text not yet reported
	} else {
		co.flush()
	}
	return solver.Reply{Text: out.text, ToolCalls: out.calls, Usage: out.usage, TextBytes: out.textBytes}, nil
}

// chatMessages maps the loop's conversation onto chat messages.
func chatMessages(msgs []solver.Message) []goopenai.ChatCompletionMessage {
	out := make([]goopenai.ChatCompletionMessage, len(msgs))
	for i, m := range msgs {
		out[i] = goopenai.ChatCompletionMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, call := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, goopenai.ToolCall{ID: call.ID, Type: goopenai.ToolTypeFunction,
				Function: goopenai.FunctionCall{Name: call.Name, Arguments: call.Arguments}})
		}
	}
	return out
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
			b.WriteString(solver.Truncate(t.Result, each))
		case wsproto.TaskFailed:
			b.WriteString("Error: " + t.Error)
		}
		b.WriteString("\n\n")
	}
	co := &coalescer{interval: c.cfg.ProgressInterval, now: c.now, emit: stream}
	msgs := append(append([]goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleSystem, Content: aggregateSystem}},
		priorTurns(in.History)...),
		goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: b.String()})
	out, err := c.stream(ctx, c.request(msgs), 0, co.add)
	if err != nil {
		return aggregator.Output{}, err
	}
	co.flush()
	return aggregator.Output{Summary: out.text, Answer: out.text, Usage: out.usage}, nil
}

// priorTurns are the session's earlier runs as the conversation they were:
// each request a user turn, its answer an assistant turn (a run that gave
// none says how it ended), between the system prompt and this run's
// request. The agent loop's turns come the same way, from the solver.
func priorTurns(history []wsproto.HistoryEntry) []goopenai.ChatCompletionMessage {
	out := make([]goopenai.ChatCompletionMessage, 0, 2*len(history))
	for _, h := range history {
		answer := h.Answer
		if answer == "" {
			answer = "(this run ended without an answer: " + h.Status + ")"
		}
		out = append(out,
			goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: h.Request},
			goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleAssistant, Content: answer})
	}
	return out
}
