package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

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
