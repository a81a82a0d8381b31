// Package tool holds what the agent loop can call: the Tool interface an
// embedder implements to give tasks a capability, the Set of tools a task
// is offered, the Group that runs calls so that nobody waits for one past
// its context (a call that goes on is abandoned to the Group, which owns
// its goroutine until it returns), and the read-only workspace tools
// (list_files, read_file, search_files) confined to one directory.
//
// A tool knows nothing of sessions, events or models. It receives a JSON
// object of arguments and returns text; an error is a result too (the loop
// reports it to the model as the tool's failure and goes on), never a task
// failure. What only the operator may see it logs, with the ids of the call
// that the agent loop puts in its context (WithLogAttrs). A call repeated
// after a takeover, because the process that began it died before its
// result came back, carries Retry in its context.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Spec describes a tool to a model.
type Spec struct {
	// Name is what the model calls it: letters, digits, '_' and '-', at
	// most 64 bytes (the OpenAI function-name rule).
	Name string
	// Description tells the model what the tool does and when to use it.
	Description string
	// InputSchema is the JSON Schema of the arguments object. Defaults to
	// an object with no declared properties.
	InputSchema json.RawMessage
	// Confirm marks a tool that changes the world: the user approves each
	// call before it runs (kind tool_confirm).
	Confirm bool
}

// Tool is one capability offered to the agent loop. Call must return
// promptly with ctx's error when ctx is done, and must be safe to call
// concurrently (tasks run in parallel).
type Tool interface {
	Spec() Spec
	// Call runs the tool with args, a JSON object. The returned text is
	// the tool's result; a non-nil error is its failure, shown to the
	// model as the result.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}

// Set is an ordered collection of tools with unique names. The zero value
// is an empty set.
type Set struct {
	tools []Tool
	index map[string]int
}

// Add adds tools to the set. A name already in the set, or one a model
// could not call, is an error and nothing is added.
func (s *Set) Add(tools ...Tool) error {
	names := make(map[string]bool, len(tools))
	for _, t := range tools {
		name := t.Spec().Name
		if !ValidName(name) {
			return fmt.Errorf("tool %q: a name is 1–64 letters, digits, '_' or '-'", name)
		}
		if _, dup := s.index[name]; dup || names[name] {
			return fmt.Errorf("tool %q: already in the set", name)
		}
		names[name] = true
	}
	if s.index == nil {
		s.index = make(map[string]int, len(tools))
	}
	for _, t := range tools {
		s.index[t.Spec().Name] = len(s.tools)
		s.tools = append(s.tools, t)
	}
	return nil
}

// Get returns the tool called name.
func (s *Set) Get(name string) (Tool, bool) {
	i, ok := s.index[name]
	if !ok {
		return nil, false
	}
	return s.tools[i], true
}

// All returns the tools in the order they were added.
func (s *Set) All() []Tool { return slices.Clone(s.tools) }

// Len returns how many tools the set holds.
func (s *Set) Len() int { return len(s.tools) }

// ValidName reports whether a model can call a tool by this name.
func ValidName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}
