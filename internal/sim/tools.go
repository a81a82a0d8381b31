package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ToolCall is a [sim:tool=NAME {json}] directive: the simulated model
// calls tool NAME with those arguments.
type ToolCall struct {
	Name string
	Args json.RawMessage
}

const toolPrefix = "[sim:tool="

// Tools returns the [sim:tool=NAME {json}] directives of text in order,
// and the problems of the malformed ones. The arguments are read with a
// JSON decoder, so they may hold ']'.
func Tools(text string) (calls []ToolCall, probs []string) {
	for rest := text; ; {
		i := strings.Index(rest, toolPrefix)
		if i < 0 {
			return calls, probs
		}
		rest = rest[i+len(toolPrefix):]
		name, after, _ := strings.Cut(rest, " ")
		if name == "" || strings.ContainsAny(name, "]{") {
			probs = append(probs, fmt.Sprintf("directive %s…: want [sim:tool=NAME {json arguments}]", toolPrefix+Topic(rest, 20)))
			continue
		}
		dec := json.NewDecoder(strings.NewReader(after))
		var args json.RawMessage
		if err := dec.Decode(&args); err != nil || !bytes.HasPrefix(bytes.TrimSpace(args), []byte("{")) {
			probs = append(probs, fmt.Sprintf("directive %s%s …: the arguments must be a JSON object", toolPrefix, name))
			continue
		}
		tail := strings.TrimLeft(after[dec.InputOffset():], " ")
		if !strings.HasPrefix(tail, "]") {
			probs = append(probs, fmt.Sprintf("directive %s%s …: missing the closing ]", toolPrefix, name))
			continue
		}
		calls = append(calls, ToolCall{Name: name, Args: args})
		rest = tail[1:]
	}
}

// withoutTools returns text with its well-formed tool directives removed,
// for the checks that read the others.
func withoutTools(text string) string {
	var b strings.Builder
	for rest := text; ; {
		i := strings.Index(rest, toolPrefix)
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i])
		rest = rest[i+len(toolPrefix):]
		_, after, _ := strings.Cut(rest, " ")
		dec := json.NewDecoder(strings.NewReader(after))
		var args json.RawMessage
		if dec.Decode(&args) == nil {
			if tail := strings.TrimLeft(after[dec.InputOffset():], " "); strings.HasPrefix(tail, "]") {
				rest = tail[1:]
				continue
			}
		}
		b.WriteString("[sim:tool=") // malformed: left for Check to report once
		b.WriteString(rest)
		return b.String()
	}
}

// Ask returns the question of a [sim:ask=QUESTION] directive.
func Ask(text string) (string, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if m[1] == "ask" && strings.TrimSpace(m[2]) != "" {
			return m[2], true
		}
	}
	return "", false
}
