//go:build unix

package agui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

// cutLog passes on the message of each record logged, so a test can wait
// for a stream to be cut.
type cutLog struct{ msgs chan string }

func (l cutLog) Enabled(context.Context, slog.Level) bool { return true }
func (l cutLog) Handle(_ context.Context, r slog.Record) error {
	select {
	case l.msgs <- r.Message:
	default:
	}
	return nil
}
func (l cutLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l cutLog) WithGroup(string) slog.Handler      { return l }

// smallBuffers makes the server's sockets small, so a client that does
// not read blocks the stream's writes at once.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestSlowReader: a client that stops reading is cut once a write has
// waited WriteTimeout — the run goes on, nothing waits for the client —
// and it resumes with the last id it has, missing nothing.
func TestSlowReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orch, err := orchestrator.New(orchestrator.Models{Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{}},
		&orchestrator.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer orch.Close(context.Background())
	logs := cutLog{msgs: make(chan string, 64)}
	h := New(orch, &Options{WriteTimeout: 50 * time.Millisecond, Logger: slog.New(logs)})
	defer h.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { srv.Serve(smallBuffers{ln}); close(served) }()
	defer func() { srv.Close(); <-served }()
	// The client's receive buffer is small from the start: set after the
	// connect, the window it advertised would stay large.
	small := func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}
	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{Control: small}).DialContext}}
	defer client.CloseIdleConnections()
	base := "http://" + ln.Addr().String()

	// A long request: every planning event carries it.
	thread := "slow-reader-thread-0123456789abcdef"
	in, _ := json.Marshal(map[string]any{"threadId": thread, "runId": "r1", "forwardedProps": map[string]any{"mode": "plan"},
		"messages": []any{map[string]any{"id": "m", "role": "user", "content": strings.Repeat("Compare Go and Rust. ", 2000)}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/agui", bytes.NewReader(in))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Not reading: the server's write waits, then the stream is cut.
	for msg := ""; msg != "agui: stream cut"; {
		select {
		case msg = <-logs.msgs:
		case <-ctx.Done():
			t.Fatal("the stream of a client that does not read was not cut")
		}
	}
	got := readAll(t, resp)
	if len(got) == 0 || strings.Contains(got[len(got)-1].data, "RUN_FINISHED") {
		t.Fatalf("the cut stream has %d events, the last %v", len(got), got)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/agui/"+thread+"?runId=r1", nil)
	req.Header.Set("Last-Event-ID", got[len(got)-1].id)
	resp2, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	rest := readAll(t, resp2)
	all := append(got, rest...)
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.id] {
			t.Fatalf("event %s twice", e.id)
		}
		seen[e.id] = true
	}
	if last := all[len(all)-1].data; !strings.Contains(last, `"type":"RUN_FINISHED"`) || !strings.Contains(last, `"interrupt"`) {
		t.Fatalf("the resumed stream ends with %s", last)
	}
}

type rawEvent struct{ id, data string }

// readAll reads a stream's whole events until it ends or breaks.
func readAll(t *testing.T, resp *http.Response) []rawEvent {
	t.Helper()
	var out []rawEvent
	var cur rawEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" && cur.data != "":
			out = append(out, cur)
			cur = rawEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[6:]
		}
	}
	return out
}
