package web

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The UI on a phone and at the end of a run, and what the run head and
// the cards say after the plan changed: in headless Chromium, at the
// desktop window's size and at an iPhone's.

// An iPhone-sized screen, in CSS pixels.
const phoneWidth, phoneHeight = 390, 844

// phone makes the page an iPhone-sized screen: 390 × 844 CSS px, three
// device pixels to one, a mobile viewport with touch.
func (p *page) phone() {
	p.t.Helper()
	p.do(chromedp.EmulateViewport(phoneWidth, phoneHeight, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	p.waitFor("the phone's viewport", fmt.Sprintf(`innerWidth === %d`, phoneWidth))
}

// layoutProblems lists what does not fit on the page as it is now: a page
// wider than its viewport, a plan field or a card title that cuts its
// text, a session id over more than two lines.
func (p *page) layoutProblems() []string {
	p.t.Helper()
	var problems []string
	p.eval(`(() => {
		const problems = [];
		const doc = document.documentElement;
		if (doc.scrollWidth > innerWidth) problems.push("the page is " + doc.scrollWidth + " px wide in a " + innerWidth + " px viewport");
		const editor = document.querySelector('[data-testid=plan-editor]').getBoundingClientRect();
		for (const el of document.querySelectorAll('[data-testid^="plan-title-"], [data-testid^="plan-id-"]')) {
			const id = el.dataset.testid;
			if (el.scrollWidth > el.clientWidth || el.scrollHeight > el.clientHeight + 1) {
				problems.push(id + " cuts its text: " + el.scrollWidth + "×" + el.scrollHeight + " in " + el.clientWidth + "×" + el.clientHeight);
			}
			const r = el.getBoundingClientRect();
			if (r.left < editor.left || r.right > editor.right) problems.push(id + " sticks out of the plan editor");
		}
		for (const el of document.querySelectorAll('article[data-testid^="task-"] .title')) {
			if (el.scrollWidth > el.clientWidth) problems.push("the title of " + el.closest("article").dataset.testid + " is cut");
		}
		const s = document.querySelector('[data-testid=session]');
		if (!s.textContent) problems.push("no session id shown");
		const probe = s.cloneNode();
		probe.textContent = "x";
		probe.style.cssText = "position: absolute; white-space: nowrap";
		s.parentNode.append(probe);
		const line = probe.getBoundingClientRect().height;
		probe.remove();
		const h = s.getBoundingClientRect().height;
		if (h > 2 * line + 0.5) problems.push("the session id takes " + (h / line).toFixed(1) + " lines");
		return problems;
	})()`, &problems)
	return problems
}

// answerInView holds once the answer's section is in the viewport: all of
// it, or, when it is taller than the space left, its start near the top.
const answerInView = `(() => {
	const r = document.getElementById("answer-section").getBoundingClientRect();
	return r.height > 0 && r.top >= 0 && (r.bottom <= innerHeight || r.top <= innerHeight / 4);
})()`

func TestUIRunEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phone bool
	}{
		{name: "desktop"},
		{name: "phone", phone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, 10*time.Millisecond, nil)
			p := openPage(t, srv)
			if tc.phone {
				p.phone()
			}
			p.request("Plan a weekend trip to Lisbon")
			n := p.waitPlan()
			p.fill("plan-title-0", "Find flights from Berlin to Lisbon for Friday evening and back on Sunday night")
			p.click(fmt.Sprintf("plan-remove-%d", n-1)) // the last task depends on all the others
			p.click("plan-remove-1")
			for _, problem := range p.layoutProblems() {
				t.Errorf("the plan editor: %s", problem)
			}
			if tc.phone {
				// From the top: the header (the session id on one line), the
				// request, the editor's first tasks.
				p.eval(`scrollTo(0, 0)`, nil)
				p.waitFor("the page at its top", `scrollY === 0`)
				p.saveScreenshot("plan-edit-phone", chromedp.CaptureScreenshot())
			}
			p.click("confirm-plan")
			p.waitAnswer()

			p.waitFor("the answer brought into view", answerInView)
			var gap float64
			p.eval(`document.getElementById("answer-section").getBoundingClientRect().top -
				document.querySelector("[data-testid=board]").getBoundingClientRect().bottom`, &gap)
			if gap < 12 {
				t.Errorf("the answer is %.0f px below the task board, want some space (≥ 12 px)", gap)
			}
			for _, problem := range p.layoutProblems() {
				t.Errorf("at the end of the run: %s", problem)
			}
			p.checkTally(n-2, fmt.Sprintf("%d tasks · %d completed", n-2, n-2))
			if tc.phone {
				p.saveScreenshot("final-answer-phone", chromedp.CaptureScreenshot())
			}
		})
	}
}

