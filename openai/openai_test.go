package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/openai/openaitest"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

type chatRequest = openaitest.Request

type fake struct{ *openaitest.Server }

func newFake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, req chatRequest)) *fake {
	return &fake{openaitest.NewServer(t, handle)}
}

func (f *fake) client(t *testing.T, mutate ...func(*Config)) *Client {
	cfg := Config{BaseURL: f.BaseURL(), Model: "test-model", MaxOutputTokens: 100}
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fake) seen() []chatRequest { return f.Requests() }

var (
	stream   = openaitest.Stream
	chunk    = openaitest.Chunk
	apiError = openaitest.Error
	split    = openaitest.Split
)

const planJSON = `{"summary":"Two parts then combine","tasks":[` +
	`{"id":"a","title":"Look up \"facts\"","description":"d","depends_on":[]},` +
	`{"id":"b","title":"Find examples","description":"d","depends_on":[]},` +
	`{"id":"c","title":"Combine","description":"d","depends_on":["a","b"]}]}`

func TestPlanStructured(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, req chatRequest) {
		if req.ResponseFormat == nil || req.ResponseFormat.Type != "json_schema" {
			apiError(w, 400, "expected a json_schema response format")
			return
		}
		stream(w, split(planJSON, 7)...)
	})
	var steps []string
	p, err := f.client(t).Plan(t.Context(), planner.Request{Text: "do it", Attempt: 1}, func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tasks) != 3 || p.Tasks[2].DependsOn[1] != "b" || p.Summary != "Two parts then combine" {
		t.Errorf("plan %+v", p)
	}
	want := []string{`Drafted task 1: Look up "facts"`, "Drafted task 2: Find examples", "Drafted task 3: Combine", "Checked the plan: 3 tasks"}
	if strings.Join(steps, "|") != strings.Join(want, "|") {
		t.Errorf("steps %q, want %q", steps, want)
	}
	if p.Usage != (wsproto.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18}) {
		t.Errorf("usage %+v", p.Usage)
	}
	if got := f.seen()[0]; !got.Stream || got.Model != "test-model" || got.MaxTokens != 100 {
		t.Errorf("request %+v", got)
	}
}

func TestPlanFallsBackToPlainJSON(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, req chatRequest) {
		if req.ResponseFormat != nil {
			apiError(w, 400, "response_format of type json_schema is not supported by this model")
			return
		}
		stream(w, split("Here is the plan:\n```json\n"+planJSON+"\n```\n", 9)...)
	})
	c := f.client(t)
	for i := range 2 {
		p, err := c.Plan(t.Context(), planner.Request{Text: "x", Attempt: 1}, func(string) {})
		if err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
		if len(p.Tasks) != 3 {
			t.Fatalf("plan %d: %d tasks", i, len(p.Tasks))
		}
	}
	// The refusal is remembered: 1 refused + 1 plain, then 1 plain.
	reqs := f.seen()
	if len(reqs) != 3 || reqs[0].ResponseFormat == nil || reqs[1].ResponseFormat != nil || reqs[2].ResponseFormat != nil {
		t.Errorf("requests: %d, formats %v", len(reqs), reqs)
	}
}

func TestPlanUnusableIsValidationAndFeedbackIsSent(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) {
		stream(w, "I would rather not.")
	})
	c := f.client(t)
	_, err := c.Plan(t.Context(), planner.Request{Text: "x", Attempt: 1}, func(string) {})
	if got := failure.Classify(err); got.Type != failure.Validation {
		t.Fatalf("class %+v of %v, want validation", got, err)
	}
	_, _ = c.Plan(t.Context(), planner.Request{Text: "x", Attempt: 2, Feedback: "task 0 has an empty title"}, func(string) {})
	if last := f.seen()[1]; !strings.Contains(last.Text(), "task 0 has an empty title") {
		t.Errorf("feedback not in the retried prompt: %q", last.Text())
	}
}

// Replanning sends each rejected plan back as the model's own reply,
// followed by the user's feedback on it.
func TestPlanWithTheUserFeedback(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) {
		stream(w, split(planJSON, 11)...)
	})
	first := planner.Plan{Summary: "Too big", Tasks: []wsproto.Task{{ID: "x", Title: "Everything", DependsOn: []string{}}}}
	req := planner.Request{Text: "do it", Attempt: 1, Rejected: []planner.Rejection{
		{Plan: first, Feedback: "split it up"}, {Plan: first, Feedback: "fewer tasks"}}}
	if _, err := f.client(t).Plan(t.Context(), req, func(string) {}); err != nil {
		t.Fatal(err)
	}
	msgs := f.seen()[0].Messages
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if want := []string{"system", "user", "assistant", "user", "assistant", "user"}; !slices.Equal(roles, want) {
		t.Fatalf("roles %v, want %v", roles, want)
	}
	if !strings.Contains(msgs[2].Content, `"title":"Everything"`) || !strings.Contains(msgs[3].Content, "split it up") ||
		!strings.Contains(msgs[5].Content, "fewer tasks") {
		t.Errorf("messages %+v", msgs)
	}
}

