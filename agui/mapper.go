package agui

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// Event is one AG-UI event, as its JSON object.
type Event map[string]any

// frame is a server frame of /ws.
type frame struct {
	Event     string          `json:"event"`
	Seq       uint64          `json:"seq"`
	StepID    string          `json:"step_id"`
	Content   string          `json:"content"`
	Timestamp time.Time       `json:"timestamp"`
	Metadata  json.RawMessage `json:"metadata"`
}

// mapper turns the sequenced events of one AG-UI stream into AG-UI
// events. What it keeps — the steps, text message and tool calls it has
// opened and not closed — is made by the events of this stream alone, so
// the same events always map to the same AG-UI events (see the package
// doc). Not safe for concurrent use.
type mapper struct {
	threadID, runID string
	// steps are the steps opened and not finished, by name.
	steps map[string]bool
	// text is the id of the text message opened and not ended, "" when
	// none; textRun is its Baton run.
	text, textRun string
	// streamed are the Baton runs whose answer streamed as a text message
	// in this stream (chat runs): their final answer is not sent again.
	streamed map[string]bool
	// chat are the chat runs seen starting in this stream.
	chat map[string]bool
	// done is set once the stream's last event is made.
	done bool
}

func newMapper(threadID, runID string) *mapper {
	return &mapper{threadID: threadID, runID: runID, steps: map[string]bool{}, streamed: map[string]bool{}, chat: map[string]bool{}}
}

