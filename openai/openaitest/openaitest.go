// Package openaitest provides an in-process OpenAI-compatible chat
// completions server for tests, in the manner of net/http/httptest: the test
// decides every response, and the server records every request. It also
// lists models (GET /v1/models), which a test can change or make fail.
package openaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Request is the part of a chat completions request tests look at.
type Request struct {
	Model          string `json:"model"`
	Stream         bool   `json:"stream"`
	MaxTokens      int    `json:"max_tokens"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Messages []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	// Tools are the functions offered, by name.
	Tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// Text is every message's content, one per line.
func (r Request) Text() string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// Handler answers one request.
type Handler func(w http.ResponseWriter, r *http.Request, req Request)

// DefaultModels is what GET /v1/models lists until SetModels.
var DefaultModels = []string{"test-model", "gpt-4o-mini"}

// Server serves /v1/chat/completions with a Handler, and /v1/models. Its
// URL + "/v1" is the base URL to configure a client with.
type Server struct {
	*httptest.Server
	mu         sync.Mutex // guards requests, models, modelsFail, listings
	requests   []Request
	models     []string
	modelsFail *failing // when set, GET /v1/models answers with this error
	listings   int
}

type failing struct {
	status int
	msg    string
}

// NewServer starts a server closed when the test ends.
func NewServer(t testing.TB, handle Handler) *Server {
	s := &Server{models: append([]string(nil), DefaultModels...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" && r.Method == http.MethodGet {
			s.listModels(w)
			return
		}
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		handle(w, r, req)
	}))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API root to point a client at.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// SetModels sets what GET /v1/models lists.
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	s.models = append([]string(nil), ids...)
	s.mu.Unlock()
}

// FailModels makes GET /v1/models answer with an OpenAI-style error.
func (s *Server) FailModels(status int, msg string) {
	s.mu.Lock()
	s.modelsFail = &failing{status: status, msg: msg}
	s.mu.Unlock()
}

// ModelListings returns how many times the models were asked for.
func (s *Server) ModelListings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings
}

func (s *Server) listModels(w http.ResponseWriter) {
	s.mu.Lock()
	s.listings++
	ids, fail := s.models, s.modelsFail
	s.mu.Unlock()
	if fail != nil {
		Error(w, fail.status, fail.msg)
		return
	}
	data := make([]map[string]any, len(ids))
	for i, id := range ids {
		data[i] = map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "openaitest"}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Usage is what Stream reports for every completion.
var Usage = map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}

// Stream writes pieces as SSE chunks, then a finish_reason, a usage chunk
// and [DONE], as OpenAI does.
func Stream(w http.ResponseWriter, pieces ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, p := range pieces {
		Delta(w, p)
	}
	Chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	Chunk(w, map[string]any{"choices": []any{}, "usage": Usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Call is a tool call for ToolCalls to stream.
type Call struct {
	ID, Name, Arguments string
}

// ToolCalls streams a reply that calls tools: each call's id and name in
// one chunk, its arguments in pieces of n bytes after it, then
// finish_reason "tool_calls", a usage chunk and [DONE].
func ToolCalls(w http.ResponseWriter, n int, calls ...Call) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i, c := range calls {
		call := func(fields map[string]any) {
			fields["index"] = i
			Chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0,
				"delta": map[string]any{"tool_calls": []any{fields}}}}})
		}
		call(map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""}})
		for _, piece := range Split(c.Arguments, n) {
			call(map[string]any{"function": map[string]any{"arguments": piece}})
		}
	}
	Chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "tool_calls"}}})
	Chunk(w, map[string]any{"choices": []any{}, "usage": Usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// Delta writes one content chunk.
func Delta(w http.ResponseWriter, content string) {
	Chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": content}}}})
}

// Chunk writes one SSE data line with the chunk's id, object and model set.
func Chunk(w http.ResponseWriter, v map[string]any) {
	v["id"], v["object"], v["model"] = "c1", "chat.completion.chunk", "test-model"
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

// Error answers with an OpenAI-style error body.
func Error(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error"}}`, msg)
}

// Split cuts s into pieces of n bytes, as a model streams tokens.
func Split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
