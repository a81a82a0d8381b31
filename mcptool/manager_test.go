//go:build unix

package mcptool

import (
	"github.com/baton-run/baton/internal/npmtest"

	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/tool"
)

// These tests run real MCP servers from npm (see npmtest.Modules).

func everythingSpec(t *testing.T) Spec {
	path := filepath.Join(npmtest.Modules(t), "@modelcontextprotocol", "server-everything", "dist", "index.js")
	return Spec{Name: "ev", Command: "node", Args: []string{path, "stdio"}}
}

func filesystemSpec(t *testing.T, dir string) Spec {
	path := filepath.Join(npmtest.Modules(t), "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	return Spec{Name: "fs", Command: "node", Args: []string{path, dir}}
}

// logRecorder is a slog handler that writes to the test's output and
// counts messages.
type logRecorder struct {
	slog.Handler

	// mu guards counts.
	mu     *sync.Mutex
	counts map[string]int
}

func newLogRecorder(t *testing.T) *logRecorder {
	return &logRecorder{
		Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}),
		mu:      new(sync.Mutex),
		counts:  make(map[string]int),
	}
}

func (h *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	h.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

func (h *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{Handler: h.Handler.WithAttrs(attrs), mu: h.mu, counts: h.counts}
}

func (h *logRecorder) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

func startManager(t *testing.T, specs []Spec, opts Options) *Manager {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(newLogRecorder(t))
	}
	m, err := Start(t.Context(), specs, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func findTool(t *testing.T, m *Manager, name string) tool.Tool {
	t.Helper()
	for _, tl := range m.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

func callTool(t *testing.T, tl tool.Tool, args string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return tl.Call(ctx, json.RawMessage(args))
}

// liveConn returns the server's live connection, if any.
func (s *server) liveConn() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// processExists reports whether pid is a live process (a zombie is not:
// in a container nothing may reap the orphans the tests kill).
func processExists(pid int) bool {
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// pid (comm) state …; comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
	}
	return syscall.Kill(pid, 0) == nil
}

// processGone reports whether pid ends within a few seconds. A killed
// process that is not our child gives no event to wait for, so it is
// polled.
func processGone(pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !processExists(pid) {
			return true
		}
	}
	return false
}

// groupMembers returns the live processes of process group pgid, read
// from /proc.
func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(pgid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits for the server to notice that c has ended.
func waitGone(t *testing.T, c *conn) {
	t.Helper()
	select {
	case <-c.gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's exit was not noticed")
	}
}

func TestTools(t *testing.T) {
	m := startManager(t, []Spec{everythingSpec(t)}, Options{})
	tools := m.Tools()
	if len(tools) < 10 {
		t.Fatalf("%d tools, want the dozen of server-everything", len(tools))
	}
	for _, tl := range tools {
		spec := tl.Spec()
		if !strings.HasPrefix(spec.Name, "ev__") || !tool.ValidName(spec.Name) {
			t.Errorf("tool name %q", spec.Name)
		}
		// server-everything annotates each tool; those not readOnlyHint
		// ask first.
		if readOnly := everythingReadOnly[strings.TrimPrefix(spec.Name, "ev__")]; spec.Confirm == readOnly {
			t.Errorf("%s: Confirm = %v, but readOnlyHint is %v", spec.Name, spec.Confirm, readOnly)
		}
		if spec.Description == "" {
			t.Errorf("%s: no description", spec.Name)
		}
	}
	for _, name := range []string{"ev__echo", "ev__get-sum", "ev__get-tiny-image", "ev__trigger-long-running-operation"} {
		findTool(t, m, name)
	}
	echo := findTool(t, m, "ev__echo").Spec()
	if echo.Description != "Echoes back the input string" {
		t.Errorf("ev__echo: description %q", echo.Description)
	}
	var schema struct {
		Type       string
		Properties map[string]struct{ Type string }
		Required   []string
	}
	if err := json.Unmarshal(echo.InputSchema, &schema); err != nil {
		t.Fatalf("ev__echo: schema %s: %v", echo.InputSchema, err)
	}
	if schema.Type != "object" || schema.Properties["message"].Type != "string" || len(schema.Required) != 1 || schema.Required[0] != "message" {
		t.Errorf("ev__echo: schema %s", echo.InputSchema)
	}
	// A set takes them all: the names are unique and valid.
	var set tool.Set
	if err := set.Add(tools...); err != nil {
		t.Fatal(err)
	}
}

func TestCall(t *testing.T) {
	m := startManager(t, []Spec{everythingSpec(t)}, Options{})
	tests := []struct {
		name string
		tool string
		args string
		want []string // parts of the result
	}{
		{name: "echo", tool: "ev__echo", args: `{"message":"hello, MCP"}`, want: []string{"Echo: hello, MCP"}},
		{name: "sum", tool: "ev__get-sum", args: `{"a":2,"b":3.5}`, want: []string{"The sum of 2 and 3.5 is 5.5."}},
		{name: "image described", tool: "ev__get-tiny-image", args: `{}`, want: []string{"[image: image/png, ", " bytes]", "MCP logo"}},
		{name: "no arguments", tool: "ev__get-tiny-image", args: ``, want: []string{"[image: image/png, "}},
		{name: "structured", tool: "ev__get-structured-content", args: `{"location":"Chicago"}`, want: []string{`"temperature"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := callTool(t, findTool(t, m, tt.tool), tt.args)
			if err != nil {
				t.Fatalf("%s(%s): %v", tt.tool, tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Fatalf("%s(%s) = %q, want it to contain %q", tt.tool, tt.args, got, w)
				}
			}
		})
	}
}

func TestCallErrors(t *testing.T) {
	dir := t.TempDir()
	m := startManager(t, []Spec{everythingSpec(t), filesystemSpec(t, dir)}, Options{})
	tests := []struct {
		name string
		tool string
		args string
		want string // a part of the error
	}{
		{name: "isError from the tool", tool: "fs__read_text_file", args: `{"path":"` + filepath.Join(dir, "missing.txt") + `"}`, want: "ENOENT"},
		{name: "outside the allowed directory", tool: "fs__read_text_file", args: `{"path":"/etc/hostname"}`, want: "Access denied"},
		{name: "invalid arguments", tool: "ev__get-sum", args: `{"a":"two"}`, want: "Input validation error"},
		{name: "arguments not an object", tool: "ev__echo", args: `["x"]`, want: "must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := callTool(t, findTool(t, m, tt.tool), tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%s(%s) = %q, %v; want an error with %q", tt.tool, tt.args, got, err, tt.want)
			}
		})
	}
	// A tool error is the tool's failure, not the server's.
	if got, err := callTool(t, findTool(t, m, "ev__echo"), `{"message":"still here"}`); err != nil || got != "Echo: still here" {
		t.Fatalf("echo after errors = %q, %v", got, err)
	}
}

func TestRestartAfterKill(t *testing.T) {
	logs := newLogRecorder(t)
	m := startManager(t, []Spec{everythingSpec(t)}, Options{Logger: slog.New(logs)})
	echo := findTool(t, m, "ev__echo")
	s := m.servers[0]
	old := s.liveConn()
	pid := old.proc.pid()
	if cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && !strings.Contains(string(cmdline), "server-everything") {
		t.Fatalf("pid %d is %q, not the server", pid, cmdline)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old)
	if processExists(pid) {
		t.Fatalf("pid %d still exists", pid)
	}

	// Calls at once after the crash: one restart serves them all.
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			got, err := callTool(t, echo, `{"message":"again"}`)
			if err == nil && got != "Echo: again" {
				err = errors.New("result " + got)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c := s.liveConn()
	if c == nil || c == old || c.proc.pid() == pid || !processExists(c.proc.pid()) {
		t.Fatalf("no new server process after the restart")
	}
	if n := logs.count("mcp server restarted"); n != 1 {
		t.Fatalf("%d restarts, want 1", n)
	}
}

func TestRestartKillsLeftoverChildren(t *testing.T) {
	// The server runs as a child of a shell, as under npx, beside another
	// child that ignores the end of stdin and holds stdout; the shell dies.
	ev := everythingSpec(t)
	spec := Spec{Name: "ev", Command: "sh", Args: []string{"-c", `sleep 300 & node "$0" stdio; exit $?`, ev.Args[0]}}
	m := startManager(t, []Spec{spec}, Options{})
	s := m.servers[0]
	old := s.liveConn()
	leader := old.proc.pid()
	members := groupMembers(t, leader)
	if len(members) < 3 {
		t.Fatalf("process group %d: %v, want the shell, sleep and node", leader, members)
	}
	if err := syscall.Kill(leader, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old)
	for _, pid := range members {
		if !processGone(pid) {
			t.Errorf("pid %d of the dead server's group still runs", pid)
		}
	}
	if got, err := callTool(t, findTool(t, m, "ev__echo"), `{"message":"new"}`); err != nil || got != "Echo: new" {
		t.Fatalf("call after the crash = %q, %v", got, err)
	}
}

func TestRestartBackoff(t *testing.T) {
	// A server that refuses to start while the marker file exists.
	marker := filepath.Join(t.TempDir(), "refuse")
	script := `if [ -e "$0" ]; then echo "refusing to start" >&2; exit 3; fi; exec node "$1" stdio`
	ev := everythingSpec(t)
	spec := Spec{Name: "ev", Command: "sh", Args: []string{"-c", script, marker, ev.Args[0]}}
	logs := newLogRecorder(t)
	m := startManager(t, []Spec{spec}, Options{Logger: slog.New(logs), RestartBackoff: 300 * time.Millisecond})
	echo := findTool(t, m, "ev__echo")
	s := m.servers[0]

	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := s.liveConn()
	if err := syscall.Kill(old.proc.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, old)

	// The first restart is at once, and fails; its exit status and stderr
	// are logged, not returned.
	const unavailable = `tool "ev__echo" is unavailable: its server stopped; try again later`
	_, err := callTool(t, echo, `{"message":"x"}`)
	if !errors.Is(err, ErrUnavailable) || err.Error() != unavailable || logs.count("mcp server restart failed") != 1 {
		t.Fatalf("call after the crash: %v; want %q, and the failed restart logged", err, unavailable)
	}
	// The next is refused without starting anything until the backoff
	// has passed.
	began := time.Now()
	_, err = callTool(t, echo, `{"message":"x"}`)
	if !errors.Is(err, ErrUnavailable) || err.Error() != unavailable {
		t.Fatalf("call within the backoff: %v", err)
	}
	if d := time.Since(began); d > 100*time.Millisecond {
		t.Fatalf("a call within the backoff took %s", d)
	}
	if n := logs.count("restarting mcp server"); n != 1 {
		t.Fatalf("%d restart attempts, want 1", n)
	}

	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	retryAt := s.retryAt
	s.mu.Unlock()
	time.Sleep(time.Until(retryAt)) // the backoff is a matter of the clock
	if got, err := callTool(t, echo, `{"message":"back"}`); err != nil || got != "Echo: back" {
		t.Fatalf("call after the backoff = %q, %v", got, err)
	}
}

func TestCancel(t *testing.T) {
	m := startManager(t, []Spec{everythingSpec(t)}, Options{})
	long := findTool(t, m, "ev__trigger-long-running-operation")
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	got, err := long.Call(ctx, json.RawMessage(`{"duration":60,"steps":3}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("long call = %q, %v; want the context's error", got, err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the cancelled call took %s", d)
	}
	// The server goes on serving.
	if got, err := callTool(t, findTool(t, m, "ev__echo"), `{"message":"after"}`); err != nil || got != "Echo: after" {
		t.Fatalf("echo after a cancelled call = %q, %v", got, err)
	}
}

func TestClose(t *testing.T) {
	m, err := Start(t.Context(), []Spec{everythingSpec(t), filesystemSpec(t, t.TempDir())}, Options{Logger: slog.New(newLogRecorder(t))})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, s := range m.servers {
		pids = append(pids, s.liveConn().proc.pid())
	}
	long := findTool(t, m, "ev__trigger-long-running-operation")
	executing := serverExecutes(t, m.servers[0], long)
	type result struct {
		out string
		err error
	}
	inFlight := make(chan result, 1)
	go func() {
		// 600 steps of 100 ms: a progress notification every step, and
		// nearly a minute before the result.
		out, err := long.Call(context.Background(), json.RawMessage(`{"duration":60,"steps":600}`))
		inFlight <- result{out, err}
	}()
	select {
	case <-executing:
	case r := <-inFlight:
		t.Fatalf("the long call ended before Close: %q, %v", r.out, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server sent no progress of the long call within 30s")
	}

	began := time.Now()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("Close took %s", d)
	}
	select {
	case r := <-inFlight:
		if !errors.Is(r.err, errClosed) {
			t.Fatalf("the call in flight at Close = %q, %v; want errClosed", r.out, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight at Close did not return")
	}
	for _, pid := range pids {
		if processExists(pid) {
			t.Errorf("pid %d still exists after Close", pid)
		}
		if members := groupMembers(t, pid); len(members) > 0 {
			t.Errorf("process group %d still has %v after Close", pid, members)
		}
	}
	if _, err := callTool(t, findTool(t, m, "ev__echo"), `{"message":"x"}`); !errors.Is(err, errClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	goleak.VerifyNone(t)
}

// serverExecutes returns a channel closed once s's process reports progress
// on a call of tl: the call has reached the server, which is executing it.
// The calls of tl carry a progress token from then on (the server sends
// progress only when asked).
func serverExecutes(t *testing.T, s *server, tl tool.Tool) <-chan struct{} {
	t.Helper()
	remote := tl.(*mcpTool).remote
	s.client.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParams); ok && method == "tools/call" && p.Name == remote {
				p.SetProgressToken("progress-of-" + remote)
			}
			return next(ctx, method, req)
		}
	})
	executing := make(chan struct{})
	var once sync.Once
	s.client.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.ProgressNotificationParams); ok && method == "notifications/progress" &&
				p.ProgressToken == "progress-of-"+remote {
				once.Do(func() { close(executing) })
			}
			return next(ctx, method, req)
		}
	})
	return executing
}