// event maps one sequenced frame: its state delta first, if any, then the
// rest. The result ends with RUN_FINISHED or RUN_ERROR when the frame ends
// the stream (m.done is then set).
func (m *mapper) event(f frame) []Event {
	meta, err := wsproto.DecodeMetadata(f.Event, f.Metadata)
	if err != nil {
		meta = nil
	}
	ts := f.Timestamp.UnixMilli()
	var out []Event
	emit := func(e Event) {
		if ts > 0 {
			e["timestamp"] = ts
		}
		out = append(out, e)
	}
	if ops := delta(meta); ops != nil {
		emit(Event{"type": "STATE_DELTA", "delta": ops})
	}
	switch mt := meta.(type) {
	case *wsproto.PlanStart:
		m.finishStep(emit, "planning")
		emit(Event{"type": "STEP_STARTED", "stepName": "planning"})
		m.steps["planning"] = true
	case *wsproto.PlanStep:
		name := fmt.Sprintf("plan step %d", mt.Step)
		emit(Event{"type": "STEP_STARTED", "stepName": name})
		emit(Event{"type": "STEP_FINISHED", "stepName": name})
	case *wsproto.PlanCompleted:
		m.finishStep(emit, "planning")
	case *wsproto.UserConfirm:
		m.closeAll(emit)
		emit(m.finished(Event{"type": "interrupt", "interrupts": []any{interruptOf(f, mt)}}, nil))
	case *wsproto.PlanCancelled:
		m.closeAll(emit)
		if mt.Reason == wsproto.ReasonPlanFailed {
			msg := mt.Error
			if msg == "" {
				msg = "planning failed"
			}
			emit(m.failed(msg, mt.Reason))
			break
		}
		emit(m.finished(Event{"type": "cancelled"}, nil))
	case *wsproto.PipelineCancelled:
		m.closeAll(emit)
		emit(m.finished(Event{"type": "cancelled"}, nil))
	case *wsproto.SolverStart:
		m.endText(emit)
		if mt.Mode == wsproto.ModeChat {
			m.chat[mt.RunID] = true
		}
		step := "task " + mt.TaskID
		m.finishStep(emit, step)
		emit(Event{"type": "STEP_STARTED", "stepName": step})
		m.steps[step] = true
	case *wsproto.SolverProgress:
		if !m.chat[mt.RunID] {
			emit(custom(f))
			break
		}
		// A chat run's progress is the model's text as it writes it.
		if mt.Message == "" {
			break
		}
		if m.text == "" {
			m.text, m.textRun = fmt.Sprintf("text-%s-%s-%d", mt.RunID, mt.TaskID, f.Seq), mt.RunID
			m.streamed[mt.RunID] = true
			emit(Event{"type": "TEXT_MESSAGE_START", "messageId": m.text, "role": "assistant"})
		}
		emit(Event{"type": "TEXT_MESSAGE_CONTENT", "messageId": m.text, "delta": mt.Message})
	case *wsproto.SolverCompleted:
		m.endText(emit)
		m.finishStep(emit, "task "+mt.TaskID)
	case *wsproto.SolverCancelled:
		m.endText(emit)
		m.finishStep(emit, "task "+mt.TaskID)
		emit(custom(f))
	case *wsproto.ExecutionError:
		m.endText(emit)
		if mt.TaskID != "" {
			m.finishStep(emit, "task "+mt.TaskID)
		}
		emit(custom(f))
	case *wsproto.ToolCall:
		m.endText(emit)
		args := string(mt.Arguments)
		if args == "" {
			args = "{}"
		}
		emit(Event{"type": "TOOL_CALL_START", "toolCallId": mt.StepID, "toolCallName": mt.Tool})
		emit(Event{"type": "TOOL_CALL_ARGS", "toolCallId": mt.StepID, "delta": args})
		emit(Event{"type": "TOOL_CALL_END", "toolCallId": mt.StepID})
	case *wsproto.ToolResult:
		emit(Event{"type": "TOOL_CALL_RESULT", "messageId": "result-" + mt.StepID, "toolCallId": mt.StepID,
			"content": mt.Result, "role": "tool"})
	case *wsproto.AggregateStart:
		m.endText(emit)
		emit(Event{"type": "STEP_STARTED", "stepName": "aggregate"})
		m.steps["aggregate"] = true
	case *wsproto.AggregateProgress:
		if mt.Message == "" {
			break
		}
		if m.text == "" {
			m.text, m.textRun = "aggregate-"+mt.RunID, mt.RunID
			emit(Event{"type": "TEXT_MESSAGE_START", "messageId": m.text, "role": "assistant"})
		}
		emit(Event{"type": "TEXT_MESSAGE_CONTENT", "messageId": m.text, "delta": mt.Message})
	case *wsproto.AggregateCompleted:
		m.endText(emit)
		m.finishStep(emit, "aggregate")
	case *wsproto.FinalAnswer:
		m.closeAll(emit)
		if !m.streamed[mt.RunID] {
			id := "answer-" + mt.RunID
			emit(Event{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})
			if mt.Content != "" {
				emit(Event{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": mt.Content})
			}
			emit(Event{"type": "TEXT_MESSAGE_END", "messageId": id})
		}
		emit(m.finished(nil, map[string]any{"run_id": mt.RunID, "status": mt.Status, "answer": mt.Content}))
	case *wsproto.PlanUpdated, *wsproto.SolverSkipped, *wsproto.SolverRestarted, *wsproto.TodoUpdated,
		*wsproto.TodoItemProgress, *wsproto.TodoCompleted, *wsproto.RecoveryStarted:
		// The state delta says it all.
	default:
		emit(custom(f))
	}
	return out
}

// custom is the CUSTOM event of a Baton event no other AG-UI event
// carries: name "baton." + its type, value its metadata.
func custom(f frame) Event {
	var v any = map[string]any{}
	if len(f.Metadata) > 0 {
		v = f.Metadata
	}
	return Event{"type": "CUSTOM", "name": "baton." + f.Event, "value": v}
}

func (m *mapper) finishStep(emit func(Event), name string) {
	if m.steps[name] {
		delete(m.steps, name)
		emit(Event{"type": "STEP_FINISHED", "stepName": name})
	}
}

func (m *mapper) endText(emit func(Event)) {
	if m.text != "" {
		emit(Event{"type": "TEXT_MESSAGE_END", "messageId": m.text})
		m.text, m.textRun = "", ""
	}
}

// closeAll ends what the stream has open, in a fixed order: AG-UI's run
// may not finish with a step or a message open.
func (m *mapper) closeAll(emit func(Event)) {
	m.endText(emit)
	names := make([]string, 0, len(m.steps))
	for n := range m.steps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		m.finishStep(emit, n)
	}
}

// finished is RUN_FINISHED with outcome (nil: success) and result.
func (m *mapper) finished(outcome Event, result any) Event {
	m.done = true
	e := Event{"type": "RUN_FINISHED", "threadId": m.threadID, "runId": m.runID}
	if outcome != nil {
		e["outcome"] = outcome
	}
	if result != nil {
		e["result"] = result
	}
	return e
}

// failed is RUN_ERROR.
func (m *mapper) failed(message, code string) Event {
	m.done = true
	return Event{"type": "RUN_ERROR", "message": message, "code": code}
}

// interruptOf is the AG-UI interrupt of a confirmation: its id is the
// confirmation's step_id, its reason the confirmation's kind, its
// metadata the confirmation's metadata, and responseSchema the payload
// that answers it.
func interruptOf(f frame, c *wsproto.UserConfirm) Event {
	msg := f.Content
	if msg == "" {
		msg = c.Question
	}
	if msg == "" {
		msg = c.PlanSummary
	}
	in := Event{"id": c.StepID, "reason": c.Kind, "responseSchema": responseSchema(c.Kind)}
	if msg != "" {
		in["message"] = msg
	}
	if !c.ExpiresAt.IsZero() {
		in["expiresAt"] = c.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	var md map[string]any
	if json.Unmarshal(f.Metadata, &md) == nil && md != nil {
		in["metadata"] = md
	}
	return in
}

// responseSchema is the JSON Schema of the payload answering a
// confirmation of kind.
func responseSchema(kind string) map[string]any {
	obj := func(required string, props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": []string{required}}
	}
	switch kind {
	case wsproto.ConfirmPlan, wsproto.ConfirmAdjust:
		return obj("confirmed", map[string]any{"confirmed": map[string]any{"type": "boolean"}, "tasks": map[string]any{"type": "array"}})
	case wsproto.ConfirmTaskFailed:
		return obj("action", map[string]any{"action": map[string]any{"enum": []string{"retry", "skip", "abort"}}})
	case wsproto.ConfirmTool:
		return obj("approved", map[string]any{"approved": map[string]any{"type": "boolean"}})
	case wsproto.ConfirmInput:
		return obj("text", map[string]any{"text": map[string]any{"type": "string"}})
	}
	return map[string]any{"type": "object"}
}