// TestUIPlanChanges: after the plan changed — edited before the
// confirmation (TestUIRunEnd), adjusted mid-run, tasks skipped — the run
// head counts the tasks as they are, and a skipped task says why.
func TestUIPlanChanges(t *testing.T) {
	for _, tc := range []struct {
		name     string
		adaptive bool
		request  string
		edit     func(p *page) // before the plan is confirmed
		answer   func(p *page) // the run's questions, after the confirmation
		tasks    func(n int) int
		tally    func(n int) string
		skipped  func(n int) map[string]string // task id → what its skip reason must say, for a plan of n tasks
	}{
		{
			name:    "a failed task skipped: its dependents say which",
			request: "Plan a weekend trip to Lisbon",
			edit: func(p *page) {
				var desc string
				p.eval(`document.querySelector('[data-testid="plan-desc-0"]').value`, &desc)
				p.fill("plan-desc-0", desc+" [sim:fail=permanent*1]")
			},
			answer: func(p *page) {
				p.waitFor("the task_failed question", `!!document.querySelector('[data-testid="confirm-task_failed"]')`)
				p.click("confirm-skip")
			},
			tasks: func(n int) int { return n },
			tally: func(n int) string {
				skipped := len(simDependents(n))
				return fmt.Sprintf("%d tasks · %d completed · 1 failed · %d skipped", n, n-1-skipped, skipped)
			},
			skipped: func(n int) map[string]string {
				why := map[string]string{}
				for _, id := range simDependents(n) {
					why[id] = "t1 failed"
				}
				return why
			},
		},
		{
			name:     "an adaptive run answers early: the pending task says so",
			adaptive: true,
			request:  "Plan a weekend trip to Lisbon [sim:decide=synthesize]",
			tasks:    func(n int) int { return n },
			tally:    nil, // how many tasks had started when the decision came is the scheduler's
			skipped: func(n int) map[string]string {
				return map[string]string{fmt.Sprintf("t%d", n): "answered early"}
			},
		},
		{
			name:     "a task added mid-run: the count follows the plan",
			adaptive: true,
			request:  "Plan a weekend trip to Lisbon [sim:decide=adjust_plan:+Check the weather]",
			answer: func(p *page) {
				p.waitFor("the plan_adjust question", `!!document.querySelector('[data-testid="confirm-plan_adjust"]')`)
				p.click("confirm-adjust-apply")
			},
			tasks: func(n int) int { return n + 1 },
			tally: func(n int) string { return fmt.Sprintf("%d tasks · %d completed · plan v2", n+1, n+1) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, 10*time.Millisecond, nil)
			p := openPage(t, srv)
			if tc.adaptive {
				p.click("adaptive")
			}
			p.request(tc.request)
			n := p.waitPlan()
			if tc.edit != nil {
				tc.edit(p)
			}
			p.click("confirm-plan")
			if tc.answer != nil {
				tc.answer(p)
			}
			p.waitAnswer()
			want := ""
			if tc.tally != nil {
				want = tc.tally(n)
			}
			p.checkTally(tc.tasks(n), want)
			if tc.skipped == nil {
				var reasons int
				p.eval(`document.querySelectorAll('[data-testid^="skip-reason-"]').length`, &reasons)
				if reasons != 0 {
					t.Errorf("%d skip reasons shown in a run that skipped nothing", reasons)
				}
				return
			}
			for id, says := range tc.skipped(n) {
				var status, why string
				p.eval(fmt.Sprintf(`document.querySelector('[data-testid="task-%s"]').dataset.status`, id), &status)
				p.eval(fmt.Sprintf(`document.querySelector('[data-testid="skip-reason-%s"]')?.textContent ?? ""`, id), &why)
				if status != "skipped" {
					t.Errorf("task %s is %s, want skipped", id, status)
				}
				contains(t, "task "+id+"'s skip reason", why, says)
			}
		})
	}
}

// simDependents are the tasks of a simulated plan of n tasks that build on
// t1: the last (on every other) and, in plans of 5 or more, the one
// before it.
func simDependents(n int) []string {
	if n >= 5 {
		return []string{fmt.Sprintf("t%d", n-1), fmt.Sprintf("t%d", n)}
	}
	return []string{fmt.Sprintf("t%d", n)}
}

var taskCount = regexp.MustCompile(`(\d+) tasks?\b`)

// checkTally checks the run head: the tally reads want (unless want is
// empty), there are n task cards, and no number of tasks the head states —
// the plan's summary included — is other than n.
func (p *page) checkTally(n int, want string) {
	p.t.Helper()
	var tally, head string
	p.eval(`document.querySelector('[data-testid=plan-tally]').textContent`, &tally)
	p.eval(`document.querySelector('.run-head').textContent`, &head)
	if cards := len(p.tasks()); cards != n {
		p.t.Errorf("%d task cards, want %d", cards, n)
	}
	if want != "" && tally != want {
		p.t.Errorf("the tally reads %q, want %q", tally, want)
	}
	if !strings.HasPrefix(tally, fmt.Sprintf("%d tasks", n)) {
		p.t.Errorf("the tally reads %q, want it to count %d tasks", tally, n)
	}
	for _, m := range taskCount.FindAllStringSubmatch(head, -1) {
		if m[1] != fmt.Sprint(n) {
			p.t.Errorf("the run head says %q with %d tasks in the run: %q", m[0], n, head)
		}
	}
}
