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
