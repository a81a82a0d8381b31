package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/mcptest"
	"github.com/baton-run/baton/mcptool"
	"github.com/baton-run/baton/wsproto"
)

// The attacks of docs/security.md §4 and §5 on MCP servers, with a test MCP
// server (internal/mcptest) that behaves as the attack needs.

// mcptestServer is the --mcp value NAME=… of the test MCP server with flags.
func mcptestServer(t *testing.T, name string, flags ...string) string {
	cmd, args := mcptest.Command(t, flags...)
	return mcptool.Spec{Name: name, Command: cmd, Args: args}.String()
}

// ran returns the tools of the consent server that have run, in order.
func ran(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// §4: a tool asks first unless it is annotated readOnlyHint:true or its
// server is trusted; --mcp-confirm asks for every tool. A tool that asks
// does not run before it is approved, nor at all when declined.
func TestMCPConsent(t *testing.T) {
	t.Parallel()
	all := []string{"unannotated", "not_read_only", "not_destructive", "read_only"}
	changing := all[:3] // by the MCP spec's defaults: not read-only
	tests := []struct {
		name    string
		flags   []string
		approve bool
		asked   []string // tools asked for, in order
		ran     []string // tools run, in order
	}{
		{name: "approved", approve: true, asked: changing, ran: all},
		{name: "declined", approve: false, asked: changing, ran: []string{"read_only"}},
		{name: "trusted", flags: []string{"--mcp-trust", "ct"}, asked: nil, ran: all},
		{name: "confirm every tool", flags: []string{"--mcp-confirm", "ct"}, approve: true, asked: all, ran: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "ran")
			base := startServer(t, append([]string{"--mcp", mcptestServer(t, "ct", "-tools", "consent", "-ran", file)}, tt.flags...)...)
			c, _ := connect(t, base)
			var desc strings.Builder
			for _, name := range all {
				fmt.Fprintf(&desc, "[sim:tool=ct__%s {}] ", name)
			}
			c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "c", Title: "Consent", Description: desc.String()}}})
			var frames []client.Frame
			var asked []string
			for {
				f := c.next()
				frames = append(frames, f)
				if f.Event == wsproto.EventFinalAnswer {
					break
				}
				if f.Event != wsproto.EventUserConfirm {
					continue
				}
				m := meta[wsproto.UserConfirm](t, f)
				if m.Kind != wsproto.ConfirmTool || m.TaskID != "c" {
					t.Fatalf("confirmation %+v, want a tool_confirm of task c", m)
				}
				name := strings.TrimPrefix(m.Tool, "ct__")
				asked = append(asked, name)
				if slices.Contains(ran(t, file), name) {
					t.Errorf("%s ran before the user answered", m.Tool)
				}
				c.respond(m.StepID, map[string]any{"approved": tt.approve})
			}
			checkLoop(t, frames)
			if !slices.Equal(asked, tt.asked) {
				t.Errorf("asked for %v, want %v", asked, tt.asked)
			}
			if got := ran(t, file); !slices.Equal(got, tt.ran) {
				t.Errorf("ran %v, want %v", got, tt.ran)
			}
			for _, name := range all {
				res := toolResults(t, frames, "ct__"+name)
				want := wsproto.ToolResult{OK: true, Result: "ran " + name}
				if !slices.Contains(tt.ran, name) {
					want = wsproto.ToolResult{OK: false, Result: "declined by the user"}
				}
				if len(res) != 1 || res[0].OK != want.OK || res[0].Result != want.Result {
					t.Errorf("ct__%s: results %+v, want one with ok %v and %q", name, res, want.OK, want.Result)
				}
			}
		})
	}
}

// unavailable is the whole result of a call of db__query whose server is
// down or stopped during it.
const unavailable = `tool "db__query" is unavailable: its server stopped; try again later`

// secretFree fails the test if any frame holds what the test server wrote
// to its stderr or how it exited.
func secretFree(t *testing.T, who string, frames []client.Frame) {
	t.Helper()
	for _, f := range frames {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var leaks []string
		for _, leak := range []string{"SECRET", "postgres://", "DATABASE_URL", "exit status", "stderr"} {
			if strings.Contains(string(b), leak) {
				leaks = append(leaks, leak)
			}
		}
		if len(leaks) > 0 {
			t.Errorf("a frame to %s holds %q: %s", who, leaks, b)
		}
	}
}

