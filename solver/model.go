package solver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// Model takes one turn of a task's agent loop (§10): given the
// conversation so far and the tools offered, it answers with text — the
// task's result — or asks for tool calls. progress reports a fraction in
// [0, 1] and a short message (streamed text, say); it must not block for
// long. Turn returns promptly with ctx's error when ctx is done, and a
// *failure.Error when it knows what kind of failure it hit.
type Model interface {
	Turn(ctx context.Context, t *Turn, progress func(fraction float64, message string)) (Reply, error)
}

// Turn is what a model gets for one round of the loop.
type Turn struct {
	Input
	// Round counts from 1; the last is MaxRounds, or the round after the
	// todo list was completed. Tools is empty in the last round: the model
	// must answer.
	Round, MaxRounds int
	Tools            []tool.Spec
	// Todo is the task's todo list as it stands (empty until written).
	Todo []wsproto.TodoItem
	// Answers are the questions the user has answered in this run.
	Answers []Answer
	// Messages is the conversation to send: the system prompt, freshly
	// built for this round from everything above (never stacked), the
	// task, then the model's replies and the tools' results, older tool
	// results elided to fit the context budget.
	Messages []Message
	// MaxReplyBytes is the most of the reply's text the run keeps
	// (Options.MaxResultBytes): a model need not build more than a few
	// bytes past it, and says how long the whole text was in
	// Reply.TextBytes.
	MaxReplyBytes int
}

// Answer is a question the user answered.
type Answer struct {
	Question string
	Text     string
}

// Roles of a Message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one message of the conversation, in the shape chat
// completion APIs share.
type Message struct {
	Role    string
	Content string
	// ToolCalls are an assistant message's calls.
	ToolCalls []ToolCall
	// ToolCallID is the call a tool message answers.
	ToolCallID string
}

// ToolCall is a call the model asked for. Arguments is the text the model
// produced, which should be a JSON object but may not be: the loop answers
// bad arguments with an error result, not a task failure.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Reply is a model's turn: tool calls to run, or (with none) the answer.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	Usage     wsproto.Usage
	// TextBytes is the length the text had before the model stopped
	// keeping it, past Turn.MaxReplyBytes; 0 when Text is whole.
	TextBytes int
}

// argsObject returns the call's arguments as a JSON object for the events
// and the tool, or an error a model can act on.
func (c ToolCall) argsObject() (json.RawMessage, error) {
	if c.Arguments == "" {
		return json.RawMessage("{}"), nil
	}
	args := json.RawMessage(strings.TrimSpace(c.Arguments))
	if len(args) == 0 || args[0] != '{' || !json.Valid(args) {
		return nil, errBadArguments
	}
	return args, nil
}
