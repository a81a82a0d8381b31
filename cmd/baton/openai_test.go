package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/openai/openaitest"
	"github.com/baton-run/baton/wsproto"
)

const fakePlan = `{"summary":"Compare then conclude","tasks":[` +
	`{"id":"s","title":"SQLite strengths","description":"d","depends_on":[]},` +
	`{"id":"p","title":"Postgres strengths","description":"d","depends_on":[]},` +
	`{"id":"v","title":"Verdict","description":"d","depends_on":["s","p"]}]}`

// fakeModel answers as a planner, a solver or an aggregator by the system
// prompt it gets.
func fakeModel(plan func(n int64) string, solve openaitest.Handler) openaitest.Handler {
	var plans atomic.Int64
	return func(w http.ResponseWriter, r *http.Request, req openaitest.Request) {
		switch system := req.Messages[0].Content; {
		case strings.Contains(system, "planner"):
			openaitest.Stream(w, openaitest.Split(plan(plans.Add(1)), 16)...)
		case strings.Contains(system, "worker") && solve != nil:
			solve(w, r, req)
		case strings.Contains(system, "worker"):
			openaitest.Stream(w, "Result ", "for ", "the ", "task.")
		default:
			openaitest.Stream(w, "The ", "final ", "answer.")
		}
	}
}

func TestOpenAIModelFullRun(t *testing.T) {
	t.Parallel()
	fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan }, nil))
	base := startServer(t, "--model", "openai", "--openai-base-url", fake.BaseURL(), "--openai-model", "test-model")
	c, _ := connect(t, base)
	_, confirm := runToConfirm(t, c, "Compare SQLite and Postgres")
	if len(confirm.Tasks) != 3 || confirm.PlanSummary != "Compare then conclude" {
		t.Fatalf("plan %+v", confirm)
	}
	c.respond(confirm.StepID, map[string]any{"confirmed": true})
	frames := c.until(wsproto.EventFinalAnswer)
	checkStream(t, frames, 8) // 1 plan.start, ≥ 4 steps, plan.completed, confirm before
	var completed int
	var progress strings.Builder
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventSolverCompleted:
			m := meta[wsproto.SolverCompleted](t, f)
			if m.Result != "Result for the task." || m.Usage.TotalTokens != 18 {
				t.Errorf("solver.completed %+v", m)
			}
			completed++
		case wsproto.EventSolverProgress:
			if m := meta[wsproto.SolverProgress](t, f); m.TaskID == "s" {
				progress.WriteString(m.Message)
			}
		case wsproto.EventPipelineCompleted:
			m := meta[wsproto.PipelineCompleted](t, f)
			// plan + 3 tasks + aggregation, 18 tokens each.
			if m.Status != wsproto.StatusSucceeded || m.Usage.TotalTokens != 5*18 || m.Usage.PromptTokens != 5*11 {
				t.Errorf("pipeline.completed %+v", m)
			}
		case wsproto.EventFinalAnswer:
			if a := meta[wsproto.FinalAnswer](t, f); a.Content != "The final answer." {
				t.Errorf("answer %q", a.Content)
			}
		}
	}
	if completed != 3 || progress.String() != "Result for the task." {
		t.Errorf("%d tasks completed; progress text of s %q", completed, progress.String())
	}
	// Every call's tokens are counted, by call: openaitest.Usage each.
	metricsReach(t, base,
		want{"baton_model_tokens_total", `call="plan",kind="prompt"`, 11, true},
		want{"baton_model_tokens_total", `call="plan",kind="completion"`, 7, true},
		want{"baton_model_tokens_total", `call="turn",kind="prompt"`, 3 * 11, true},
		want{"baton_model_tokens_total", `call="turn",kind="completion"`, 3 * 7, true},
		want{"baton_model_tokens_total", `call="aggregate",kind="completion"`, 7, true},
		want{"baton_model_call_duration_seconds_count", `call="turn",result="ok"`, 3, true})
	reqs := fake.Requests()
	if len(reqs) != 5 || reqs[0].Model != "test-model" {
		t.Errorf("%d requests to the model", len(reqs))
	}
	for _, r := range reqs[1:4] {
		if !strings.Contains(r.Text(), "Compare SQLite and Postgres") || !strings.Contains(r.Text(), "Verdict") {
			t.Errorf("a task prompt lacks the request or the task list: %q", r.Text())
		}
	}
}