func TestTurnStreamsCoalescedProgress(t *testing.T) {
	answer := strings.Repeat("token ", 40)
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) {
		stream(w, split(answer, 6)...)
	})
	c := f.client(t)
	// A fake clock: each piece arrives 30ms after the previous one, so 40
	// pieces span 1.2s and at most one report per 100ms may go out.
	var clock time.Time
	c.now = func() time.Time { clock = clock.Add(30 * time.Millisecond); return clock }

	type report struct {
		f   float64
		msg string
	}
	var reports []report
	turn := &solver.Turn{Round: 2, MaxRounds: 4, Messages: []solver.Message{
		{Role: solver.RoleSystem, Content: "sys"}, {Role: solver.RoleUser, Content: "task"}}}
	res, err := c.Turn(t.Context(), turn, func(f float64, msg string) { reports = append(reports, report{f, msg}) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != answer || len(res.ToolCalls) != 0 || res.Usage.TotalTokens != 18 {
		t.Errorf("reply %+v", res)
	}
	var joined strings.Builder
	last := 0.0
	for i, r := range reports {
		joined.WriteString(r.msg)
		if r.f < last || r.f > 1 || (i < len(reports)-1 && (r.f < 0.25 || r.f >= 0.5)) {
			t.Errorf("progress %v after %v: round 2 of 4 reports within [0.25, 0.5), then 1", r.f, last)
		}
		last = r.f
	}
	if joined.String() != answer {
		t.Errorf("progress messages do not add up to the result")
	}
	if n := len(reports); n < 5 || n > 14 { // 1.2s / 100ms, plus the first and the final flush
		t.Errorf("%d progress reports for 40 pieces over 1.2s; want about 12", n)
	}
	if last != 1 {
		t.Errorf("last progress %v, want 1", last)
	}
	req := f.seen()[0]
	if len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[0].Content != "sys" ||
		req.Messages[1].Role != "user" || req.Messages[1].Content != "task" || len(req.Tools) != 0 {
		t.Errorf("request %+v: want the two messages as given and no tools", req)
	}
}

func TestTurnToolCalls(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) {
		openaitest.ToolCalls(w, 5,
			openaitest.Call{ID: "call_a", Name: "read_file", Arguments: `{"path":"notes/today.md","limit":100}`},
			openaitest.Call{ID: "call_b", Name: "todo_update", Arguments: `{"id":"1","status":"completed"}`})
	})
	turn := &solver.Turn{Round: 2, MaxRounds: 8,
		Tools: []tool.Spec{{Name: "read_file", Description: "reads", InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			{Name: "bare", Description: "no schema"}},
		Messages: []solver.Message{
			{Role: solver.RoleSystem, Content: "sys"},
			{Role: solver.RoleUser, Content: "task"},
			{Role: solver.RoleAssistant, ToolCalls: []solver.ToolCall{{ID: "call_0", Name: "list_files", Arguments: "{}"}}},
			{Role: solver.RoleTool, ToolCallID: "call_0", Content: "notes/"},
		}}
	var progressed int
	reply, err := f.client(t).Turn(t.Context(), turn, func(float64, string) { progressed++ })
	if err != nil {
		t.Fatal(err)
	}
	want := []solver.ToolCall{
		{ID: "call_a", Name: "read_file", Arguments: `{"path":"notes/today.md","limit":100}`},
		{ID: "call_b", Name: "todo_update", Arguments: `{"id":"1","status":"completed"}`},
	}
	if !slices.Equal(reply.ToolCalls, want) || reply.Text != "" || reply.Usage.TotalTokens != 18 {
		t.Errorf("reply %+v, want calls %+v", reply, want)
	}
	req := f.seen()[0]
	if len(req.Tools) != 2 || req.Tools[0].Function.Name != "read_file" || !strings.Contains(string(req.Tools[0].Function.Parameters), `"path"`) ||
		req.Tools[1].Function.Name != "bare" || !strings.Contains(string(req.Tools[1].Function.Parameters), `"object"`) {
		t.Errorf("tools sent: %+v", req.Tools)
	}
	m := req.Messages
	if len(m) != 4 || len(m[2].ToolCalls) != 1 || m[2].ToolCalls[0].ID != "call_0" || m[2].ToolCalls[0].Function.Name != "list_files" ||
		m[3].Role != "tool" || m[3].ToolCallID != "call_0" || m[3].Content != "notes/" {
		t.Errorf("messages sent: %+v", m)
	}
}

