package client_test

import (
	"encoding/json"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestAgreeAll: the answer to each kind of confirmation, as sent.
func TestAgreeAll(t *testing.T) {
	for _, c := range []struct{ kind, want string }{
		{wsproto.ConfirmPlan, `{"confirmed":true}`},
		{wsproto.ConfirmAdjust, `{"confirmed":true}`},
		{wsproto.ConfirmTaskFailed, `{"action":"skip"}`},
		{wsproto.ConfirmTool, `{"approved":true}`},
		{wsproto.ConfirmInput, `{"text":"the first one"}`},
	} {
		b, err := json.Marshal(client.AgreeAll(wsproto.UserConfirm{Kind: c.kind}))
		if err != nil || string(b) != c.want {
			t.Errorf("%s: answered %s (%v), want %s", c.kind, b, err, c.want)
		}
	}
}