func TestOpenAIPlanRepairedOnRetry(t *testing.T) {
	t.Parallel()
	fake := openaitest.NewServer(t, fakeModel(func(n int64) string {
		if n == 1 {
			return `{"summary":"x","tasks":[{"id":"a","title":"","description":"","depends_on":["zz"]}]}`
		}
		return fakePlan
	}, nil))
	base := startServer(t, "--model", "openai", "--openai-base-url", fake.BaseURL())
	c, _ := connect(t, base)
	c.message("Plan, please")
	frames := c.until(wsproto.EventUserConfirm)
	got := story(t, frames)
	if want := "fail plan1 validation retry|retry plan1/3|planned|ask plan"; strings.Join(got, "|") != want {
		t.Errorf("story %q, want %q", got, want)
	}
	for _, f := range frames {
		if f.Event == wsproto.EventRecoveryStarted && meta[wsproto.RecoveryStarted](t, f).DelayMS != 0 {
			t.Errorf("a validation retry waited: %s", f.Metadata)
		}
	}
	if second := fake.Requests()[1].Text(); !strings.Contains(second, "empty title") || !strings.Contains(second, `unknown task "zz"`) {
		t.Errorf("the retry did not feed the mistakes back: %q", second)
	}
}

func TestOpenAICancelClosesUpstream(t *testing.T) {
	t.Parallel()
	upstreamEnded := make(chan struct{}, 8)
	fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan },
		func(w http.ResponseWriter, r *http.Request, _ openaitest.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			openaitest.Delta(w, "thinking")
			<-r.Context().Done() // Baton went away
			upstreamEnded <- struct{}{}
		}))
	base := startServer(t, "--model", "openai", "--openai-base-url", fake.BaseURL())
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "a", Title: "A"}}})
	c.expect(wsproto.EventSolverStart)
	c.expect(wsproto.EventSolverProgress) // the upstream stream is open
	c.send("user.cancel", nil)
	c.until(wsproto.EventPipelineCancelled)
	<-upstreamEnded // the fake server saw its request end; a hang here fails by the test timeout
}

// TestOpenAIEndpointCheck: with --model openai Baton asks the endpoint for
// its models at start and warns when it cannot be reached, refuses or does
// not list the model; it starts either way.
func TestOpenAIEndpointCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		setup  func(fake *openaitest.Server) (baseURL string)
		model  string
		level  string
		msg    string
		attrs  map[string]any
		listed int // how many times the fake was asked for its models
	}{
		{name: "ready", model: "test-model", level: "INFO", msg: "model endpoint ready", listed: 1,
			setup: func(fake *openaitest.Server) string { return fake.BaseURL() }},
		{name: "model not listed", model: "llama3.1", level: "WARN", listed: 1,
			msg:   "the model endpoint does not list the configured model; runs will fail unless it serves it anyway (check --openai-model)",
			attrs: map[string]any{"model": "llama3.1", "available": "qwen2.5,mistral"},
			setup: func(fake *openaitest.Server) string { fake.SetModels("qwen2.5", "mistral"); return fake.BaseURL() }},
		{name: "refused", model: "test-model", level: "WARN", listed: 1,
			msg:   "the model endpoint could not be checked; starting anyway (runs fail until it answers)",
			attrs: map[string]any{"problem": "the model endpoint refused the request: 401 unauthorized (permanent)"},
			setup: func(fake *openaitest.Server) string {
				fake.FailModels(http.StatusUnauthorized, "Incorrect API key provided: sk-test-123")
				return fake.BaseURL()
			}},
		{name: "unreachable", model: "test-model", level: "WARN",
			msg:   "the model endpoint could not be checked; starting anyway (runs fail until it answers)",
			attrs: map[string]any{"problem": "the model endpoint could not be reached (network)"},
			setup: func(*openaitest.Server) string { return openaitest.ClosedBaseURL(t) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan }, nil))
			logs := &logSink{}
			// The check is done before the listening line, which
			// startServerLogging waits for.
			base := startServerLogging(t, logs, "--model", "openai", "--openai-base-url", tt.setup(fake), "--openai-model", tt.model)
			want := map[string]any{"level": tt.level}
			for k, v := range tt.attrs {
				want[k] = v
			}
			if logs.find(t, tt.msg, want) == nil {
				t.Errorf("no %s %q with %v in the log:\n%s", tt.level, tt.msg, tt.attrs, logs)
			}
			if got := fake.ModelListings(); got != tt.listed {
				t.Errorf("the models were listed %d times, want %d", got, tt.listed)
			}
			healthz(t, base) // started all the same
		})
	}
}

