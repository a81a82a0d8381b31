package openai

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/solver"
)

// TestReplyBounded: what Baton reads of an endpoint is bounded twice. A
// reply's text past Turn.MaxReplyBytes is not kept (its length is
// reported), and a response body past MaxResponseBytes — one endless SSE
// line, a long stream, a long error body — fails the call as validation
// instead of being read whole.
func TestReplyBounded(t *testing.T) {
	turn := func() *solver.Turn {
		return &solver.Turn{Round: 1, MaxRounds: 2, MaxReplyBytes: 1000, Messages: []solver.Message{
			{Role: solver.RoleSystem, Content: "sys"}, {Role: solver.RoleUser, Content: "task"}}}
	}
	tests := []struct {
		name   string
		handle func(w http.ResponseWriter)
		text   int // bytes of text kept, when the call succeeds
		total  int // TextBytes
		fails  bool
	}{
		{name: "a reply within both bounds is whole", text: 600,
			handle: func(w http.ResponseWriter) { stream(w, split(strings.Repeat("a", 600), 100)...) }},
		{name: "a reply past MaxReplyBytes is kept to a piece past it", text: 1100, total: 30000,
			handle: func(w http.ResponseWriter) { stream(w, split(strings.Repeat("b", 30000), 100)...) }},
		{name: "one SSE line past MaxResponseBytes", fails: true, handle: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"%s"}}]}`,
				strings.Repeat("c", 300<<10))
		}},
		{name: "a stream past MaxResponseBytes", fails: true,
			handle: func(w http.ResponseWriter) { stream(w, split(strings.Repeat("d", 300<<10), 100)...) }},
		{name: "an error body past MaxResponseBytes", fails: true,
			handle: func(w http.ResponseWriter) { apiError(w, http.StatusBadRequest, strings.Repeat("e", 300<<10)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) { tt.handle(w) })
			c := f.client(t, func(c *Config) { c.MaxResponseBytes = 256 << 10 })
			res, err := c.Turn(t.Context(), turn(), func(float64, string) {})
			if tt.fails {
				var fe *failure.Error
				if !errors.As(err, &fe) || fe.Type != failure.Validation || !strings.Contains(fe.Message, "longer than Baton reads") {
					t.Fatalf("error %v, want a validation failure saying the reply is too long", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Text) != tt.text || res.TextBytes != tt.total {
				t.Errorf("kept %d bytes of text, TextBytes %d; want %d and %d", len(res.Text), res.TextBytes, tt.text, tt.total)
			}
		})
	}
}

func TestMaxResponseBytesDefault(t *testing.T) {
	c, err := New(Config{BaseURL: "http://localhost:1/v1", MaxOutputTokens: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.cfg.MaxResponseBytes; got != 2<<20 {
		t.Errorf("MaxResponseBytes defaults to %d at 1024 output tokens, want 2 MiB", got)
	}
}
