//go:build unix

package mcptool

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/mcptest"
	"github.com/baton-run/baton/tool"
)

// dbSpec is a test MCP server with the tool query, which the sql "crash"
// crashes after writing mcptest.Secret to its stderr (see mcptest).
func dbSpec(t *testing.T, flags ...string) Spec {
	cmd, args := mcptest.Command(t, append([]string{"-tools", "db"}, flags...)...)
	return Spec{Name: "db", Command: cmd, Args: args}
}

// logBuffer is a slog destination the tests read back.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines holding every one of parts.
func (b *logBuffer) lines(parts ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, l := range strings.Split(b.buf.String(), "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// recordingLogger logs to the test's output, to logs' counts and to buf.
func recordingLogger(t *testing.T, logs *logRecorder, buf *logBuffer) *slog.Logger {
	return slog.New(fanout{logs, slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})})
}

// fanout is a slog handler writing to two.
type fanout struct{ a, b slog.Handler }

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool {
	return f.a.Enabled(ctx, l) || f.b.Enabled(ctx, l)
}

func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	return errors.Join(f.a.Handle(ctx, r.Clone()), f.b.Handle(ctx, r.Clone()))
}

func (f fanout) WithAttrs(attrs []slog.Attr) slog.Handler {
	return fanout{f.a.WithAttrs(attrs), f.b.WithAttrs(attrs)}
}

func (f fanout) WithGroup(name string) slog.Handler {
	return fanout{f.a.WithGroup(name), f.b.WithGroup(name)}
}

const dbUnavailable = `tool "db__query" is unavailable: its server stopped; try again later`

// A call that crashes its server: the caller is told the tool is
// unavailable and nothing more; the next call, whoever makes it, starts the
// server again at once, however often the crash is repeated (the backoff
// here is an hour: any wait would show); the server's stderr is logged with
// the ids of the call that crashed it.
func TestCrashDuringCallRestartsAtOnce(t *testing.T) {
	logs, buf := newLogRecorder(t), new(logBuffer)
	m := startManager(t, []Spec{dbSpec(t)}, Options{Logger: recordingLogger(t, logs, buf), RestartBackoff: time.Hour})
	query := findTool(t, m, "db__query")
	if query.Spec().Confirm {
		t.Error("db__query is annotated readOnlyHint: it should not ask")
	}
	ctxA := tool.WithLogAttrs(t.Context(), "session", "sess_A")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(tool.WithLogAttrs(ctxA, "step_id", "tool_crash"), 30*time.Second)
		got, err := query.Call(ctx, []byte(`{"sql":"crash"}`))
		cancel()
		if !errors.Is(err, ErrUnavailable) || err.Error() != dbUnavailable {
			t.Fatalf("crash %d = %q, %v; want %q", i+1, got, err, dbUnavailable)
		}
	}
	ctx, cancel := context.WithTimeout(tool.WithLogAttrs(t.Context(), "session", "sess_B"), 30*time.Second)
	defer cancel()
	began := time.Now()
	got, err := query.Call(ctx, []byte(`{"sql":"select 1"}`))
	if err != nil || got != "rows for select 1" {
		t.Fatalf("the call after the crashes = %q, %v", got, err)
	}
	t.Logf("the next call after 3 crashes in a row succeeded in %s (restart included)", time.Since(began))
	if n := logs.count("restarting mcp server"); n != 3 {
		t.Errorf("%d restarts, want 3 (one per crash)", n)
	}
	blamed := buf.lines("mcp server stopped during a call", "session=sess_A", "step_id=tool_crash", "tool=db__query", mcptest.Secret)
	if len(blamed) != 3 {
		t.Errorf("%d log lines blame a call of sess_A with the server's stderr, want 3:\n%s", len(blamed), strings.Join(buf.lines(), "\n"))
	}
}

// A server that keeps crashing (here: it cannot start again) goes into
// backoff: calls fail at once without a start, with the "unavailable"
// error and nothing of what the server said.
func TestKeepsCrashingBacksOff(t *testing.T) {
	logs, buf := newLogRecorder(t), new(logBuffer)
	spec := dbSpec(t, "-crash-file", filepath.Join(t.TempDir(), "crashed"))
	m := startManager(t, []Spec{spec}, Options{Logger: recordingLogger(t, logs, buf), RestartBackoff: time.Hour})
	query := findTool(t, m, "db__query")
	// The crash; then a start that fails, which restarts at once (the
	// first failure of a row), and one more that fails: two in a row.
	for i, sql := range []string{"crash", "select 1", "select 2"} {
		if got, err := callTool(t, query, `{"sql":"`+sql+`"}`); !errors.Is(err, ErrUnavailable) || err.Error() != dbUnavailable {
			t.Fatalf("call %d (%s) = %q, %v; want %q", i+1, sql, got, err, dbUnavailable)
		}
	}
	if n := logs.count("mcp server restart failed"); n != 2 {
		t.Fatalf("%d failed restarts, want 2", n)
	}
	// In backoff: refused at once, nothing started.
	began := time.Now()
	if got, err := callTool(t, query, `{"sql":"select 3"}`); !errors.Is(err, ErrUnavailable) || err.Error() != dbUnavailable {
		t.Fatalf("call in backoff = %q, %v; want %q", got, err, dbUnavailable)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("a call in backoff took %s", d)
	}
	if n := logs.count("restarting mcp server"); n != 2 {
		t.Errorf("%d restarts attempted, want 2 (none in backoff)", n)
	}
	if len(buf.lines("mcp server restart failed", mcptest.Secret)) != 2 || len(buf.lines("mcp tool unavailable", "next restart")) != 1 {
		t.Errorf("the log lacks the failed restarts with the server's stderr, or the refusal in backoff:\n%s", strings.Join(buf.lines(), "\n"))
	}
}