func TestAggregate(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) {
		stream(w, "All ", "done.")
	})
	var streamed strings.Builder
	out, err := f.client(t).Aggregate(t.Context(), aggregator.Input{Request: "r", Tasks: []aggregator.TaskOutcome{
		{Task: wsproto.Task{ID: "a", Title: "A"}, Status: "completed", Result: "ra"},
		{Task: wsproto.Task{ID: "b", Title: "B"}, Status: "failed", Error: "boom"},
	}}, func(s string) { streamed.WriteString(s) })
	if err != nil {
		t.Fatal(err)
	}
	if out.Answer != "All done." || out.Summary != "All done." || streamed.String() != "All done." || out.Usage.TotalTokens != 18 {
		t.Errorf("out %+v streamed %q", out, streamed.String())
	}
	if p := f.seen()[0].Text(); !strings.Contains(p, "Error: boom") || !strings.Contains(p, "ra") {
		t.Errorf("prompt %q", p)
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name       string
		handle     func(w http.ResponseWriter, r *http.Request)
		ctxTimeout time.Duration
		want       string
		retryAfter time.Duration
		public     string // failure.Public: what a client is told
	}{
		{name: "429 with Retry-After", handle: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			apiError(w, 429, "slow down")
		}, want: failure.RateLimit, retryAfter: 7 * time.Second, public: "the model endpoint is limiting requests: 429 too many requests (rate_limit)"},
		{name: "429 without Retry-After", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 429, "slow down") }, want: failure.RateLimit,
			public: "the model endpoint is limiting requests: 429 too many requests (rate_limit)"},
		{name: "500", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 500, "oops") }, want: failure.Network,
			public: "the model endpoint failed: 500 internal server error (network)"},
		{name: "503 plain text", handle: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
		}, want: failure.Network, public: "the model endpoint failed: 503 service unavailable (network)"},
		{name: "400", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 400, "bad") }, want: failure.Permanent,
			public: "the model endpoint refused the request: 400 bad request (permanent)"},
		{name: "401", handle: func(w http.ResponseWriter, _ *http.Request) {
			apiError(w, 401, "Incorrect API key provided: sk-test-123")
		}, want: failure.Permanent,
			public: "the model endpoint refused the request: 401 unauthorized (permanent)"},
		{name: "403", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 403, "forbidden") }, want: failure.Permanent,
			public: "the model endpoint refused the request: 403 forbidden (permanent)"},
		{name: "404", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 404, "no such model") }, want: failure.Permanent,
			public: "the model endpoint refused the request: 404 not found (permanent)"},
		{name: "408", handle: func(w http.ResponseWriter, _ *http.Request) { apiError(w, 408, "too slow") }, want: failure.Timeout,
			public: "the model endpoint timed out: 408 request timeout (timeout)"},
		{name: "deadline", ctxTimeout: 50 * time.Millisecond, handle: func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}, want: failure.Timeout, public: "the model endpoint did not answer in time (timeout)"},
		{name: "stream cut mid-way", handle: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "half"}}}})
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}, want: failure.Network, public: "the connection to the model endpoint broke (network)"},
		{name: "stream ends without finish_reason", handle: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "half"}}}})
		}, want: failure.Network, public: "the model's stream ended before the completion finished (network)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ chatRequest) { tt.handle(w, r) })
			ctx := t.Context()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			_, err := f.client(t).Turn(ctx, &solver.Turn{}, func(float64, string) {})
			var fe *failure.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *failure.Error", err, err)
			}
			if c := failure.Classify(err); c.Type != tt.want || c.RetryAfter != tt.retryAfter {
				t.Errorf("class %+v, want type %s retry-after %v (err %v)", c, tt.want, tt.retryAfter, err)
			}
			if got := failure.Public(err); got != tt.public {
				t.Errorf("public %q, want %q (err %v)", got, tt.public, err)
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		f := newFake(t, func(http.ResponseWriter, *http.Request, chatRequest) {})
		c := f.client(t)
		f.Close()
		_, err := c.Turn(t.Context(), &solver.Turn{}, func(float64, string) {})
		if got := failure.Classify(err).Type; got != failure.Network {
			t.Errorf("type %s (err %v), want network", got, err)
		}
		if got, want := failure.Public(err), "the model endpoint could not be reached (network)"; got != want {
			t.Errorf("public %q, want %q (err %v)", got, want, err)
		}
	})
}

