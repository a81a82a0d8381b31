// Package asyncapitest checks WebSocket frames against Baton's
// machine-readable protocol, docs/asyncapi.yaml: it loads the AsyncAPI
// document, compiles the JSON Schema of every message's payload, validates a
// frame by its event and direction, and records the frames a server
// exchanges on its connections (Tap) so that a test can validate all of
// them.
//
// Only tests use it. It knows the document's shape (operations, channels,
// messages, payloads), nothing of Baton's types.
package asyncapitest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// Direction says who sent a frame.
type Direction int

const (
	// FromClient frames are the messages of the document's send operations.
	FromClient Direction = iota
	// FromServer frames are the messages of its receive operations.
	FromServer
)

func (d Direction) String() string {
	if d == FromClient {
		return "client"
	}
	return "server"
}

// Spec is a loaded AsyncAPI document with the payload schema of each message,
// by direction and event. It is safe for concurrent use.
type Spec struct {
	doc     any
	schemas [2]map[string]*jsonschema.Schema // by Direction, then event
}

// docURL names the document for the compiler and in error messages.
const docURL = "file:///docs/asyncapi.yaml"

// Load reads and compiles the AsyncAPI document at path. The document's
// operations say who sends what (the document describes a client: send is
// client → server); each message's name is its frame's event.
func Load(path string) (*Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var y any
	if err := yaml.Unmarshal(raw, &y); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	// Through JSON, so that numbers are json.Number as the compiler wants
	// them and the document is what a JSON tool would read.
	j, err := json.Marshal(y)
	if err != nil {
		return nil, fmt.Errorf("%s as JSON: %w", path, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7) // AsyncAPI's schema format extends draft 07
	c.AssertFormat()
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	s := &Spec{doc: doc, schemas: [2]map[string]*jsonschema.Schema{{}, {}}}
	ops, _ := lookup(doc, "/operations").(map[string]any)
	if len(ops) == 0 {
		return nil, fmt.Errorf("%s: no operations", path)
	}
	for _, name := range sortedKeys(ops) {
		op, _ := ops[name].(map[string]any)
		dir := map[any]Direction{"send": FromClient, "receive": FromServer}
		d, ok := dir[op["action"]]
		if !ok {
			return nil, fmt.Errorf("%s: operation %s: action %v", path, name, op["action"])
		}
		msgs, _ := op["messages"].([]any)
		for _, m := range msgs {
			ptr, err := resolve(doc, m)
			if err != nil {
				return nil, fmt.Errorf("%s: operation %s: %w", path, name, err)
			}
			event, _ := lookup(doc, ptr+"/name").(string)
			if event == "" {
				return nil, fmt.Errorf("%s: message %s has no name", path, ptr)
			}
			if _, dup := s.schemas[d][event]; dup {
				return nil, fmt.Errorf("%s: %s is sent by two operations", path, event)
			}
			sch, err := c.Compile(docURL + "#" + ptr + "/payload")
			if err != nil {
				return nil, fmt.Errorf("%s: payload of %s: %w", path, event, err)
			}
			s.schemas[d][event] = sch
		}
	}
	return s, nil
}

// Events returns the events the document lets d send, sorted.
func (s *Spec) Events(d Direction) []string { return sortedKeys(s.schemas[d]) }

// Validate checks a frame d sent against its message's payload schema and
// returns the frame's event ("" when it has none).
func (s *Spec) Validate(d Direction, frame []byte) (string, error) {
	if !utf8.Valid(frame) {
		return "", errors.New("not valid UTF-8") // which encoding/json would let through, mended
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(frame))
	if err != nil {
		return "", fmt.Errorf("not JSON: %w", err)
	}
	obj, _ := v.(map[string]any)
	event, _ := obj["event"].(string)
	sch := s.schemas[d][event]
	if sch == nil {
		return event, fmt.Errorf("the document has no message %q sent by the %s", event, d)
	}
	if err := sch.Validate(v); err != nil {
		return event, err // names the instance location and the failing keyword
	}
	return event, nil
}

// Payload returns the payload schema of the message d sends as event, its
// $ref followed, as the document writes it; nil when there is none.
func (s *Spec) Payload(d Direction, event string) map[string]any {
	if s.schemas[d][event] == nil {
		return nil
	}
	msgs, _ := lookup(s.doc, "/components/messages").(map[string]any)
	for key, m := range msgs {
		if name, _ := m.(map[string]any)["name"].(string); name == event {
			ptr, err := resolve(s.doc, lookup(s.doc, "/components/messages/"+key+"/payload"))
			if err != nil {
				return nil
			}
			p, _ := lookup(s.doc, ptr).(map[string]any)
			return p
		}
	}
	return nil
}

// Lookup returns the value at a JSON pointer of the document ("" is the
// whole document), or nil.
func (s *Spec) Lookup(pointer string) any { return lookup(s.doc, pointer) }

// Example is one example payload of a message.
type Example struct {
	Direction Direction
	Message   string // the message's key in components.messages
	Payload   []byte
}

// Examples returns the example payloads of the document's messages, to be
// checked against their own schemas.
func (s *Spec) Examples() ([]Example, error) {
	var out []Example
	msgs, _ := lookup(s.doc, "/components/messages").(map[string]any)
	for _, key := range sortedKeys(msgs) {
		event, _ := lookup(s.doc, "/components/messages/"+key+"/name").(string)
		d := FromServer
		if _, ok := s.schemas[FromClient][event]; ok {
			d = FromClient
		}
		exs, _ := lookup(s.doc, "/components/messages/"+key+"/examples").([]any)
		for i, ex := range exs {
			p, _ := ex.(map[string]any)
			b, err := json.Marshal(p["payload"])
			if err != nil {
				return nil, fmt.Errorf("example %d of %s: %w", i, key, err)
			}
			out = append(out, Example{Direction: d, Message: key, Payload: b})
		}
	}
	return out, nil
}

// resolve follows {"$ref": "#/…"} links from v to the object they end at and
// returns its JSON pointer.
func resolve(doc, v any) (string, error) {
	ptr := ""
	for range 10 {
		ref, _ := v.(map[string]any)["$ref"].(string)
		if ref == "" {
			if ptr == "" {
				return "", errors.New("a message that is not a $ref")
			}
			return ptr, nil
		}
		p, ok := strings.CutPrefix(ref, "#")
		if !ok {
			return "", fmt.Errorf("$ref %q outside the document", ref)
		}
		if v = lookup(doc, p); v == nil {
			return "", fmt.Errorf("$ref %q leads nowhere", ref)
		}
		ptr = p
	}
	return "", errors.New("$ref chain too long")
}

// lookup returns the value at a JSON pointer (RFC 6901) of doc, or nil.
func lookup(doc any, pointer string) any {
	if pointer == "" {
		return doc
	}
	v := doc
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch c := v.(type) {
		case map[string]any:
			v = c[tok]
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
