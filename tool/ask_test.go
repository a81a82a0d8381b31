package tool

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestAskUser(t *testing.T) {
	answers := func(answer string, ok bool) AskFunc {
		return func(context.Context, string, string) (string, bool) { return answer, ok }
	}
	tests := []struct {
		name    string
		ask     AskFunc // nil: no user to ask
		args    string
		want    string
		wantErr string
	}{
		{name: "answered", ask: answers("Lisbon", true), args: `{"question":"Which city?"}`, want: "The user answered: Lisbon"},
		{name: "with context", ask: answers("yes", true), args: `{"question":"Go on?","context":"it costs"}`, want: "The user answered: yes"},
		{name: "expired", ask: answers("", false), args: `{"question":"Which city?"}`, want: "The user did not answer in time"},
		{name: "nobody to ask", args: `{"question":"Which city?"}`, wantErr: "no user to ask"},
		{name: "empty question", ask: answers("x", true), args: `{"question":"  "}`, wantErr: `"question" is required`},
		{name: "unknown argument", ask: answers("x", true), args: `{"question":"q","urgent":true}`, wantErr: "unknown argument"},
		{name: "not an object", ask: answers("x", true), args: `["q"]`, wantErr: "must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ask != nil {
				ctx = WithAsk(ctx, tt.ask)
			}
			got, err := AskUser().Call(ctx, json.RawMessage(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !strings.HasPrefix(got, tt.want) {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