// §5: session A's calls crash the shared server (three times in a row);
// session B's next call restarts it at once and succeeds. No frame to
// either session holds the server's stderr; the log has it, with A's ids.
func TestMCPCrashByOneSession(t *testing.T) {
	t.Parallel()
	logs := new(logSink)
	base := startServerLogging(t, logs, "--mcp", mcptestServer(t, "db", "-tools", "db"), "--tool-timeout", "60s")
	a, helloA := connect(t, base)
	b, helloB := connect(t, base)
	crash := `[sim:tool=db__query {"sql":"crash"}]`
	framesA := solveAll(t, a, []wsproto.Task{{ID: "a", Title: "Crash it", Description: crash + crash + crash}})
	checkLoop(t, framesA)
	crashes := toolResults(t, framesA, "db__query")
	if len(crashes) != 3 {
		t.Fatalf("%d calls of db__query, want 3", len(crashes))
	}
	for i, r := range crashes {
		if r.OK || r.Result != unavailable {
			t.Errorf("crash %d: ok %v, %q; want %q", i+1, r.OK, r.Result, unavailable)
		}
	}

	began := time.Now()
	b.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "b", Title: "Query",
		Description: `[sim:tool=db__query {"sql":"select 1"}]`}}})
	var framesB []client.Frame
	var took time.Duration
	for took == 0 {
		f := b.next()
		framesB = append(framesB, f)
		if f.Event == wsproto.EventToolResult && meta[wsproto.ToolResult](t, f).Tool == "db__query" {
			took = time.Since(began)
		}
	}
	framesB = append(framesB, b.until(wsproto.EventFinalAnswer)...)
	checkLoop(t, framesB)
	res := toolResults(t, framesB, "db__query")
	if len(res) != 1 || !res[0].OK || res[0].Result != "rows for select 1" {
		t.Fatalf("B's call after A's crashes: %+v", res)
	}
	t.Logf("B's call after A's 3 crashes: result %s after B asked (server restart included; the call itself took %d ms)", took.Round(time.Millisecond), res[0].DurationMS)
	if took > 30*time.Second {
		t.Errorf("B's call took %s: it waited for a backoff", took)
	}
	secretFree(t, "A", framesA)
	secretFree(t, "B", framesB)

	// The detail is in the log, with A's session and each call's step_id.
	steps := map[string]bool{}
	for _, f := range framesOf(framesA, wsproto.EventToolCall) {
		steps[f.StepID] = true
	}
	const blamed = "mcp server stopped during a call; the next call restarts it at once"
	eventually(t, "the log of the 3 crashes", func() bool {
		n := 0
		for _, r := range logs.records(t) {
			if r["msg"] == blamed && r["session"] == helloA.SessionID && steps[fmt.Sprint(r["step_id"])] &&
				r["task_id"] == "a" && strings.Contains(fmt.Sprint(r["cause"]), mcptest.Secret) {
				n++
			}
		}
		return n == 3
	})
	if r := logs.find(t, blamed, map[string]any{"session": helloB.SessionID}); r != nil {
		t.Errorf("B is blamed for a crash: %v", r)
	}
}

// §5: a server that keeps crashing (here: it cannot start again after the
// crash) goes into backoff; every call, from either session, gets the
// "unavailable" result and nothing of what the server said.
func TestMCPKeepsCrashing(t *testing.T) {
	t.Parallel()
	logs := new(logSink)
	db := mcptestServer(t, "db", "-tools", "db", "-crash-file", filepath.Join(t.TempDir(), "crashed"))
	base := startServerLogging(t, logs, "--mcp", db, "--tool-timeout", "60s", "--max-rounds", "16")
	a, _ := connect(t, base)
	b, _ := connect(t, base)
	// After the crash, failed starts in a row: at once, then 1 s, 2 s, 4 s
	// of backoff (the default --mcp restart backoff): the later calls come
	// within one, however slow the machine.
	q := `[sim:tool=db__query {"sql":"select 1"}]`
	framesA := solveAll(t, a, []wsproto.Task{{ID: "a", Title: "Crash it", Description: `[sim:tool=db__query {"sql":"crash"}]` + strings.Repeat(q, 5)}})
	framesB := solveAll(t, b, []wsproto.Task{{ID: "b", Title: "Query", Description: q + q}})
	for who, frames := range map[string][]client.Frame{"A": framesA, "B": framesB} {
		checkLoop(t, frames)
		res := toolResults(t, frames, "db__query")
		if len(res) == 0 {
			t.Errorf("%s: no calls of db__query", who)
		}
		for i, r := range res {
			if r.OK || r.Result != unavailable {
				t.Errorf("%s's call %d: ok %v, %q; want %q", who, i+1, r.OK, r.Result, unavailable)
			}
		}
		secretFree(t, who, frames)
	}
	eventually(t, "the log of the backoff", func() bool {
		var failed, refused bool
		for _, r := range logs.records(t) {
			failed = failed || r["msg"] == "mcp server restart failed" && strings.Contains(fmt.Sprint(r["error"]), mcptest.Secret) &&
				fmt.Sprint(r["restart_after"]) != "0"
			refused = refused || r["msg"] == "mcp tool unavailable" && strings.Contains(fmt.Sprint(r["error"]), "next restart")
		}
		return failed && refused
	})
}
