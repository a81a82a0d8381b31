package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/npmtest"
	"github.com/baton-run/baton/wsproto"
)

// everything is the --mcp value of a real server-everything from npm,
// started through sh so that its pid is written to pidFile each time it
// starts.
func everything(t *testing.T, pidFile string) string {
	t.Helper()
	script := filepath.Join(npmtest.Modules(t), "@modelcontextprotocol", "server-everything", "dist", "index.js")
	return "ev=sh -c 'echo $$ > " + pidFile + "; exec node " + script + "'"
}

// toolResults returns the results of the calls of tool, in order.
func toolResults(t *testing.T, frames []client.Frame, tool string) []wsproto.ToolResult {
	var out []wsproto.ToolResult
	for _, f := range framesOf(frames, wsproto.EventToolResult) {
		if m := meta[wsproto.ToolResult](t, f); m.Tool == tool {
			out = append(out, m)
		}
	}
	return out
}

func TestMCPThroughThePipeline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := startServer(t, "--mcp", everything(t, filepath.Join(dir, "pid")), "--workspace", workspace(t))
	c, _ := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{
		{ID: "mcp", Title: "Use MCP", Description: `[sim:tool=ev__echo {"message":"hello baton"}] ` +
			`[sim:tool=ev__get-sum {"a":2,"b":3}] [sim:tool=ev__get-sum {"a":"two"}]`},
		{ID: "after", Title: "After", DependsOn: []string{"mcp"}},
	})
	checkStream(t, frames, 1)
	checkLoop(t, frames)
	echo, sum := toolResults(t, frames, "ev__echo"), toolResults(t, frames, "ev__get-sum")
	if len(echo) != 1 || !echo[0].OK || echo[0].Result != "Echo: hello baton" {
		t.Errorf("echo: %+v", echo)
	}
	if len(sum) != 2 || !sum[0].OK || !strings.Contains(sum[0].Result, "is 5") || sum[1].OK || !strings.Contains(sum[1].Result, "validation") {
		t.Errorf("get-sum: %+v; want 5, then a failed call with bad arguments", sum)
	}
	for _, f := range framesOf(frames, wsproto.EventSolverCompleted) {
		if m := meta[wsproto.SolverCompleted](t, f); m.TaskID == "mcp" && !strings.Contains(m.Result, `ev__echo: "Echo: hello baton"`) {
			t.Errorf("the answer does not quote the MCP result: %q", m.Result)
		}
	}
	if pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0]); pc.Status != wsproto.StatusSucceeded {
		t.Errorf("pipeline.completed %+v", pc)
	}
}

// A server killed during a call: that call fails as a tool error, and the
// task's next call works after the restart. A call that outlasts
// --tool-timeout is a timeout result.
func TestMCPServerKilledAndSlow(t *testing.T) {
	t.Parallel()
	long := `[sim:tool=ev__trigger-long-running-operation {"duration":30,"steps":3}]`
	t.Run("killed", func(t *testing.T) {
		t.Parallel()
		// The call after the crash waits for the restart within the tool
		// timeout, and node may take seconds to start the server again on
		// a busy machine: a timeout that a restart always meets, and still
		// longer than the killed call would take if the crash were missed.
		pidFile := filepath.Join(t.TempDir(), "pid")
		base := startServer(t, "--mcp", everything(t, pidFile), "--tool-timeout", "60s")
		c, _ := connect(t, base)
		mcpKilled(t, c, pidFile, long)
	})
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		base := startServer(t, "--mcp", everything(t, filepath.Join(t.TempDir(), "pid")), "--tool-timeout", "5s")
		c, _ := connect(t, base)
		// The operation outlasts --tool-timeout.
		began := time.Now()
		frames := solveAll(t, c, []wsproto.Task{{ID: "s", Title: "Slow", Description: long}})
		slow := toolResults(t, frames, "ev__trigger-long-running-operation")
		if len(slow) != 1 || slow[0].OK || slow[0].Result != "the tool did not answer within 5s" || time.Since(began) > 20*time.Second {
			t.Errorf("slow call: %+v after %s", slow, time.Since(began))
		}
	})
}

// mcpKilled kills the MCP server during a call of the long operation and
// checks that the call fails as a tool error and the task's next call
// works after the restart.
func mcpKilled(t *testing.T, c *conn, pidFile, long string) {
	t.Helper()
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		{ID: "k", Title: "Killed", Description: long + `[sim:tool=ev__echo {"message":"back"}]`},
	}})
	var frames []client.Frame
	for {
		f := c.next()
		frames = append(frames, f)
		if f.Event == wsproto.EventToolCall && meta[wsproto.ToolCall](t, f).Tool == "ev__trigger-long-running-operation" {
			break
		}
	}
	b, err := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file: %q, %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
	checkLoop(t, frames)
	killed, echo := toolResults(t, frames, "ev__trigger-long-running-operation"), toolResults(t, frames, "ev__echo")
	if len(killed) != 1 || killed[0].OK || strings.Contains(killed[0].Result, "did not answer within") {
		t.Errorf("the call cut by the crash: %+v; want a failure (not the timeout)", killed)
	}
	if len(echo) != 1 || !echo[0].OK || echo[0].Result != "Echo: back" {
		t.Errorf("the call after the restart: %+v", echo)
	}
}

// --mcp-confirm: every call of the server's tools asks first; declined
// means not run.
func TestMCPConfirm(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--mcp", everything(t, filepath.Join(t.TempDir(), "pid")), "--mcp-confirm", "ev")
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "c", Title: "Confirm",
		Description: `[sim:tool=ev__echo {"message":"one"}] [sim:tool=ev__echo {"message":"two"}]`}}})
	var frames []client.Frame
	for _, approve := range []bool{false, true} {
		frames = append(frames, c.until(wsproto.EventUserConfirm)...)
		f := frames[len(frames)-1]
		m := meta[wsproto.UserConfirm](t, f)
		if m.Kind != wsproto.ConfirmTool || m.Tool != "ev__echo" || m.TaskID != "c" || !strings.Contains(string(m.Arguments), `"message"`) || f.StepID != m.StepID {
			t.Fatalf("tool_confirm %+v", m)
		}
		c.respond(m.StepID, map[string]any{"confirmed": true}) // the wrong answer for this kind
		c.expectError("invalid_message")
		c.respond(m.StepID, map[string]any{"approved": approve})
	}
	frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
	checkLoop(t, frames)
	echo := toolResults(t, frames, "ev__echo")
	if len(echo) != 2 || echo[0].OK || echo[0].Result != "declined by the user" || !echo[1].OK || echo[1].Result != "Echo: two" {
		t.Errorf("echo results: %+v", echo)
	}
}
