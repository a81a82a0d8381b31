package wsproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// A Request is a decoded client frame: one of *Message, *SolveTasks,
// *Response, *Cancel, *CancelTask, *RestartTask, *Replan, *Ack, *Reconnect.
type Request interface{ Event() string }

// Message is user.message: a request to plan and solve. Adaptive
// (metadata.adaptive) asks for the decide step after each task (§11).
// Mode (metadata.mode) is ModeChat, ModePlan, or "" when the client gave
// none (the server's default then applies).
type Message struct {
	Text     string
	Adaptive bool
	Mode     string
}

// Modes of a user.message: plan (plan, confirm, solve, aggregate) or chat
// (one agent loop answering the request directly).
const (
	ModePlan = "plan"
	ModeChat = "chat"
)

// SolveTasks is user.solve_tasks: tasks to solve without planning.
// Adaptive is as in Message (a Baton extension for this event).
type SolveTasks struct {
	Tasks    []Task
	Adaptive bool
}

// Response is user.response: the answer to an agent.user_confirm. Which of
// Confirmed, Tasks, Action, Approved and Text matter depends on the
// confirmation's kind.
type Response struct {
	StepID    string
	Confirmed *bool
	Tasks     []Task // nil when absent
	Action    string
	Approved  *bool   // tool_confirm
	Text      *string // input_request
}

// Cancel is user.cancel.
type Cancel struct{}

// CancelTask is user.cancel_task.
type CancelTask struct{ TaskID string }

// RestartTask is user.restart_task.
type RestartTask struct{ TaskID string }

// Replan is user.replan: plan again, with the user's feedback on the plan
// awaiting confirmation.
type Replan struct{ Feedback string }

// Ack is user.ack.
type Ack struct{ LastSeq uint64 }

// Reconnect is user.reconnect_with_state.
type Reconnect struct {
	SessionID     string
	ResumeToken   string
	LastSeq       uint64
	StateChecksum string
	// Follow (metadata.follow) attaches the connection beside the
	// session's others instead of replacing them (§3.5, §3.6).
	Follow bool
}

func (*Message) Event() string     { return EventUserMessage }
func (*SolveTasks) Event() string  { return EventUserSolve }
func (*Response) Event() string    { return EventUserResponse }
func (*Cancel) Event() string      { return EventUserCancel }
func (*CancelTask) Event() string  { return EventUserCancelTask }
func (*RestartTask) Event() string { return EventUserRestart }
func (*Replan) Event() string      { return EventUserReplan }
func (*Ack) Event() string         { return EventUserAck }
func (*Reconnect) Event() string   { return EventUserReconnect }

// clientFrame is the envelope of a client frame. Unknown fields are ignored.
type clientFrame struct {
	Event    *string         `json:"event"`
	StepID   *string         `json:"step_id"`
	Content  *string         `json:"content"`
	Metadata json.RawMessage `json:"metadata"`
}