func TestCancelClosesTheUpstreamRequest(t *testing.T) {
	upstreamGone := make(chan struct{})
	started := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ chatRequest) {
		w.Header().Set("Content-Type", "text/event-stream")
		chunk(w, map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": "x"}}}})
		close(started)
		<-r.Context().Done() // the client went away
		close(upstreamGone)
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.client(t).Turn(ctx, &solver.Turn{}, func(float64, string) {})
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Turn returned %v, want context.Canceled", err)
	}
	select {
	case <-upstreamGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake server never saw the request end")
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "official endpoint without a key", cfg: Config{}, wantErr: "OPENAI_API_KEY"},
		{name: "official endpoint with a key", cfg: Config{APIKey: "sk-test"}},
		{name: "local server without a key", cfg: Config{BaseURL: "http://localhost:11434/v1"}},
		{name: "not a URL", cfg: Config{BaseURL: "localhost:11434"}, wantErr: "not an http(s) URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("New: %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"1.5", 1500 * time.Millisecond}, {"-1", 0}, {"soon", 0},
		{now.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCheckModel(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(f *fake)
		model     string
		notListed bool
		typ       string // the failure's type, when the check failed
	}{
		{name: "listed", model: "test-model"},
		{name: "not listed", model: "llama3.1", notListed: true},
		{name: "refused", model: "test-model", typ: failure.Permanent,
			setup: func(f *fake) { f.FailModels(http.StatusUnauthorized, "bad key") }},
		{name: "failing", model: "test-model", typ: failure.Network,
			setup: func(f *fake) { f.FailModels(http.StatusBadGateway, "upstream down") }},
		{name: "unreachable", model: "test-model", typ: failure.Network,
			setup: func(f *fake) { f.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(http.ResponseWriter, *http.Request, chatRequest) {})
			c := f.client(t, func(cfg *Config) { cfg.Model = tt.model })
			if tt.setup != nil {
				tt.setup(f)
			}
			err := c.CheckModel(t.Context())
			var nl *NotListedError
			switch {
			case tt.notListed:
				if !errors.As(err, &nl) || nl.Model != tt.model || strings.Join(nl.Available, ",") != strings.Join(openaitest.DefaultModels, ",") {
					t.Errorf("CheckModel = %v, want a NotListedError listing %v", err, openaitest.DefaultModels)
				}
			case tt.typ != "":
				if got := failure.Classify(err).Type; err == nil || got != tt.typ || errors.As(err, &nl) {
					t.Errorf("CheckModel = %v (%s), want a %s failure", err, got, tt.typ)
				}
			case err != nil:
				t.Errorf("CheckModel = %v", err)
			}
		})
	}
}

// A reply without a summary gets one that an edit of the plan cannot make
// untrue: no task count (planner.Plan).
func TestPlanSummaryFallback(t *testing.T) {
	for _, tc := range []struct {
		name, reply, want string
	}{
		{name: "the model's summary", reply: planJSON, want: "Two parts then combine"},
		{name: "no summary", reply: strings.Replace(planJSON, `"summary":"Two parts then combine",`, "", 1), want: "Plan ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parsePlan(tc.reply)
			if err != nil {
				t.Fatal(err)
			}
			if p.Summary != tc.want {
				t.Errorf("summary %q, want %q", p.Summary, tc.want)
			}
		})
	}
}

// TestEarlierRunsAsTurns: the session's earlier runs go to the planner and
// the aggregator as the user and assistant turns they were, oldest first,
// between the system prompt and this run's request.
func TestEarlierRunsAsTurns(t *testing.T) {
	history := []wsproto.HistoryEntry{
		{RunID: "r1", Request: "Plan a weekend in Lisbon", Answer: "Go to Belém.", Status: wsproto.StatusSucceeded},
		{RunID: "r2", Request: "Now make it cheaper", Status: wsproto.StatusCancelled},
	}
	want := []string{"user: Plan a weekend in Lisbon", "assistant: Go to Belém.",
		"user: Now make it cheaper", "assistant: (this run ended without an answer: cancelled)"}
	check := func(t *testing.T, req chatRequest, last string) {
		t.Helper()
		var got []string
		for _, m := range req.Messages {
			got = append(got, m.Role+": "+m.Content)
		}
		if len(got) != 6 || req.Messages[0].Role != "system" || !slices.Equal(got[1:5], want) ||
			req.Messages[5].Role != "user" || !strings.Contains(req.Messages[5].Content, last) {
			t.Errorf("messages %q: want the system prompt, %q, then the request", got, want)
		}
	}
	t.Run("plan", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) { stream(w, split(planJSON, 11)...) })
		if _, err := f.client(t).Plan(t.Context(), planner.Request{Text: "And add a day trip", Attempt: 1, History: history}, func(string) {}); err != nil {
			t.Fatal(err)
		}
		check(t, f.seen()[0], "And add a day trip")
	})
	t.Run("aggregate", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ chatRequest) { stream(w, "done") })
		_, err := f.client(t).Aggregate(t.Context(), aggregator.Input{Request: "And add a day trip", History: history,
			Tasks: []aggregator.TaskOutcome{{Task: wsproto.Task{ID: "a", Title: "A"}, Status: "completed", Result: "ra"}}}, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		check(t, f.seen()[0], "And add a day trip")
	})
}
