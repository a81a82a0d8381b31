package web

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The UI end to end, in headless Chromium: what a newcomer does with
// go run ./cmd/baton and a browser.

func TestUIEditedPlan(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond, nil)
	p := openPage(t, srv)
	p.screenshot("connected")

	p.request("Plan a weekend trip to Lisbon")
	n := p.waitPlan()
	var first string
	p.eval(`document.querySelector('[data-testid="plan-id-0"]').value`, &first)

	// Edit: retitle the first task, remove the last (it depends on all the
	// others), add one that depends on the first.
	p.fill("plan-title-0", "Find flights, edited in the browser")
	p.click(fmt.Sprintf("plan-remove-%d", n-1))
	p.click("add-task")
	p.fill(fmt.Sprintf("plan-title-%d", n-1), "Added in the browser")
	p.fill(fmt.Sprintf("plan-id-%d", n-1), "extra")
	p.click(fmt.Sprintf("plan-dep-%d-%s", n-1, first))
	p.screenshot("plan-edit")
	p.click("confirm-plan")

	answer := p.waitAnswer()
	p.screenshot("final-answer")
	tasks := p.tasks()
	if len(tasks) != n {
		t.Errorf("%d task cards, want %d (the plan's %d − 1 + 1): %v", len(tasks), n, n, tasks)
	}
	if _, ok := tasks["extra"]; !ok {
		t.Errorf("the added task has no card: %v", tasks)
	}
	allStatus(t, tasks, "completed")
	var title, deps string
	p.eval(fmt.Sprintf(`document.querySelector('[data-testid="task-%s"] .title').textContent`, first), &title)
	p.eval(`document.querySelector('[data-testid="task-extra"] .deps').textContent`, &deps)
	if title != "Find flights, edited in the browser" {
		t.Errorf("first task's card reads %q", title)
	}
	contains(t, "the added task's dependencies", deps, first)
	contains(t, "the answer", answer, "Added in the browser")
	checkContiguous(t, p.logSeqs())
}

func TestUIDropMidRun(t *testing.T) {
	srv := startServer(t, 150*time.Millisecond, nil)
	p := openPage(t, srv)
	p.runUntilATaskRuns("Compare three laptops for travel")
	p.screenshot("running")
	p.mustBeMidRun()
	if srv.Cut() == 0 {
		t.Fatal("no connection to cut")
	}
	p.waitFor("the page to resume", `window.batonClient.stats.resumes >= 1`)
	p.waitAnswer()
	allStatus(t, p.tasks(), "completed")
	seqs := p.logSeqs()
	checkContiguous(t, seqs)
	if seqs[0] != 1 {
		t.Errorf("the event log starts at seq %d, want 1", seqs[0])
	}
	var shown string
	p.eval(`document.querySelector('[data-testid=connection]').dataset.seq`, &shown)
	if want := fmt.Sprint(seqs[len(seqs)-1]); shown != want {
		t.Errorf("the connection indicator shows seq %s, the log ends at %s", shown, want)
	}
}

func TestUIReloadMidRun(t *testing.T) {
	srv := startServer(t, 150*time.Millisecond, nil)
	p := openPage(t, srv)
	p.runUntilATaskRuns("Write a short guide to sourdough")
	var before string
	p.eval(`window.batonClient.sessionId`, &before)
	p.mustBeMidRun()

	p.do(chromedp.Reload())
	p.waitConnected()
	var after string
	p.eval(`window.batonClient.sessionId`, &after)
	if after != before {
		t.Fatalf("after the reload the page holds session %s, want %s", after, before)
	}
	p.waitAnswer()
	allStatus(t, p.tasks(), "completed")
	var stats struct{ Resumes, Resyncs int }
	p.eval(`window.batonClient.stats`, &stats)
	if stats.Resumes != 1 || stats.Resyncs != 0 {
		t.Errorf("after a reload: %d resumes, %d resyncs; want one exact resume (a replay)", stats.Resumes, stats.Resyncs)
	}
	checkContiguous(t, p.logSeqs())
}

