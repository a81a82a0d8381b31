package web

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/baton-run/baton/internal/skipreport"
)

// The browser tests drive the UI in headless Chromium (Debian's chromium
// package) against a real server, through the data-testid attributes the
// page promises. Without Chromium they skip, reported after the tests
// (internal/skipreport); under any non-empty CI they fail.

// pageTimeout bounds every wait of a browser test.
const pageTimeout = 60 * time.Second

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("BATON_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	skipreport.Skip(t, "no Chromium found: install Debian's chromium (or set BATON_CHROMIUM) to run the UI's browser tests")
	return ""
}

// page is one browser tab on the UI.
type page struct {
	t   *testing.T
	ctx context.Context
	srv *testServer

	mu       sync.Mutex // guards problems, allowed
	problems []string   // uncaught exceptions and console errors
	allowed  []string   // console errors containing one of these are expected
}

// allow expects console errors containing text: they do not fail the test.
func (p *page) allow(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allowed = append(p.allowed, text)
}

// openPage starts a browser with one tab on the server's UI and waits for
// the page to connect.
func openPage(t *testing.T, srv *testServer) *page {
	t.Helper()
	p := openPageAt(t, srv, "/")
	p.waitConnected()
	return p
}

// openPageAt starts a browser with one tab on path of the server.
func openPageAt(t *testing.T, srv *testServer, path string) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	p := &page{t: t, ctx: ctx, srv: srv}
	if err := chromedp.Do(ctx); err != nil { // starts the browser; no timeout on this first call
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleException || m.Type == "error" {
				p.mu.Lock()
				p.problems = append(p.problems, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
	next:
		for _, m := range p.problems {
			for _, a := range p.allowed {
				if strings.Contains(m, a) {
					continue next
				}
			}
			t.Errorf("page console: %s", m)
		}
	})
	// Reduced motion: the page then scrolls to a new answer at once, not
	// smoothly, so a click at an element's coordinates cannot land
	// elsewhere while the page moves (a request sent right after an answer
	// was lost so: its send button had moved under the click).
	p.do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}}})
		return err
	}))
	p.do(chromedp.Navigate(srv.URL + path))
	return p
}

// do runs actions with the page timeout.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %v\npage state: %s", err, p.describe())
	}
}

// eval evaluates a JavaScript expression and decodes its value into out.
func (p *page) eval(expr string, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("evaluate %s: decode %s: %v", expr, raw, err)
		}
	}
}

// waitFor waits until the JavaScript predicate holds. Predicates must be
// conditions that stay true once reached (a final answer shown, a task
// completed), never a passing state.
func (p *page) waitFor(what, predicate string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(pageTimeout)))
	if err != nil {
		p.t.Fatalf("waiting for %s: %v\npage state: %s", what, err, p.describe())
	}
}

// describe is what the page shows, for failure messages.
func (p *page) describe() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		connection: document.querySelector('[data-testid=connection]')?.textContent,
		error: document.querySelector('[data-testid=error]')?.textContent,
		tasks: [...document.querySelectorAll('[data-testid^="task-"]')].map(e => e.dataset.testid + "=" + e.dataset.status),
		confirms: [...document.querySelectorAll('[data-testid^="confirm-"][data-step-id]')].map(e => e.dataset.testid),
		answer: document.querySelector('[data-testid=final-answer]')?.textContent.slice(0, 200),
	})`))
	if err != nil {
		return fmt.Sprintf("(unavailable: %v)", err)
	}
	return s
}

func tid(id string) chromedp.CSS { return chromedp.CSS(fmt.Sprintf("[data-testid=%q]", id)) }

func (p *page) click(id string) {
	p.t.Helper()
	p.do(chromedp.WaitVisible(tid(id)), chromedp.Click(tid(id)))
}

// fill sets a field's value as typing would: the page sees input and
// change events.
func (p *page) fill(id, value string) {
	p.t.Helper()
	v, _ := json.Marshal(value)
	p.waitFor(id+" to exist", fmt.Sprintf(`!!document.querySelector('[data-testid=%q]')`, id))
	p.eval(fmt.Sprintf(`(() => {
		const el = document.querySelector('[data-testid=%q]');
		el.focus(); el.value = %s;
		el.dispatchEvent(new Event("input", {bubbles: true}));
		el.dispatchEvent(new Event("change", {bubbles: true}));
		return true;
	})()`, id, v), nil)
}

func (p *page) waitConnected() {
	p.t.Helper()
	p.waitFor("the page to connect", `document.querySelector('[data-testid=connection]').dataset.state === "CONNECTED"`)
}

// request sends a request through the request box.
func (p *page) request(text string) {
	p.t.Helper()
	p.waitFor("the send button to be enabled", `!document.querySelector('[data-testid=send]').disabled`)
	p.do(chromedp.SendKeys(tid("request"), text))
	p.click("send")
}

// waitAnswer waits for the final answer and returns its text.
func (p *page) waitAnswer() string {
	p.t.Helper()
	p.waitFor("the final answer", `document.querySelector('[data-testid=final-answer]').textContent.length > 0`)
	var s string
	p.eval(`document.querySelector('[data-testid=final-answer]').textContent`, &s)
	return s
}

// tasks returns each task card's status by task id.
func (p *page) tasks() map[string]string {
	p.t.Helper()
	var m map[string]string
	p.eval(`Object.fromEntries([...document.querySelectorAll('article[data-testid^="task-"]')].map(e => [e.dataset.testid.slice(5), e.dataset.status]))`, &m)
	return m
}

// logSeqs returns the seqs of the event log's lines, in page order.
func (p *page) logSeqs() []int {
	p.t.Helper()
	var seqs []int
	p.eval(`[...document.querySelectorAll('[data-testid=event-log] li[data-seq]')].map(e => Number(e.dataset.seq))`, &seqs)
	return seqs
}

// screenshot saves the page as NAME.png (quality 100 is PNG) in $BATON_SCREENSHOTS (the README's
// pictures come from there), else in the test's temporary directory.
func (p *page) screenshot(name string) {
	p.t.Helper()
	p.saveScreenshot(name, chromedp.FullScreenshot(100))
}

// saveScreenshot saves what capture takes as screenshot does.
func (p *page) saveScreenshot(name string, capture chromedp.Action[[]byte]) {
	p.t.Helper()
	dir := os.Getenv("BATON_SCREENSHOTS")
	switch {
	case dir == "":
		dir = p.t.TempDir()
	case !filepath.IsAbs(dir):
		dir = filepath.Join("..", dir) // from the repository's root, where the README's command runs
	}
	ctx, cancel := context.WithTimeout(p.ctx, pageTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, capture)
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) == 0 {
		p.t.Fatalf("screenshot %s is empty", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// checkContiguous fails unless seqs are first, first+1, … with none twice.
func checkContiguous(t *testing.T, seqs []int) {
	t.Helper()
	if len(seqs) == 0 {
		t.Fatal("the event log has no events")
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("event log seqs not contiguous at %d: …%v… (all: %v)", i, seqs[max(0, i-3):min(len(seqs), i+3)], seqs)
		}
	}
}

func allStatus(t *testing.T, tasks map[string]string, want string) {
	t.Helper()
	if len(tasks) == 0 {
		t.Fatal("no task cards")
	}
	for id, st := range tasks {
		if st != want {
			t.Errorf("task %s is %s, want %s (all: %v)", id, st, want, tasks)
		}
	}
}

func contains(t *testing.T, what, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%s does not contain %q: %.300q", what, sub, s)
	}
}
