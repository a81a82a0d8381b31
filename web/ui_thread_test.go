package web

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestUIConversation: the page shows the conversation's earlier runs
// above the current one, from the live events and, after a reload, from
// the session's history; "New conversation" starts a session that has
// none.
func TestUIConversation(t *testing.T) {
	srv := startServer(t, 10*time.Millisecond, nil)
	p := openPage(t, srv)
	requests := []string{"Plan a weekend in Lisbon", "Now make it cheaper", "And add a day trip"}
	for i, req := range requests {
		p.request(req)
		p.waitPlan()
		p.click("confirm-plan")
		p.waitAnswerOf(req)
		// The runs before this one, oldest first, and not this one: its
		// answer is the one shown below.
		p.waitThread(requests[:i])
	}
	answer := p.waitAnswerOf(requests[2])
	contains(t, "the third answer", answer, fmt.Sprintf("(following %q; %q)", requests[0], requests[1]))
	p.screenshot("thread")

	var session string
	p.eval(`window.batonClient.sessionId`, &session)
	p.do(chromedp.Reload())
	p.waitConnected()
	p.waitThread(requests[:2]) // from the replay, or the snapshot's history
	// The stored state the page starts from may be of before the run
	// ended: the new conversation waits for the resume to bring it up to
	// date (the button is disabled while a run is on).
	p.waitAnswerOf(requests[2])
	p.waitFor("the new conversation button", `!document.querySelector('[data-testid=new-conversation]').disabled`)
	var again string
	p.eval(`window.batonClient.sessionId`, &again)
	if again != session {
		t.Fatalf("after the reload the page holds session %s, want %s", again, session)
	}

	// Clicked from the page's script: the answer's arrival scrolls the page
	// smoothly to it, and a click at the button's coordinates during that
	// scroll can land elsewhere.
	var clicked bool
	p.eval(`(() => { document.querySelector('[data-testid=new-conversation]').click(); return true })()`, &clicked)
	p.waitFor("a new session", fmt.Sprintf(`window.batonClient.sessionId !== "" && window.batonClient.sessionId !== %q &&
		window.batonClient.connection === "CONNECTED"`, session))
	p.waitThread(nil)
	p.request("Plan a weekend in Porto")
	p.waitPlan()
	p.click("confirm-plan")
	fresh := p.waitAnswerOf("Plan a weekend in Porto")
	if strings.Contains(fresh, "following") {
		t.Errorf("the new conversation's first answer quotes earlier runs: %q", fresh)
	}
	p.waitThread(nil)
}

// waitAnswerOf waits for the final answer of the run for request.
func (p *page) waitAnswerOf(request string) string {
	p.t.Helper()
	p.waitFor("the answer to "+request, fmt.Sprintf(`document.querySelector('[data-testid=final-answer]').textContent.startsWith("Answer to " + %s)`,
		strconv.Quote(strconv.Quote(request))))
	var s string
	p.eval(`document.querySelector('[data-testid=final-answer]').textContent`, &s)
	return s
}

// waitThread waits for the thread to show exactly these requests, in order
// (none: the thread is hidden).
func (p *page) waitThread(requests []string) {
	p.t.Helper()
	want := "[]"
	if len(requests) > 0 {
		b, _ := json.Marshal(requests)
		want = string(b)
	}
	p.waitFor(fmt.Sprintf("the thread to show %s", want), fmt.Sprintf(`JSON.stringify([...document.querySelectorAll('#thread:not([hidden]) [data-testid=thread-request]')].map(e => e.textContent)) === %s`,
		strconv.Quote(want)))
}