func TestUITaskFailedRetry(t *testing.T) {
	srv := startServer(t, 20*time.Millisecond, nil)
	p := openPage(t, srv)
	p.request("Summarise the week's news")
	p.waitPlan()
	var desc, first string
	p.eval(`document.querySelector('[data-testid="plan-desc-0"]').value`, &desc)
	p.eval(`document.querySelector('[data-testid="plan-id-0"]').value`, &first)
	p.fill("plan-desc-0", desc+" [sim:fail=permanent*1]")
	p.click("confirm-plan")

	p.waitFor("the task_failed question", `!!document.querySelector('[data-testid="confirm-task_failed"]')`)
	var about string
	p.eval(`document.querySelector('[data-testid="confirm-task_failed"]').dataset.taskId`, &about)
	if about != first {
		t.Errorf("the question is about task %q, want %q", about, first)
	}
	p.screenshot("task-failed")
	p.click("confirm-retry")
	p.waitAnswer()
	allStatus(t, p.tasks(), "completed")
	var attempt string
	p.eval(fmt.Sprintf(`document.querySelector('[data-testid="attempt-%s"]').textContent`, first), &attempt)
	if attempt != "attempt 2" {
		t.Errorf("task %s shows %q, want attempt 2", first, attempt)
	}
}

func TestUIScriptInjection(t *testing.T) {
	srv := startServer(t, 10*time.Millisecond, nil)
	p := openPage(t, srv)
	request := `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> **bold**`
	p.request(request)
	p.waitPlan()
	var first string
	p.eval(`document.querySelector('[data-testid="plan-id-0"]').value`, &first)
	p.fill("plan-title-0", `<script>window.__pwned=3</script>`)
	p.fill("plan-desc-0", `<img src=x onerror="window.__pwned=4">`)
	p.click("confirm-plan")
	answer := p.waitAnswer()

	var pwned bool
	p.eval(`window.__pwned !== undefined`, &pwned)
	if pwned {
		t.Error("text from the request or a result ran as script")
	}
	var elements int
	p.eval(`document.querySelectorAll('main script, main img, main iframe').length`, &elements)
	if elements != 0 {
		t.Errorf("%d script/img/iframe elements inside the page's content, want 0", elements)
	}
	contains(t, "the answer", answer, "<script>window.__pwned=2</script>")
	var result string
	p.eval(fmt.Sprintf(`document.querySelector('[data-testid="task-%s"]').textContent`, first), &result)
	contains(t, "the task card", result, `<script>window.__pwned=3</script>`)
}

// waitPlan waits for the plan confirmation form and returns how many tasks
// it has.
func (p *page) waitPlan() int {
	p.t.Helper()
	p.waitFor("the plan to confirm", `!document.querySelector('[data-testid=plan-editor]').hidden &&
		document.querySelectorAll('[data-testid^="plan-task-"]').length > 0`)
	var n int
	p.eval(`document.querySelectorAll('[data-testid^="plan-task-"]').length`, &n)
	if n < 2 {
		p.t.Fatalf("the plan has %d tasks; the simulated planner makes 3 to 6", n)
	}
	return n
}

// runUntilATaskRuns sends a request, confirms its plan as it is, and
// returns once a task runs, the run not over yet.
func (p *page) runUntilATaskRuns(request string) {
	p.t.Helper()
	p.request(request)
	p.waitPlan()
	p.click("confirm-plan")
	p.waitFor("a task to run", `!!document.querySelector('article[data-status="running"]')`)
	p.mustBeMidRun()
}

// mustBeMidRun fails the test if the run already has its answer: a cut or
// a reload after the end would prove nothing.
func (p *page) mustBeMidRun() {
	p.t.Helper()
	var answered string
	p.eval(`document.querySelector('[data-testid=final-answer]').textContent`, &answered)
	if strings.TrimSpace(answered) != "" {
		p.t.Fatal("the run ended before the interruption; slow the simulated model down")
	}
}

func TestUIRefusedEdit(t *testing.T) {
	srv := startServer(t, 10*time.Millisecond, nil)
	p := openPage(t, srv)
	p.request("Draft a reading list")
	p.waitPlan()
	p.fill("plan-title-0", "")
	p.fill("plan-id-1", "") // an empty id: two problems, each shown beside its task
	p.click("confirm-plan")
	p.waitFor("the problems beside their tasks", `!!document.querySelector('[data-testid="plan-problem-0"]') &&
		!!document.querySelector('[data-testid="plan-problem-1"]')`)
	var problems []string
	p.eval(`[...document.querySelectorAll('[data-testid^="plan-problem-"]')].map(e => e.dataset.testid + ": " + e.textContent)`, &problems)
	joined := strings.Join(problems, "\n")
	contains(t, "the problems", joined, "plan-problem-0: task 0")
	contains(t, "the problems", joined, "plan-problem-1: task 1")
	p.screenshot("refused-edit")

	// Fixed, the same question takes the edit.
	p.fill("plan-title-0", "A title again")
	p.fill("plan-id-1", "second")
	p.click("confirm-plan")
	p.waitAnswer()
	tasks := p.tasks()
	if _, ok := tasks["second"]; !ok {
		t.Errorf("the renamed task has no card: %v", tasks)
	}
	allStatus(t, tasks, "completed")
}
