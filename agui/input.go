package agui

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/baton-run/baton/wsproto"
)

// runInput is what Baton reads of AG-UI's RunAgentInput; the rest (state,
// tools, context) is accepted and ignored.
type runInput struct {
	ThreadID       string          `json:"threadId"`
	RunID          string          `json:"runId"`
	Messages       []inputMessage  `json:"messages"`
	ForwardedProps json.RawMessage `json:"forwardedProps"`
	Resume         []resumeEntry   `json:"resume"`
}

type inputMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type resumeEntry struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload"`
}

// forwarded are the forwardedProps Baton reads.
type forwardedProps struct {
	Mode     string `json:"mode"`
	Adaptive bool   `json:"adaptive"`
}

// checkInput says what is wrong with in, "" when nothing, and reads its
// request and forwardedProps.
func checkInput(in *runInput) (text string, fp forwardedProps, problem string) {
	if in.RunID == "" || len(in.RunID) > maxID {
		return "", fp, fmt.Sprintf("runId is required, at most %d bytes", maxID)
	}
	if len(in.ForwardedProps) > 0 && string(in.ForwardedProps) != "null" {
		if err := json.Unmarshal(in.ForwardedProps, &fp); err != nil {
			return "", fp, "forwardedProps: " + err.Error()
		}
	}
	switch fp.Mode {
	case "", wsproto.ModePlan, wsproto.ModeChat:
	default:
		return "", fp, fmt.Sprintf("forwardedProps.mode %q: want plan or chat", fp.Mode)
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == "user" {
			text = messageText(in.Messages[i].Content)
			break
		}
	}
	if len(in.Resume) == 0 && strings.TrimSpace(text) == "" {
		return "", fp, "no user message with text to run, and nothing to resume"
	}
	return text, fp, ""
}

// messageText is a user message's text: its content string, or the text
// parts of its content array joined.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// answer is a user.response made from a resume entry.
type answer struct {
	stepID string
	meta   map[string]any
}

// answersFor turns resume entries into the user.response answers of the
// open confirmations they name. An entry naming no open confirmation, or
// with a payload its kind does not take, is an error: nothing is sent.
// cancelled declines: a plan or adjustment not confirmed, a tool not
// approved, a failed task skipped (as when its question expires), a
// question answered with "".
func answersFor(entries []resumeEntry, pending []wsproto.UserConfirm) ([]answer, error) {
	byID := make(map[string]wsproto.UserConfirm, len(pending))
	for _, c := range pending {
		byID[c.StepID] = c
	}
	seen := map[string]bool{}
	out := make([]answer, 0, len(entries))
	for _, e := range entries {
		c, ok := byID[e.InterruptID]
		if !ok || seen[e.InterruptID] {
			return nil, fmt.Errorf("resume: interrupt %q is not open on this thread", e.InterruptID)
		}
		seen[e.InterruptID] = true
		meta, err := responseMeta(c.Kind, e)
		if err != nil {
			return nil, fmt.Errorf("resume %q: %w", e.InterruptID, err)
		}
		out = append(out, answer{stepID: c.StepID, meta: meta})
	}
	return out, nil
}

func responseMeta(kind string, e resumeEntry) (map[string]any, error) {
	yes := e.Status == "resolved"
	if !yes && e.Status != "cancelled" {
		return nil, fmt.Errorf("status %q: want resolved or cancelled", e.Status)
	}
	var p map[string]any
	if yes && len(e.Payload) > 0 && string(e.Payload) != "null" {
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return nil, fmt.Errorf("payload: want an object: %w", err)
		}
	}
	switch kind {
	case wsproto.ConfirmPlan, wsproto.ConfirmAdjust:
		m := map[string]any{"confirmed": yes}
		if p != nil {
			c, ok := p["confirmed"].(bool)
			if !ok {
				return nil, fmt.Errorf("payload.confirmed: want a boolean")
			}
			m["confirmed"] = c
			if t, ok := p["tasks"]; ok {
				m["tasks"] = t
			}
		}
		return m, nil
	case wsproto.ConfirmTool:
		m := map[string]any{"approved": yes}
		if p != nil {
			a, ok := p["approved"].(bool)
			if !ok {
				return nil, fmt.Errorf("payload.approved: want a boolean")
			}
			m["approved"] = a
		}
		return m, nil
	case wsproto.ConfirmTaskFailed:
		if !yes {
			return map[string]any{"action": "skip"}, nil
		}
		a, _ := p["action"].(string)
		if a != "retry" && a != "skip" && a != "abort" {
			return nil, fmt.Errorf("payload.action: want retry, skip or abort")
		}
		return map[string]any{"action": a}, nil
	case wsproto.ConfirmInput:
		if !yes {
			return map[string]any{"text": ""}, nil
		}
		t, ok := p["text"].(string)
		if !ok {
			return nil, fmt.Errorf("payload.text: want a string")
		}
		return map[string]any{"text": t}, nil
	}
	return nil, fmt.Errorf("confirmation kind %q is not known here", kind)
}
