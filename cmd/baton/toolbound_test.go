package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// longLines makes a workspace of long lines of 'a's, no line matching
// the hostile patterns below: long.txt, 4 lines of 1 MiB, and wide.txt,
// 256 lines of 8 KiB. Before issue 23, (.*){1000}x took over a second a
// line over it, and the context was looked at every 4096 lines.
func longLines(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"long.txt": strings.Repeat(strings.Repeat("a", 1<<20)+"\n", 4),
		"wide.txt": strings.Repeat(strings.Repeat("a", 8<<10)+"\n", 256),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// searchTask is a task whose model calls search_files with pattern.
func searchTask(id, pattern string) wsproto.Task {
	return wsproto.Task{ID: id, Title: "Search " + id, Description: `[sim:tool=search_files {"pattern":"` +
		strings.ReplaceAll(pattern, `\`, `\\`) + `"}]`}
}

// timedFrame is a frame and when the test read it.
type timedFrame struct {
	client.Frame
	at time.Time
}

// readUntil reads frames until one of event, failing the test at
// deadline: a server that does not get there in time fails it then, not
// at the next read's own timeout.
func (c *conn) readUntil(deadline time.Time, event string) []timedFrame {
	c.t.Helper()
	var out []timedFrame
	for {
		f, err := c.read(time.Until(deadline))
		if err != nil {
			c.t.Fatalf("no %s by the deadline (%v); %d frames read", event, err, len(out))
		}
		out = append(out, timedFrame{f, time.Now()})
		if f.Event == event {
			return out
		}
	}
}

// Every search_files call ends within --tool-timeout and a second,
// whatever its pattern: refused, stopped by a bound, or abandoned at the
// timeout (issue 23, item 3).
func TestHostileSearchEndsInTime(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	base := startServer(t, "--workspace", longLines(t), "--tool-timeout", timeout.String())
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		searchTask("star1000", `(.*){1000}x`),
		searchTask("star200", `(.*){200}x`),
		searchTask("nested", `(a*)*b`),
		searchTask("bounded", `.{0,240}b`),
	}})
	// Bounded overall: the four run in parallel, each search within
	// timeout + 1 s; the rest is the simulated model's few rounds.
	frames := c.readUntil(time.Now().Add(30*time.Second), wsproto.EventFinalAnswer)

	calls := map[string]time.Time{} // step_id → when the call was seen
	results := 0
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventToolCall:
			calls[f.StepID] = f.at
		case wsproto.EventToolResult:
			m := meta[wsproto.ToolResult](t, f.Frame)
			if m.Tool != "search_files" {
				continue
			}
			results++
			took := f.at.Sub(calls[f.StepID])
			t.Logf("%s: %s after %v (%d ms by the server): ok %v, %.120q", m.TaskID, m.Tool, took.Round(time.Millisecond), m.DurationMS, m.OK, m.Result)
			if limit := timeout + time.Second; took > limit || time.Duration(m.DurationMS)*time.Millisecond > limit {
				t.Errorf("%s: search_files took %v (%d ms by the server), more than %v", m.TaskID, took, m.DurationMS, limit)
			}
			if m.TaskID == "star1000" && (m.OK || !strings.Contains(m.Result, "too complex")) {
				t.Errorf("(.*){1000}x answered %+v, want it refused", m)
			}
		}
	}
	if results != 4 {
		t.Errorf("%d search_files results, want 4", results)
	}
}

// A user.cancel in the middle of a hostile search ends the run within a
// second: the loop does not wait for the search (issue 23, item 3).
func TestCancelDuringHostileSearch(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--workspace", longLines(t)) // the default tool timeout: a minute
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{searchTask("star200", `(.*){200}x`)}})
	deadline := time.Now().Add(30 * time.Second)
	for {
		f := c.readUntil(deadline, wsproto.EventToolCall)
		if meta[wsproto.ToolCall](t, f[len(f)-1].Frame).Tool == "search_files" {
			break
		}
	}
	sent := time.Now()
	c.send("user.cancel", nil)
	frames := c.readUntil(sent.Add(10*time.Second), wsproto.EventPipelineCancelled)
	took := frames[len(frames)-1].at.Sub(sent)
	t.Logf("pipeline.cancelled %v after user.cancel", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("pipeline.cancelled came %v after user.cancel, more than a second", took)
	}
	cancelled := false
	for _, f := range frames {
		if f.Event == wsproto.EventToolResult {
			m := meta[wsproto.ToolResult](t, f.Frame)
			cancelled = m.Tool == "search_files" && !m.OK && m.Result == "cancelled"
		}
	}
	if !cancelled {
		t.Errorf("no cancelled search_files result before pipeline.cancelled")
	}
}

// A file outside the workspace hardlinked into it is not read through
// read_file, nor found by search_files (issue 23, item 6); with
// --workspace-allow-hardlinks it is.
func TestHardlinkedFileNotRead(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	secret := filepath.Join(root, "secret.txt")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("TOP-SECRET-42"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(ws, "notes.txt")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	tasks := []wsproto.Task{{ID: "steal", Title: "Steal", Description: `[sim:tool=read_file {"path":"notes.txt"}] ` +
		`[sim:tool=search_files {"pattern":"SECRET"}]`}}
	for _, tt := range []struct {
		name   string
		args   []string
		leaked bool
	}{
		{name: "refused", args: []string{"--workspace", ws}},
		{name: "allowed", args: []string{"--workspace", ws, "--workspace-allow-hardlinks"}, leaked: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := connect(t, startServer(t, tt.args...))
			frames := solveAll(t, c, tasks)
			checkLoop(t, frames)
			leaked := false
			for _, f := range framesOf(frames, wsproto.EventToolResult) {
				m := meta[wsproto.ToolResult](t, f)
				leaked = leaked || strings.Contains(m.Result, "TOP-SECRET")
				if !tt.leaked && m.Tool == "read_file" && (m.OK || !strings.Contains(m.Result, "more than one hard link")) {
					t.Errorf("read_file of the hardlink answered %+v", m)
				}
			}
			if leaked != tt.leaked {
				t.Errorf("the outside file was read: %v, want %v", leaked, tt.leaked)
			}
		})
	}
}