func TestStartErrors(t *testing.T) {
	ev := everythingSpec(t)
	tests := []struct {
		name  string
		specs []Spec
		opts  Options
		want  []string // parts of the error
	}{
		{name: "no such command", specs: []Spec{{Name: "x", Command: "/nonexistent/mcp-server", Args: []string{"a b"}}},
			want: []string{`mcp server "x" (x=/nonexistent/mcp-server 'a b')`, "no such file"}},
		{name: "exits at once", specs: []Spec{{Name: "x", Command: "sh", Args: []string{"-c", "echo broken config >&2; exit 3"}}},
			want: []string{`mcp server "x"`, "MCP handshake", "exit status 3", "broken config"}},
		{name: "not an MCP server", specs: []Spec{{Name: "x", Command: "sleep", Args: []string{"60"}}},
			opts: Options{StartTimeout: 500 * time.Millisecond, StopTimeout: 200 * time.Millisecond},
			want: []string{`mcp server "x"`, "no MCP handshake within 500ms"}},
		{name: "one of two fails", specs: []Spec{ev, {Name: "bad", Command: "false"}},
			want: []string{`mcp server "bad"`, "exit status 1"}},
		{name: "duplicate name", specs: []Spec{ev, ev}, want: []string{`mcp server "ev": given twice`}},
		{name: "bad name", specs: []Spec{{Name: "a.b", Command: "x"}}, want: []string{`mcp server "a.b"`}},
		{name: "no command", specs: []Spec{{Name: "x"}}, want: []string{`mcp server "x": no command`}},
		{name: "unknown confirm", specs: []Spec{ev}, opts: Options{Confirm: []string{"evv"}},
			want: []string{`--mcp-confirm "evv": no MCP server of that name`}},
		{name: "unknown trust", specs: []Spec{ev}, opts: Options{Trust: []string{"evv"}},
			want: []string{`--mcp-trust "evv": no MCP server of that name`}},
		{name: "trusted and confirmed", specs: []Spec{ev}, opts: Options{Trust: []string{"ev"}, Confirm: []string{"ev"}},
			want: []string{`--mcp-trust "ev": also in --mcp-confirm`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = slog.New(newLogRecorder(t))
			m, err := Start(t.Context(), tt.specs, tt.opts)
			if err == nil {
				m.Close()
				t.Fatal("Start succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Start: %v; want an error with %q", err, w)
				}
			}
		})
	}
	goleak.VerifyNone(t)
}

func TestNoServers(t *testing.T) {
	m, err := Start(t.Context(), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(m.Tools()); n != 0 {
		t.Fatalf("%d tools", n)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}
