package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/asyncapitest"
	"github.com/baton-run/baton/internal/mcptest"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// TestMain fails the suite if any goroutine outlives the tests (every
// server is shut down through run's context, which must leave nothing), or,
// when every test ran, if docs/asyncapi.yaml has an event the suite never
// produced (wire_test.go).
func TestMain(m *testing.M) {
	mcptest.Main() // the test binary started as a test MCP server (mcp_attack_test.go)
	goleak.VerifyTestMain(skipreport.Reporting(wireCovered{m}))
}

// wireCovered runs the tests, then checks what they validated.
type wireCovered struct{ m *testing.M }

func (w wireCovered) Run() int {
	code := w.m.Run()
	if code != 0 || !wholeSuite() {
		return code
	}
	spec, err := loadSpec()
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs/asyncapi.yaml:", err)
		return 1
	}
	out := io.Discard
	if testing.Verbose() {
		out = os.Stdout
	}
	if err := wireSeen.covered(out, spec); err != nil {
		wireSeen.covered(os.Stderr, spec)
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return 0
}

// startServer runs the real program on a free port with the simulated
// model and extra flags, and returns its base URL. The server is shut down,
// and run must return nil, when the test ends.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	return startServerLogging(t, io.Discard, args...)
}

// startServerLogging is startServer with the server's JSON log written to
// stderr.
func startServerLogging(t *testing.T, stderr io.Writer, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	base := startServerCtx(t, ctx, done, stderr, args...)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	return base
}

