package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/wsproto"
)

const planSystem = `You are the planner of a task pipeline. Break the user's request into a small
plan of tasks that can be worked on separately and then combined. Reply with one JSON object:
{"summary": "<one sentence>", "tasks": [{"id": "t1", "title": "<short>", "description": "<what to do>", "depends_on": []}]}
Use 2 to 8 tasks, short unique ids, non-empty titles, and depends_on listing only ids of earlier
tasks. Let independent tasks have no dependencies so they can run in parallel, and end with a
task that depends on the others and produces the answer.`

// taskSchema is the JSON schema of one task, in a plan and in an
// adjustment of it.
const taskSchema = `{
      "type": "object",
      "additionalProperties": false,
      "required": ["id", "title", "description", "depends_on"],
      "properties": {
        "id": {"type": "string"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "depends_on": {"type": "array", "items": {"type": "string"}}
      }
    }`

// planSchema is the JSON schema of a plan for servers with structured output.
var planSchema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["summary", "tasks"],
  "properties": {
    "summary": {"type": "string"},
    "tasks": {"type": "array", "items": ` + taskSchema + `}
  }
}`)

// titleField finds complete "title" values in a partial JSON text, so plan
// steps can be reported while the plan is still streaming.
var titleField = regexp.MustCompile(`"title"\s*:\s*"((?:[^"\\]|\\.)*)"`)

// Plan implements planner.Planner. It asks for the plan as structured
// output; a server that refuses the json_schema response format is asked
// for plain JSON from then on. Each task title that appears in the stream
// is a planning step. An unparseable reply is a validation error.
func (c *Client) Plan(ctx context.Context, req planner.Request, step func(string)) (planner.Plan, error) {
	msgs := append(append([]goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleSystem, Content: planSystem}},
		priorTurns(req.History)...),
		goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser, Content: req.Text})
	// The plans the user sent back, as the conversation they were: the
	// plan the model proposed, then the user's feedback on it.
	for _, rj := range req.Rejected {
		msgs = append(msgs,
			goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleAssistant, Content: planText(rj.Plan)},
			goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser,
				Content: "I do not accept this plan. My feedback: " + rj.Feedback + "\nReply with a new plan that takes it into account."})
	}
	if req.Feedback != "" {
		msgs = append(msgs, goopenai.ChatCompletionMessage{Role: goopenai.ChatMessageRoleUser,
			Content: "Your previous plan could not be used: " + req.Feedback + ". Reply with a corrected plan."})
	}
	for {
		structured := !c.noSchema.Load()
		r := c.request(msgs)
		if structured {
			r.ResponseFormat = &goopenai.ChatCompletionResponseFormat{
				Type: goopenai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &goopenai.ChatCompletionResponseFormatJSONSchema{
					Name: "plan", Schema: planSchema, Strict: true},
			}
		}
		steps := 0
		var text strings.Builder
		out, err := c.stream(ctx, r, 0, func(piece string) {
			text.WriteString(piece)
			for _, m := range titleField.FindAllStringSubmatch(text.String(), -1)[steps:] {
				steps++
				step(fmt.Sprintf("Drafted task %d: %s", steps, unquote(m[1])))
			}
		})
		if err != nil && structured && schemaRefused(err) {
			c.noSchema.Store(true)
			continue
		}
		if err != nil {
			return planner.Plan{}, err
		}
		plan, perr := parsePlan(out.text)
		if perr != nil {
			return planner.Plan{}, &failure.Error{Type: failure.Validation, Message: perr.Error(), Err: perr}
		}
		plan.Usage = out.usage
		step(fmt.Sprintf("Checked the plan: %d tasks", len(plan.Tasks)))
		return plan, nil
	}
}

// schemaRefused tells a server that does not support the json_schema
// response format from other bad requests.
func schemaRefused(err error) bool {
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Type != failure.Permanent {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "response_format") || strings.Contains(msg, "json_schema")
}

// parsePlan reads a plan from a reply that should be one JSON object,
// tolerating a Markdown code fence or prose around it.
func parsePlan(text string) (planner.Plan, error) {
	start, end := strings.Index(text, "{"), strings.LastIndex(text, "}")
	if start < 0 || end < start {
		return planner.Plan{}, errors.New("the reply holds no JSON object")
	}
	var p struct {
		Summary string         `json:"summary"`
		Tasks   []wsproto.Task `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(text[start:end+1]), &p); err != nil {
		return planner.Plan{}, fmt.Errorf("the reply is not a plan: %w", err)
	}
	wsproto.NormalizeTasks(p.Tasks)
	if p.Summary == "" {
		// Not the task count: the user may edit the plan (planner.Plan).
		p.Summary = "Plan ready"
	}
	return planner.Plan{Summary: p.Summary, Tasks: p.Tasks}, nil
}

// planText is a plan as the JSON object the model is asked to reply with.
func planText(p planner.Plan) string {
	b, err := json.Marshal(struct {
		Summary string         `json:"summary"`
		Tasks   []wsproto.Task `json:"tasks"`
	}{p.Summary, p.Tasks})
	if err != nil {
		return p.Summary
	}
	return string(b)
}

func unquote(s string) string {
	var out string
	if err := json.Unmarshal([]byte(`"`+s+`"`), &out); err != nil {
		return s
	}
	return out
}