// DecodeText decodes a client text frame. On failure it returns the
// system.error to send; the caller must then change nothing.
func DecodeText(data []byte) (Request, *Error) {
	if !utf8.Valid(data) {
		return nil, &Error{Code: CodeInvalidJSON, Message: "frame is not valid UTF-8"}
	}
	if !json.Valid(data) {
		return nil, &Error{Code: CodeInvalidJSON, Message: "frame is not valid JSON" + syntaxDetail(data)}
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, &Error{Code: CodeInvalidMessage, Message: "frame must be a JSON object"}
	}
	var f clientFrame
	if err := json.Unmarshal(data, &f); err != nil {
		e := &Error{Code: CodeInvalidMessage, Message: "bad envelope: " + fieldError(err)}
		if f.Event != nil {
			// encoding/json fills the fields it can: an event read beside a
			// mistyped field still names the frame (§2).
			e.RefType = *f.Event
		}
		return nil, e
	}
	if f.Event == nil || *f.Event == "" {
		return nil, &Error{Code: CodeInvalidMessage, Message: `frame has no "event"`}
	}
	ev := *f.Event
	fail := func(format string, args ...any) (Request, *Error) {
		return nil, &Error{Code: CodeInvalidMessage, Message: fmt.Sprintf(format, args...), RefType: ev}
	}
	meta := f.Metadata
	if len(meta) == 0 || bytes.Equal(meta, []byte("null")) {
		meta = []byte("{}")
	} else if meta[0] != '{' {
		return fail(`"metadata" must be an object`)
	}
	decode := func(v any) *Error {
		if err := json.Unmarshal(meta, v); err != nil {
			return &Error{Code: CodeInvalidMessage, Message: "bad metadata: " + fieldError(err), RefType: ev}
		}
		return nil
	}

	switch ev {
	case EventUserMessage:
		if f.Content == nil || *f.Content == "" {
			return fail(`user.message needs its text in "content"`)
		}
		var m struct {
			Adaptive bool    `json:"adaptive"`
			Mode     *string `json:"mode"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		msg := &Message{Text: *f.Content, Adaptive: m.Adaptive}
		if m.Mode != nil {
			if *m.Mode != ModeChat && *m.Mode != ModePlan {
				return fail(`"mode" must be "chat" or "plan"`)
			}
			if *m.Mode == ModeChat && m.Adaptive {
				return fail(`a chat-mode message cannot be adaptive: a chat run has no plan to adapt`)
			}
			msg.Mode = *m.Mode
		}
		return msg, nil

	case EventUserSolve:
		var m struct {
			Tasks    []Task `json:"tasks"`
			Adaptive bool   `json:"adaptive"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		return &SolveTasks{Tasks: NormalizeTasks(m.Tasks), Adaptive: m.Adaptive}, nil

	case EventUserResponse:
		var m struct {
			StepID    *string `json:"step_id"`
			Confirmed *bool   `json:"confirmed"`
			Tasks     []Task  `json:"tasks"`
			Action    *string `json:"action"`
			Approved  *bool   `json:"approved"`
			Text      *string `json:"text"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		r := &Response{Confirmed: m.Confirmed, Tasks: NormalizeTasks(m.Tasks), Approved: m.Approved, Text: m.Text}
		switch {
		case f.StepID != nil && *f.StepID != "":
			r.StepID = *f.StepID
		case m.StepID != nil:
			r.StepID = *m.StepID
		}
		if r.StepID == "" {
			return fail(`user.response needs "step_id"`)
		}
		if m.Action != nil {
			r.Action = *m.Action
		}
		return r, nil

	case EventUserCancel:
		return &Cancel{}, nil

	case EventUserCancelTask, EventUserRestart:
		var m struct {
			TaskID *string `json:"task_id"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		if m.TaskID == nil || *m.TaskID == "" {
			return fail(`%s needs "task_id"`, ev)
		}
		if ev == EventUserRestart {
			return &RestartTask{TaskID: *m.TaskID}, nil
		}
		return &CancelTask{TaskID: *m.TaskID}, nil

	case EventUserReplan:
		var m struct {
			Feedback *string `json:"feedback"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		if m.Feedback == nil {
			return fail(`user.replan needs "feedback": what to change in the plan`)
		}
		return &Replan{Feedback: *m.Feedback}, nil

	case EventUserAck:
		var m struct {
			LastSeq *uint64 `json:"last_seq"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		if m.LastSeq == nil {
			return fail(`user.ack needs "last_seq"`)
		}
		return &Ack{LastSeq: *m.LastSeq}, nil

	case EventUserReconnect:
		var m struct {
			SessionID     *string `json:"session_id"`
			ResumeToken   *string `json:"resume_token"`
			LastSeq       *uint64 `json:"last_seq"`
			StateChecksum *string `json:"state_checksum"`
			Follow        *bool   `json:"follow"`
		}
		if e := decode(&m); e != nil {
			return nil, e
		}
		if m.SessionID == nil || m.ResumeToken == nil || m.LastSeq == nil {
			return fail(`user.reconnect_with_state needs "session_id", "resume_token" and "last_seq"`)
		}
		r := &Reconnect{SessionID: *m.SessionID, ResumeToken: *m.ResumeToken, LastSeq: *m.LastSeq}
		if m.StateChecksum != nil {
			r.StateChecksum = *m.StateChecksum
		}
		r.Follow = m.Follow != nil && *m.Follow
		return r, nil
	}
	return nil, &Error{Code: CodeUnknownType, Message: fmt.Sprintf("unknown event %q", ev), RefType: ev}
}

// NormalizeTasks gives every task a non-nil depends_on, so that it encodes
// as [] rather than null, and returns the list.
func NormalizeTasks(tasks []Task) []Task {
	for i := range tasks {
		if tasks[i].DependsOn == nil {
			tasks[i].DependsOn = []string{}
		}
	}
	return tasks
}

// fieldError describes a decoding error without echoing client content.
func fieldError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("expected %s, not %s", te.Type, te.Value)
	}
	return "malformed"
}

// maxDepth is encoding/json's limit on nesting.
const maxDepth = 10000

func syntaxDetail(data []byte) string {
	var v any
	var se *json.SyntaxError
	if err := json.Unmarshal(data, &v); errors.As(err, &se) {
		// encoding/json refuses nesting past 10,000 levels with this text.
		if strings.Contains(se.Error(), "exceeded max depth") {
			return fmt.Sprintf(": nested more than %d levels deep (offset %d)", maxDepth, se.Offset)
		}
		return fmt.Sprintf(" (offset %d)", se.Offset)
	}
	return ""
}