// startServerCtx starts the server under ctx, logging to stderr; run's
// result goes to done.
func startServerCtx(t *testing.T, ctx context.Context, done chan<- error, stderr io.Writer, args ...string) string {
	t.Helper()
	// Every frame either way is checked against docs/asyncapi.yaml once
	// the server has stopped (cleanups run last-registered first).
	tap := new(asyncapitest.Tap)
	t.Cleanup(func() { checkWire(t, tap, wireSeen) })
	// Only /ws: the myagent dialect's connections (myagent_test.go) speak
	// another protocol, and their sessions' /ws is in process.
	ctx = context.WithValue(ctx, wrapHandlerKey{}, func(h http.Handler) http.Handler {
		tapped := tap.Handler(h)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ws" {
				tapped.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	pr, pw := io.Pipe()
	// No drain unless a test asks for one (drain_test.go): a test's end
	// cancels the runs it left at once.
	all := append([]string{"--addr", "127.0.0.1:0", "--sim-delay", "1ms", "--log-format", "json", "--drain-timeout", "0"}, args...)
	go func() {
		err := run(ctx, all, func(string) string { return "" }, pw, stderr)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		t.Fatalf("server did not start")
	}
	line := sc.Text()
	go io.Copy(io.Discard, pr)
	// "baton listening on ws://HOST:PORT/ws (health: http://HOST:PORT/healthz)"
	rest, ok := strings.CutPrefix(line, "baton listening on ws://")
	addr, _, found := strings.Cut(rest, "/ws (health: http://")
	if !ok || !found || !strings.HasSuffix(line, addr+"/healthz)") {
		t.Fatalf("unexpected first line %q", line)
	}
	return "http://" + addr
}

func wsURL(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/ws" }

// conn is the suite's raw test connection, a wstest.Conn that records
// the token of every system.connected it reads (tokens, session_test.go).
// Its lowercase methods are the suite's names for wstest's: the fifty
// files that call them, and the tests being written beside them on other
// branches, read as they did.
type conn struct {
	w  *wstest.Conn
	t  *testing.T
	ws *websocket.Conn // w.WS(): Close, CloseNow, Ping, a write from elsewhere
}

// connOptions are the suite's options for every connection, with the
// handshake's extras of opts, if any.
func connOptions(opts *wstest.Options) *wstest.Options {
	o := wstest.Options{}
	if opts != nil {
		o = *opts
	}
	o.OnConnected = tokens.saw
	return &o
}

func newConn(t *testing.T, w *wstest.Conn) *conn { return &conn{w: w, t: t, ws: w.WS()} }

func dial(t *testing.T, base string) *conn {
	t.Helper()
	return newConn(t, wstest.Dial(t, wsURL(base), connOptions(nil)))
}

// connect dials and reads system.connected.
func connect(t *testing.T, base string) (*conn, wsproto.Connected) {
	t.Helper()
	c := dial(t, base)
	var m wsproto.Connected
	c.expectMeta(wsproto.EventConnected, &m)
	return c, m
}

// connectStored is connect to a node with the Redis store, and then a
// frame that changes nothing (a cancel with no run, answered
// no_active_run): the session is used, so in the store from then on,
// where the other nodes find it at once (a fresh session reaches the
// store only once used, or its connection silent for a second).
func connectStored(t *testing.T, base string) (*conn, wsproto.Connected) {
	t.Helper()
	c, m := connect(t, base)
	c.send(wsproto.EventUserCancel, nil)
	c.expectError(wsproto.CodeNoActiveRun)
	return c, m
}

func (c *conn) sendRaw(typ websocket.MessageType, b []byte) { c.t.Helper(); c.w.SendRaw(typ, b) }

// send writes a frame with only the fields it needs (§2): no metadata when
// meta is nil.
func (c *conn) send(event string, meta any)                { c.t.Helper(); c.w.Send(event, meta) }
func (c *conn) sendFrame(v map[string]any)                 { c.t.Helper(); c.w.SendFrame(v) }
func (c *conn) message(text string)                        { c.t.Helper(); c.w.Message(text) }
func (c *conn) respond(stepID string, meta map[string]any) { c.t.Helper(); c.w.Respond(stepID, meta) }

// next reads one frame and checks the envelope's invariants.
func (c *conn) next() client.Frame { c.t.Helper(); return c.w.Next() }

// read is next reporting what went wrong, within timeout.
func (c *conn) read(timeout time.Duration) (client.Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.w.Read(ctx)
}

func (c *conn) expect(event string) client.Frame { c.t.Helper(); return c.w.Expect(event) }
func (c *conn) expectMeta(event string, v any) client.Frame {
	c.t.Helper()
	return c.w.ExpectMeta(event, v)
}

// expectError reads a system.error and checks its code.
func (c *conn) expectError(code string) wsproto.Error { c.t.Helper(); return c.w.ExpectError(code) }

// until reads frames until one of the events, returning all read.
func (c *conn) until(events ...string) []client.Frame { c.t.Helper(); return c.w.Until(events...) }

// closeCode reads until the connection ends and returns its close code.
func (c *conn) closeCode() websocket.StatusCode { c.t.Helper(); return c.w.CloseCode() }

func meta[T any](t *testing.T, f client.Frame) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(f.Metadata, &v); err != nil {
		t.Fatalf("decode %s: %v", f.Event, err)
	}
	return v
}

// checkStream asserts what holds of every session's sequenced events: seqs
// contiguous from first, unique event ids.
func checkStream(t *testing.T, frames []client.Frame, first uint64) {
	t.Helper()
	ids := map[string]bool{}
	want := first
	for _, f := range frames {
		if !wsproto.Sequenced(f.Event) {
			continue
		}
		if f.Seq != want {
			t.Fatalf("seq %d (%s), want %d", f.Seq, f.Event, want)
		}
		want++
		if ids[f.EventID] {
			t.Fatalf("event id %s twice", f.EventID)
		}
		ids[f.EventID] = true
	}
}

func sleepTask(id, sleep string, deps ...string) wsproto.Task {
	if deps == nil {
		deps = []string{}
	}
	return wsproto.Task{ID: id, Title: "Task " + id, Description: "[sim:sleep=" + sleep + "]", DependsOn: deps}
}

func health(t *testing.T, base string) int { return healthz(t, base).Sessions }

type healthReport struct {
	Status      string `json:"status"`
	Version     string `json:"version"`
	Sessions    int    `json:"sessions"`
	Connections int    `json:"connections"`
}

func healthz(t *testing.T, base string) healthReport {
	t.Helper()
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h healthReport
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Status != "ok" {
		t.Fatalf("healthz: %v %+v", err, h)
	}
	return h
}

// eventually polls cond (an HTTP observation, not goroutine state) until it
// holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// frameLog collects a client's frames for a test to inspect.
type frameLog struct {
	mu     sync.Mutex
	frames []client.Frame
}

func (l *frameLog) add(f client.Frame) { l.mu.Lock(); l.frames = append(l.frames, f); l.mu.Unlock() }
func (l *frameLog) all() []client.Frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]client.Frame(nil), l.frames...)
}

// logSink collects a server's JSON log for a test to inspect.
type logSink struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf = append(l.buf, p...)
	l.mu.Unlock()
	return len(p), nil
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// records decodes the complete lines written so far.
func (l *logSink) records(t *testing.T) []map[string]any {
	t.Helper()
	text := l.String()
	text = text[:strings.LastIndexByte(text, '\n')+1]
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// find returns the first record with message msg and every attribute of
// want (compared as printed), or nil.
func (l *logSink) find(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
next:
	for _, r := range l.records(t) {
		if r["msg"] != msg {
			continue
		}
		for k, v := range want {
			if fmt.Sprint(r[k]) != fmt.Sprint(v) {
				continue next
			}
		}
		return r
	}
	return nil
}
