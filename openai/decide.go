package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

const decideSystem = `You steer a pipeline of tasks while it runs. A task has just completed. Given the
user's request, the plan, where each task stands and what the user has answered, decide what
happens next. Reply with one JSON object:
{"action": "continue" | "adjust_plan" | "request_input" | "synthesize", "reason": "<one sentence>",
 "add": [{"id": "<new unique id>", "title": "<short>", "description": "<what to do>", "depends_on": ["<ids>"]}],
 "remove": ["<ids of pending tasks>"], "question": "<for request_input>"}
continue: the plan stands (the usual answer). adjust_plan: add tasks (they may depend on any
task) and/or remove tasks that are still pending. request_input: ask the user one question only
they can answer. synthesize: enough is known to answer the request now; pending tasks are
dropped. Leave add, remove and question empty when the action does not use them.`

// decisionSchema is the JSON schema of a decision for servers with
// structured output.
var decisionSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["action", "reason", "add", "remove", "question"],
  "properties": {
    "action": {"type": "string", "enum": ["continue", "adjust_plan", "request_input", "synthesize"]},
    "reason": {"type": "string"},
    "add": {"type": "array", "items": ` + taskSchema + `},
    "remove": {"type": "array", "items": {"type": "string"}},
    "question": {"type": "string"}
  }
}`)

var _ planner.Decider = (*Client)(nil)

// Decide implements planner.Decider: one completion with the request, the
// plan, each task's status and result (within ResultBudget), the user's
// answers and, on a second try, what was wrong with the first. It asks for
// structured output, and for plain JSON from a server that refuses it (as
// Plan does). An unparseable reply is a validation error.
func (c *Client) Decide(ctx context.Context, in planner.DecideInput) (planner.Decision, error) {
	msgs := []goopenai.ChatCompletionMessage{
		{Role: goopenai.ChatMessageRoleSystem, Content: decideSystem},
		{Role: goopenai.ChatMessageRoleUser, Content: c.decidePrompt(in)},
	}
	for {
		structured := !c.noSchema.Load()
		r := c.request(msgs)
		if structured {
			r.ResponseFormat = &goopenai.ChatCompletionResponseFormat{
				Type: goopenai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &goopenai.ChatCompletionResponseFormatJSONSchema{
					Name: "decision", Schema: decisionSchema, Strict: true},
			}
		}
		out, err := c.stream(ctx, r, 0, func(string) {})
		if err != nil && structured && schemaRefused(err) {
			c.noSchema.Store(true)
			continue
		}
		if err != nil {
			return planner.Decision{}, err
		}
		d, perr := parseDecision(out.text)
		if perr != nil {
			return planner.Decision{Usage: out.usage}, &failure.Error{Type: failure.Validation, Err: perr}
		}
		d.Usage = out.usage
		return d, nil
	}
}

// decidePrompt lays out what the decide step sees.
func (c *Client) decidePrompt(in planner.DecideInput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Request:\n%s\n\nPlan: %s\n\nTasks:\n", in.Request, in.PlanSummary)
	each := c.cfg.ResultBudget / max(1, len(in.Tasks))
	for _, t := range in.Tasks {
		fmt.Fprintf(&b, "- %s [%s] %s", t.ID, t.Status, t.Title)
		if len(t.DependsOn) > 0 {
			fmt.Fprintf(&b, " (after %s)", strings.Join(t.DependsOn, ", "))
		}
		b.WriteByte('\n')
		switch {
		case t.Result != "":
			fmt.Fprintf(&b, "  Result: %s\n", solver.Truncate(t.Result, each))
		case t.Error != "":
			fmt.Fprintf(&b, "  Error: %s\n", solver.Truncate(t.Error, each))
		}
	}
	fmt.Fprintf(&b, "\nThe task that has just completed: %s\n", in.AfterTask)
	if len(in.Answers) > 0 {
		b.WriteString("\nThe user's answers:\n")
		for _, a := range in.Answers {
			fmt.Fprintf(&b, "- Q: %s\n  A: %s\n", a.Question, a.Text)
		}
	}
	if in.Feedback != "" {
		fmt.Fprintf(&b, "\nYour previous decision could not be used: %s. Decide again.\n", in.Feedback)
	}
	return b.String()
}

// parseDecision reads a decision from a reply that should be one JSON
// object, tolerating a Markdown code fence or prose around it.
func parseDecision(text string) (planner.Decision, error) {
	start, end := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if start < 0 || end < start {
		return planner.Decision{}, errors.New("the reply holds no JSON object")
	}
	var d struct {
		Action   string         `json:"action"`
		Reason   string         `json:"reason"`
		Add      []wsproto.Task `json:"add"`
		Remove   []string       `json:"remove"`
		Question string         `json:"question"`
		Context  string         `json:"context"`
	}
	if err := json.Unmarshal([]byte(text[start:end+1]), &d); err != nil {
		return planner.Decision{}, fmt.Errorf("the reply is not a decision: %w", err)
	}
	if d.Action == "" {
		return planner.Decision{}, errors.New(`the reply has no "action"`)
	}
	return planner.Decision{Action: d.Action, Reason: d.Reason, Add: wsproto.NormalizeTasks(d.Add), Remove: d.Remove,
		Question: d.Question, Context: d.Context}, nil
}
