package solver

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// completions records each task's Result as Completed reports it.
type completions struct {
	*recorder
	mu      sync.Mutex // guards results
	results map[string]Result
}

func (c *completions) Completed(id string, attempt int, r Result, took time.Duration) {
	c.mu.Lock()
	c.results[id] = r
	c.mu.Unlock()
	c.recorder.Completed(id, attempt, r, took)
}

// TestResultLimit: what a model returns is cut at MaxResultBytes before
// anything keeps it — the answer (marked truncated, with its length
// before), the reply text the conversation keeps — and tool-call arguments
// past it are refused; the simulated model builds no more than a byte past
// the limit of a [sim:result_bytes] beyond it.
func TestResultLimit(t *testing.T) {
	const limit = 1000
	tests := []struct {
		name      string
		model     Model
		desc      string
		text      int // the result's length
		original  int // 0: not truncated
		argsError bool
	}{
		{name: "an answer within the limit is whole", text: 1000,
			model: modelFunc(func(context.Context, *Turn) (Reply, error) { return Reply{Text: strings.Repeat("a", 1000)}, nil })},
		{name: "an answer past the limit is cut and marked", text: 1000, original: 5000,
			model: modelFunc(func(context.Context, *Turn) (Reply, error) { return Reply{Text: strings.Repeat("b", 5000)}, nil })},
		{name: "a model that stopped keeping text says how long it was", text: 1000, original: 1 << 20,
			model: modelFunc(func(_ context.Context, t *Turn) (Reply, error) {
				return Reply{Text: strings.Repeat("c", t.MaxReplyBytes+1), TextBytes: 1 << 20}, nil
			})},
		{name: "the simulated model past the limit", model: &Sim{}, desc: "[sim:result_bytes=16000000]", text: 1000, original: 16000000},
		{name: "the simulated model within the limit", model: &Sim{}, desc: "[sim:result_bytes=900]", text: 900},
		{name: "long text and arguments of a tool-calling reply", text: 2, argsError: true,
			model: modelFunc(func(_ context.Context, t *Turn) (Reply, error) {
				if t.Round == 1 {
					r := calls(1, `echo {"x":"`+strings.Repeat("d", 2000)+`"}`)
					r.Text = strings.Repeat("e", 3000)
					return r, nil
				}
				for _, m := range t.Messages {
					if m.Role == RoleAssistant && (len(m.Content) > limit || len(m.ToolCalls[0].Arguments) > limit) {
						return Reply{Text: "conversation holds too much"}, nil
					}
				}
				return Reply{Text: "ok"}, nil
			})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &completions{recorder: &recorder{}, results: map[string]Result{}}
			var argsError bool
			tasks := []wsproto.Task{{ID: "a", Title: "A", Description: tt.desc, DependsOn: []string{}}}
			opts := Options{MaxResultBytes: limit, Loop: Loop{Tools: toolSet(t, echo("echo"))}}
			New(tasks, tt.model, &toolResults{completions: rec, onResult: func(m *wsproto.ToolResult) {
				argsError = argsError || strings.Contains(m.Result, "too long")
			}}, opts).Execute(t.Context())
			r, ok := rec.results["a"]
			if !ok {
				t.Fatalf("task a did not complete: %v", rec.lines)
			}
			want := tt.original > 0
			if len(r.Text) != tt.text || r.Truncated != want || r.OriginalBytes != tt.original || want != strings.HasSuffix(r.Text, wsproto.CutMarker) {
				t.Errorf("result of %d bytes ending %q, truncated %v, original %d; want %d bytes, original %d",
					len(r.Text), r.Text[max(0, len(r.Text)-8):], r.Truncated, r.OriginalBytes, tt.text, tt.original)
			}
			if argsError != tt.argsError {
				t.Errorf("arguments refused as too long: %v, want %v", argsError, tt.argsError)
			}
		})
	}
}

// toolResults hands every agent.tool_result to onResult as well.
type toolResults struct {
	*completions
	onResult func(*wsproto.ToolResult)
}

func (r *toolResults) ToolResult(m *wsproto.ToolResult) {
	r.onResult(m)
	r.completions.ToolResult(m)
}
