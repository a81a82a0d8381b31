package wsproto

import (
	"encoding/json"
	"math"
	"strconv"
)

// The metadata of the events a run emits most — a task's start, progress
// and end, its tool calls and todo list, the planner's steps and the
// aggregator's progress — is encoded by hand, without reflection: these
// are most of a run's frames, and encoding/json costs them more than the
// rest of the envelope. Every method writes exactly the bytes json.Marshal
// writes for the same value (field order, omitempty, escaping, null for a
// nil slice); metajson_test.go holds them to it, fuzzing included. Every
// other metadata type goes through encoding/json.

// metadataAppender is metadata that appends its own JSON encoding. ok is
// false when it cannot write what encoding/json would — json.Marshal then
// does the work, and reports the error if there is one (a NaN progress,
// arguments that are not JSON, a nil pointer) — and dst is then returned
// at its length.
type metadataAppender interface {
	appendJSON(dst []byte) (b []byte, ok bool)
}

var (
	_ metadataAppender = (*SolverStart)(nil)
	_ metadataAppender = (*SolverProgress)(nil)
	_ metadataAppender = (*SolverCompleted)(nil)
	_ metadataAppender = (*ToolCall)(nil)
	_ metadataAppender = (*ToolResult)(nil)
	_ metadataAppender = (*TodoUpdated)(nil)
	_ metadataAppender = (*TodoItemProgress)(nil)
	_ metadataAppender = (*TodoCompleted)(nil)
	_ metadataAppender = (*PlanStep)(nil)
	_ metadataAppender = (*AggregateProgress)(nil)
)

func (m *SolverStart) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil || m.Mode != "" || m.Task != nil {
		return dst, false // a chat run's: rare, left to encoding/json
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"attempt":`, int64(m.Attempt))
	return append(dst, '}'), true
}

func (m *SolverProgress) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	start := len(dst)
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"attempt":`, int64(m.Attempt))
	dst, ok := appendFloat(append(dst, `,"progress":`...), m.Progress)
	if !ok {
		return dst[:start], false
	}
	dst = appendStringField(dst, `,"message":`, m.Message)
	return append(dst, '}'), true
}

func (m *SolverCompleted) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"attempt":`, int64(m.Attempt))
	dst = appendStringField(dst, `,"result":`, m.Result)
	dst = appendIntField(dst, `,"duration_ms":`, m.DurationMS)
	dst = appendIntField(dst, `,"usage":{"prompt_tokens":`, int64(m.Usage.PromptTokens))
	dst = appendIntField(dst, `,"completion_tokens":`, int64(m.Usage.CompletionTokens))
	dst = appendIntField(dst, `,"total_tokens":`, int64(m.Usage.TotalTokens))
	dst = append(dst, '}')
	if m.Truncated {
		dst = append(dst, `,"truncated":true`...)
	}
	if m.OriginalBytes != 0 {
		dst = appendIntField(dst, `,"original_bytes":`, int64(m.OriginalBytes))
	}
	return append(dst, '}'), true
}

func (m *ToolCall) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	start := len(dst)
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"attempt":`, int64(m.Attempt))
	dst = appendIntField(dst, `,"round":`, int64(m.Round))
	dst = appendStringField(dst, `,"step_id":`, m.StepID)
	dst = appendStringField(dst, `,"tool":`, m.Tool)
	dst, ok := appendRaw(append(dst, `,"arguments":`...), m.Arguments)
	if !ok {
		return dst[:start], false
	}
	return append(dst, '}'), true
}

func (m *ToolResult) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"attempt":`, int64(m.Attempt))
	dst = appendIntField(dst, `,"round":`, int64(m.Round))
	dst = appendStringField(dst, `,"step_id":`, m.StepID)
	dst = appendStringField(dst, `,"tool":`, m.Tool)
	dst = appendBoolField(dst, `,"ok":`, m.OK)
	dst = appendStringField(dst, `,"result":`, m.Result)
	dst = appendBoolField(dst, `,"truncated":`, m.Truncated)
	dst = appendIntField(dst, `,"duration_ms":`, m.DurationMS)
	return append(dst, '}'), true
}

func (m *TodoUpdated) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"version":`, int64(m.Version))
	dst = append(dst, `,"items":`...)
	if m.Items == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range m.Items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendTodoItem(dst, &m.Items[i])
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

func (m *TodoItemProgress) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"version":`, int64(m.Version))
	dst = appendTodoItem(append(dst, `,"item":`...), &m.Item)
	return append(dst, '}'), true
}

func (m *TodoCompleted) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"task_id":`, m.TaskID)
	dst = appendIntField(dst, `,"version":`, int64(m.Version))
	return append(dst, '}'), true
}

func (m *PlanStep) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendIntField(dst, `,"step":`, int64(m.Step))
	dst = appendStringField(dst, `,"description":`, m.Description)
	return append(dst, '}'), true
}

func (m *AggregateProgress) appendJSON(dst []byte) ([]byte, bool) {
	if m == nil {
		return dst, false
	}
	dst = appendStringField(dst, `{"run_id":`, m.RunID)
	dst = appendStringField(dst, `,"message":`, m.Message)
	return append(dst, '}'), true
}

func appendTodoItem(dst []byte, it *TodoItem) []byte {
	dst = appendStringField(dst, `{"id":`, it.ID)
	dst = appendStringField(dst, `,"content":`, it.Content)
	dst = appendStringField(dst, `,"status":`, it.Status)
	dst = appendIntField(dst, `,"tool_calls":`, int64(it.ToolCalls))
	if it.Note != "" {
		dst = appendStringField(dst, `,"note":`, it.Note)
	}
	return append(dst, '}')
}

// appendStringField appends key (the comma, quoted name and colon) and s.
func appendStringField(dst []byte, key, s string) []byte {
	return appendString(append(dst, key...), s)
}

func appendIntField(dst []byte, key string, n int64) []byte {
	return strconv.AppendInt(append(dst, key...), n, 10)
}

func appendBoolField(dst []byte, key string, v bool) []byte {
	return strconv.AppendBool(append(dst, key...), v)
}

// appendFloat appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, in exponent form below 1e-6 and from 1e21
// on, the exponent without a leading zero. ok is false for NaN and the
// infinities, which encoding/json refuses.
func appendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-07 → e-7
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendRaw appends raw as encoding/json writes a json.RawMessage: null
// when nil, otherwise compacted, with <, >, &, U+2028 and U+2029 escaped
// (as encoding/json escapes the output of every Marshaler). ok is false
// when raw is not valid JSON, which encoding/json refuses.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(dst, "null"...), true
	}
	if !json.Valid(raw) {
		return dst, false
	}
	// Valid JSON has whitespace to drop only between tokens, and <, >, &
	// and the separators only inside strings.
	inString, escaped := false, false
	start := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, raw[start:i]...)
			start = i + 1
			continue
		}
		switch {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && raw[i+2]&^1 == 0xA8:
			dst = append(dst, raw[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[raw[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, raw[start:]...), true
}