// clientText is everything a client received, as sent.
func clientText(t *testing.T, frames []client.Frame) string {
	t.Helper()
	var b strings.Builder
	for _, f := range frames {
		raw, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestOpenAIFailuresStayPrivate: what a client is told of a failing model
// endpoint is a category and Baton's message, never its address, a key or
// the raw Go error; the log keeps the detail. A run in which no task
// completed is answered without asking the model to aggregate.
func TestOpenAIFailuresStayPrivate(t *testing.T) {
	t.Parallel()
	const keyInBody = "Incorrect API key provided: sk-test-abc123. You can find your API key at https://platform.openai.com/account/api-keys."
	refusing := openaitest.NewServer(t, func(w http.ResponseWriter, _ *http.Request, _ openaitest.Request) {
		openaitest.Error(w, http.StatusUnauthorized, keyInBody)
	})
	closed := openaitest.ClosedBaseURL(t)
	tests := []struct {
		name    string
		baseURL string
		fake    *openaitest.Server // nil when nothing listens
		public  string             // what error.execution says
		logged  string             // in the log's err of "model call failed"
	}{
		{name: "unreachable", baseURL: closed, public: "the model endpoint could not be reached (network)", logged: "connection refused"},
		{name: "401 quoting the key", baseURL: refusing.BaseURL(), fake: refusing,
			public: "the model endpoint refused the request: 401 unauthorized (permanent)", logged: "sk-test-abc123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := strings.TrimSuffix(strings.TrimPrefix(tt.baseURL, "http://"), "/v1")
			_, port, _ := strings.Cut(host, ":")
			forbidden := []string{host, ":" + port, "127.0.0.1", "sk-", "Incorrect API key", "dial tcp", "connection refused", "status code", "Post \""}
			logs := &logSink{}
			base := startServerLogging(t, logs, "--model", "openai", "--openai-base-url", tt.baseURL,
				"--openai-model", "test-model", "--retry-base", "1ms", "--max-retries", "1")
			c, hello := connect(t, base)

			// Planning fails: plan.cancelled says why, in Baton's words.
			c.message("Compare SQLite and Postgres")
			frames := c.until(wsproto.EventPlanCancelled)
			if m := meta[wsproto.PlanCancelled](t, frames[len(frames)-1]); m.Reason != wsproto.ReasonPlanFailed || m.Error != tt.public {
				t.Errorf("plan.cancelled %+v, want plan_failed with error %q", m, tt.public)
			}

			// Every task fails: the answer is built without the model.
			c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
				{ID: "a", Title: "Task a", DependsOn: []string{}}, {ID: "b", Title: "Task b", DependsOn: []string{"a"}}}})
			_, more := answerTaskFailed(t, c, "skip")
			more = append(more, c.until(wsproto.EventFinalAnswer)...)
			frames = append(frames, more...)
			for _, f := range more {
				switch f.Event {
				case wsproto.EventExecutionError:
					if m := meta[wsproto.ExecutionError](t, f); m.Message != tt.public {
						t.Errorf("error.execution message %q, want %q", m.Message, tt.public)
					}
				case wsproto.EventRecoveryFailed:
					if m := meta[wsproto.RecoveryFailed](t, f); m.LastError != tt.public {
						t.Errorf("error.recovery_failed last_error %q, want %q", m.LastError, tt.public)
					}
				}
			}
			answer := meta[wsproto.FinalAnswer](t, frames[len(frames)-1]).Content
			for _, want := range []string{"- Task a (a): failed: " + tt.public, "- Task b (b): skipped, because a did not complete"} {
				if !strings.Contains(answer, want) {
					t.Errorf("the answer lacks %q:\n%s", want, answer)
				}
			}
			text := clientText(t, frames)
			for _, bad := range forbidden {
				if strings.Contains(text, bad) {
					t.Errorf("a client saw %q:\n%s", bad, text)
				}
			}
			if tt.fake != nil {
				reqs := tt.fake.Requests()
				for _, r := range reqs {
					if strings.Contains(r.Messages[0].Content, "final answer") {
						t.Errorf("the model was asked to aggregate a run with no result: %q", r.Text())
					}
				}
				if len(reqs) != 2 { // the plan, task a
					t.Errorf("%d requests to the model, want 2 (the plan and task a)", len(reqs))
				}
			}
			if logs.find(t, "model call failed", map[string]any{"session": hello.SessionID, "task": "a"}) == nil ||
				!strings.Contains(logs.String(), tt.logged) {
				t.Errorf("the log lacks the failure's detail %q with the session and task:\n%s", tt.logged, logs)
			}
		})
	}
}

