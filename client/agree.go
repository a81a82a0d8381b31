package client

import "github.com/baton-run/baton/wsproto"

// AgreeAll is an Options.OnConfirm that agrees to everything, as load and
// chaos clients do: it confirms a plan or a plan adjustment as proposed,
// skips a failed task, approves a tool call and answers an input request
// "the first one".
func AgreeAll(c wsproto.UserConfirm) *Answer {
	yes, text := true, "the first one"
	switch c.Kind {
	case wsproto.ConfirmTaskFailed:
		return &Answer{Action: "skip"}
	case wsproto.ConfirmTool:
		return &Answer{Approved: &yes}
	case wsproto.ConfirmInput:
		return &Answer{Text: &text}
	}
	return &Answer{Confirmed: &yes} // plan_confirm, plan_adjust
}
