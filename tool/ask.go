package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
)

// AskFunc asks the user a question and waits for the answer; ok is false
// when none came (it expired, or ctx is done).
type AskFunc func(ctx context.Context, question, context string) (answer string, ok bool)

type askKey struct{}

// WithAsk returns a context through which a tool can wait for the user:
// the agent loop installs one for every call, bound to the task, and does
// not count the wait against the tool's timeout.
func WithAsk(ctx context.Context, ask AskFunc) context.Context {
	return context.WithValue(ctx, askKey{}, ask)
}

// Ask asks the user through the AskFunc in ctx. A tool called outside an
// agent loop has nobody to ask: that is an error.
func Ask(ctx context.Context, question, context string) (answer string, ok bool, err error) {
	ask, _ := ctx.Value(askKey{}).(AskFunc)
	if ask == nil {
		return "", false, errors.New("there is no user to ask here")
	}
	answer, ok = ask(ctx, question, context)
	return answer, ok, nil
}

// AskUser is the ask_user tool: the model asks the user a question and
// gets the answer as the tool's result. The agent loop offers it to every
// task.
func AskUser() Tool { return askUser{} }

type askUser struct{}

func (askUser) Spec() Spec {
	return Spec{
		Name: "ask_user",
		Description: "Ask the user a question when you cannot go on without their input (a choice, " +
			"a missing fact). The result is their answer. Ask only what you need.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"question":{"type":"string","description":"the question, one sentence"},` +
			`"context":{"type":"string","description":"why you ask, briefly"}},` +
			`"required":["question"],"additionalProperties":false}`),
	}
}

func (askUser) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Question string `json:"question"`
		Context  string `json:"context"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Question) == "" {
		return "", errors.New(`"question" is required`)
	}
	answer, ok, err := Ask(ctx, a.Question, a.Context)
	switch {
	case err != nil:
		return "", err
	case !ok:
		return "The user did not answer in time; go on with your best judgement and say what you assumed.", nil
	}
	return "The user answered: " + answer, nil
}