// With --model openai a task's loop runs on function calls: several calls
// in one reply (one to a tool that does not exist, one with arguments that
// are not JSON, one that reads the workspace) are each answered as the
// tool's result, and the next round's request carries them as tool
// messages with their call ids.
func TestOpenAIToolCalls(t *testing.T) {
	t.Parallel()
	fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan }, func(w http.ResponseWriter, _ *http.Request, req openaitest.Request) {
		if len(req.Messages) == 2 { // round 1: the system prompt and the task
			openaitest.ToolCalls(w, 4,
				openaitest.Call{ID: "call_x", Name: "nosuch", Arguments: `{}`},
				openaitest.Call{ID: "call_y", Name: "read_file", Arguments: `{"path":`},
				openaitest.Call{ID: "call_z", Name: "read_file", Arguments: `{"path":"notes.md"}`})
			return
		}
		openaitest.Stream(w, "Done with tools.")
	}))
	base := startServer(t, "--model", "openai", "--openai-base-url", fake.BaseURL(), "--workspace", workspace(t))
	c, _ := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "Read"}})
	checkLoop(t, frames)
	var got []string
	for _, f := range framesOf(frames, wsproto.EventToolResult) {
		m := meta[wsproto.ToolResult](t, f)
		got = append(got, fmt.Sprintf("%s %t %s", m.Tool, m.OK, m.Result))
	}
	want := []string{
		`nosuch false there is no tool "nosuch"; the tools are: todo_write, todo_update, ask_user, list_files, read_file, search_files`,
		`read_file false the arguments are not a JSON object: {"path":`,
		`read_file true Buy bread.`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("tool results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var second *openaitest.Request
	for _, r := range fake.Requests() {
		if len(r.Messages) > 2 && strings.Contains(r.Messages[0].Content, "worker") {
			second = &r
		}
	}
	if second == nil || len(second.Tools) != 6 {
		t.Fatalf("no second round with the 6 tools offered: %+v", second)
	}
	m := second.Messages
	if len(m) != 6 || len(m[2].ToolCalls) != 3 || m[3].ToolCallID != "call_x" || m[5].ToolCallID != "call_z" || m[5].Content != "Buy bread." {
		t.Errorf("round 2 messages: %+v", m)
	}
	if sc := meta[wsproto.SolverCompleted](t, framesOf(frames, wsproto.EventSolverCompleted)[0]); sc.Result != "Done with tools." {
		t.Errorf("result %q", sc.Result)
	}
}

// TestOpenAIAdaptive: the decide step on a real-model endpoint — a
// question, then an adjustment the user approves, then continue. The
// answer reaches every later prompt, decisions included, and the decide
// step's tokens count in the run's.
func TestOpenAIAdaptive(t *testing.T) {
	t.Parallel()
	var decisions atomic.Int64
	answer := fakeModel(func(int64) string { return fakePlan }, nil)
	fake := openaitest.NewServer(t, func(w http.ResponseWriter, r *http.Request, req openaitest.Request) {
		if !strings.Contains(req.Messages[0].Content, "You steer") {
			answer(w, r, req)
			return
		}
		switch decisions.Add(1) {
		case 1:
			openaitest.Stream(w, `{"action":"request_input","reason":"The region matters","add":[],"remove":[],"question":"Which region?"}`)
		case 2:
			openaitest.Stream(w, openaitest.Split(`{"action":"adjust_plan","reason":"Worth a second look","add":[{"id":"extra",`+
				`"title":"Double-check","description":"d","depends_on":["s"]}],"remove":[],"question":""}`, 20)...)
		default:
			openaitest.Stream(w, `{"action":"continue","reason":"Fine","add":[],"remove":[],"question":""}`)
		}
	})
	base := startServer(t, "--model", "openai", "--openai-base-url", fake.BaseURL())
	c, _ := connect(t, base)
	_, question := confirmAndRead(t, c, "Compare SQLite and Postgres")
	if question.Kind != wsproto.ConfirmInput || question.Question != "Which region?" || question.TaskID != "" {
		t.Fatalf("first question %+v", question)
	}
	c.respond(question.StepID, map[string]any{"text": "eu-west"})
	frames := c.until(wsproto.EventUserConfirm)
	adjust := meta[wsproto.UserConfirm](t, frames[len(frames)-1])
	if adjust.Kind != wsproto.ConfirmAdjust || len(adjust.Added) != 1 || adjust.Added[0].ID != "extra" || len(adjust.Tasks) != 4 {
		t.Fatalf("plan_adjust %+v", adjust)
	}
	c.respond(adjust.StepID, map[string]any{"confirmed": true})
	frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
	pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0])
	// plan, 4 tasks, 4 decisions and aggregation, 18 tokens each
	if pc.Completed != 4 || pc.Usage.TotalTokens != 10*18 {
		t.Errorf("pipeline.completed %+v", pc)
	}
	asked := 0
	for _, r := range fake.Requests() {
		system := r.Messages[0].Content
		later := strings.Contains(r.Text(), "Your task: v") || strings.Contains(r.Text(), "Your task: extra") ||
			(strings.Contains(system, "You steer") && strings.Contains(r.Text(), "[completed] Double-check"))
		if later && !strings.Contains(r.Text(), "eu-west") {
			t.Errorf("a later prompt lacks the user's answer:\n%s", r.Text())
		}
		if later {
			asked++
		}
	}
	if asked < 3 {
		t.Errorf("%d later prompts seen", asked)
	}
}
