package web

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestUIChatMode: the chat/plan switch. In chat mode a request is answered
// directly — no plan to confirm, one task card, the answer shown as it is
// written and then whole; the switch survives a reload of the tab; back in
// plan mode the next request is planned and asks for its confirmation.
func TestUIChatMode(t *testing.T) {
	srv := startServer(t, 150*time.Millisecond, nil)
	p := openPage(t, srv)
	p.click("mode-chat")
	var adaptiveOff bool
	p.eval(`document.querySelector('[data-testid=adaptive]').disabled`, &adaptiveOff)
	if !adaptiveOff {
		t.Error("in chat mode the adaptive box is still enabled: a chat run has no plan to adapt")
	}
	// Every text the streaming answer shows, and whether the plan editor
	// ever showed, as they happen (a passing state cannot be polled for).
	p.eval(`(() => {
		window.__streamed = []; window.__planShown = false;
		new MutationObserver(() => {
			const s = document.querySelector('[data-testid=answer-stream]');
			if (!s.hidden && s.textContent) window.__streamed.push(s.textContent);
			if (!document.querySelector('[data-testid=plan-editor]').hidden) window.__planShown = true;
		}).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
		return true;
	})()`, nil)

	p.request("What time is it in Tokyo?")
	answer := p.waitAnswer()
	p.screenshot("chat-answer")
	var seen struct {
		Streamed  []string
		PlanShown bool
		Mode      string
		ModeShown bool
		Sent      string
	}
	p.eval(`({streamed: window.__streamed, planShown: window.__planShown,
		mode: window.batonClient.state.run.mode,
		modeShown: !document.querySelector('[data-testid=run-mode]').hidden})`, &seen)
	if seen.PlanShown {
		t.Error("a chat run showed the plan editor")
	}
	if seen.Mode != "chat" || !seen.ModeShown {
		t.Errorf("the run's mode is %q (badge shown: %v), want chat", seen.Mode, seen.ModeShown)
	}
	if tasks := p.tasks(); len(tasks) != 1 || tasks["t1"] != "completed" {
		t.Errorf("task cards %v, want t1 completed alone", tasks)
	}
	contains(t, "the answer", answer, "What time is it in Tokyo?: done")
	partial := 0
	for _, s := range seen.Streamed {
		if !strings.HasPrefix(answer, s) {
			t.Errorf("the answer as written showed %q, not a beginning of the answer %q", s, answer)
		}
		if len(s) < len(answer) {
			partial++
		}
	}
	if partial == 0 {
		t.Errorf("the answer never showed part-written (streamed: %q)", seen.Streamed)
	}
	var stream string
	p.eval(`document.querySelector('[data-testid=answer-stream]').hidden ? "" : "shown"`, &stream)
	if stream != "" {
		t.Error("the part-written answer still shows beside the final one")
	}
	checkContiguous(t, p.logSeqs())
	var planEvents int
	p.eval(`[...document.querySelectorAll('[data-testid=event-log] li .ev')].filter(e => e.textContent.startsWith("plan.")).length`, &planEvents)
	if planEvents != 0 {
		t.Errorf("the event log has %d plan.* events in a chat run", planEvents)
	}

	// The switch is kept for the tab; back to plan, the next request plans.
	p.do(chromedp.Reload())
	p.waitConnected()
	var chatKept bool
	p.eval(`document.querySelector('[data-testid=mode-chat]').checked`, &chatKept)
	if !chatKept {
		t.Error("after a reload the switch is back on plan")
	}
	p.click("mode-plan")
	p.request("Plan a weekend trip to Lisbon")
	p.waitPlan()
	var mode any
	p.eval(`window.batonClient.state.run.mode`, &mode)
	if mode != nil {
		t.Errorf("a plan run's mode is %v, want null", mode)
	}
}
