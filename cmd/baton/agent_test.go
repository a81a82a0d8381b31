package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// checkLoop checks the agent loop's events of one run: every
// agent.tool_call is followed by exactly one agent.tool_result with its
// step_id (top level and metadata), within its task's execution; each
// task's todo versions are 1, 2, 3, … and a list ends completed.
func checkLoop(t *testing.T, frames []client.Frame) {
	t.Helper()
	open := map[string]wsproto.ToolCall{} // step_id → call
	version := map[string]int{}
	completed := map[string]bool{}
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventToolCall:
			m := meta[wsproto.ToolCall](t, f)
			if f.StepID == "" || !strings.HasPrefix(f.StepID, "tool_") || m.StepID != f.StepID {
				t.Errorf("tool_call step ids %q / %q", f.StepID, m.StepID)
			}
			if _, dup := open[f.StepID]; dup {
				t.Errorf("step_id %s used twice", f.StepID)
			}
			open[f.StepID] = m
		case wsproto.EventToolResult:
			m := meta[wsproto.ToolResult](t, f)
			call, ok := open[f.StepID]
			if !ok || m.StepID != f.StepID || call.Tool != m.Tool || call.TaskID != m.TaskID || call.Round != m.Round || call.Attempt != m.Attempt {
				t.Errorf("tool_result %+v does not answer an open call (%+v)", m, call)
			}
			delete(open, f.StepID)
		case wsproto.EventTodoUpdated, wsproto.EventTodoItemProgress, wsproto.EventTodoCompleted:
			m := meta[struct {
				TaskID  string `json:"task_id"`
				Version int    `json:"version"`
			}](t, f)
			if m.Version != version[m.TaskID]+1 {
				t.Errorf("%s of %s has version %d after %d", f.Event, m.TaskID, m.Version, version[m.TaskID])
			}
			version[m.TaskID] = m.Version
			completed[m.TaskID] = f.Event == wsproto.EventTodoCompleted
		case wsproto.EventSolverCompleted:
			// The simulated model always completes the list it writes.
			if id := meta[wsproto.SolverCompleted](t, f).TaskID; version[id] > 0 && !completed[id] {
				t.Errorf("%s completed with its todo list not completed", id)
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("tool calls never answered: %v", open)
	}
}

// frames returns the frames of one event.
func framesOf(frames []client.Frame, event string) []client.Frame {
	var out []client.Frame
	for _, f := range frames {
		if f.Event == event {
			out = append(out, f)
		}
	}
	return out
}

func TestAgentLoopWithWorkspace(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	os.MkdirAll(filepath.Join(ws, "notes"), 0o755)
	os.WriteFile(filepath.Join(ws, "notes", "today.md"), []byte("Buy bread. Call Ana."), 0o644)
	os.WriteFile(filepath.Join(root, "secret.txt"), []byte("TOP-SECRET-42"), 0o644)
	os.Symlink(filepath.Join(root, "secret.txt"), filepath.Join(ws, "link.txt"))
	base := startServer(t, "--workspace", ws)
	c, _ := connect(t, base)

	frames := solveAll(t, c, []wsproto.Task{
		{ID: "read", Title: "Read the notes", Description: `[sim:tool=read_file {"path":"notes/today.md"}] ` +
			`[sim:tool=search_files {"pattern":"Ana"}]`},
		{ID: "escape", Title: "Try to escape", Description: `[sim:tool=read_file {"path":"../secret.txt"}] ` +
			`[sim:tool=read_file {"path":"link.txt"}] [sim:tool=read_file {"path":"` + filepath.Join(root, "secret.txt") + `"}]`},
	})
	checkStream(t, frames, 1)
	checkLoop(t, frames)
	for _, f := range frames {
		if strings.Contains(string(f.Metadata), "TOP-SECRET") || strings.Contains(f.Content, "TOP-SECRET") {
			t.Fatalf("a file outside the workspace was read: %s", f.Metadata)
		}
	}
	results := map[string][]wsproto.ToolResult{}
	for _, f := range framesOf(frames, wsproto.EventToolResult) {
		m := meta[wsproto.ToolResult](t, f)
		if m.Tool != "todo_write" && m.Tool != "todo_update" {
			results[m.TaskID] = append(results[m.TaskID], m)
		}
	}
	read := results["read"]
	if len(read) != 3 || read[0].Tool != "read_file" || !read[0].OK || read[0].Result != "Buy bread. Call Ana." ||
		read[1].Tool != "search_files" || !strings.Contains(read[1].Result, "notes/today.md:1:") ||
		read[2].Tool != "list_files" || !strings.Contains(read[2].Result, "notes/") {
		t.Errorf("tool results of read: %+v", read)
	}
	for _, r := range results["escape"][:3] {
		if r.OK || r.Tool != "read_file" || !strings.Contains(r.Result, "outside the workspace") {
			t.Errorf("escape attempt answered %+v", r)
		}
	}
	for _, f := range framesOf(frames, wsproto.EventSolverCompleted) {
		m := meta[wsproto.SolverCompleted](t, f)
		if m.TaskID == "read" && !strings.Contains(m.Result, `read_file: "Buy bread. Call Ana."`) {
			t.Errorf("the answer does not quote the tool result: %q", m.Result)
		}
	}
	if pc := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0]); pc.Status != wsproto.StatusSucceeded {
		t.Errorf("pipeline.completed %+v: failing tools are results, not task failures", pc)
	}
}

func TestAskUser(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		{ID: "trip", Title: "Plan the trip", Description: "[sim:ask=Which city?]"},
		{ID: "after", Title: "Book", DependsOn: []string{"trip"}},
	}})
	var frames []client.Frame
	var ask wsproto.UserConfirm
	for ask.StepID == "" {
		f := c.next()
		frames = append(frames, f)
		if f.Event == wsproto.EventUserConfirm {
			ask = meta[wsproto.UserConfirm](t, f)
			if f.StepID != ask.StepID || ask.Kind != wsproto.ConfirmInput || ask.TaskID != "trip" || ask.Question != "Which city?" || ask.ExpiresAt.IsZero() {
				t.Fatalf("input_request %+v (step_id %q)", ask, f.StepID)
			}
		}
	}

	// The question survives a lost connection: a resync's snapshot holds it.
	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	if len(snap.Run.PendingConfirm) != 1 || snap.Run.PendingConfirm[0].StepID != ask.StepID || snap.Run.Tasks[0].Todo == nil {
		t.Fatalf("snapshot %+v: want the open question and the task's todo list", snap.Run)
	}

	r.respond(ask.StepID, map[string]any{"approved": true}) // the wrong kind of answer
	if e := r.expectError("invalid_message"); !strings.Contains(e.Message, `"text"`) {
		t.Errorf("error %q", e.Message)
	}
	r.respond(ask.StepID, map[string]any{"text": "Lisbon"})
	frames = append(frames, r.until(wsproto.EventFinalAnswer)...)
	r.respond(ask.StepID, map[string]any{"text": "Porto"})
	r.expectError("step_id_mismatch")

	checkLoop(t, frames)
	var answered bool
	for _, f := range framesOf(frames, wsproto.EventToolResult) {
		if m := meta[wsproto.ToolResult](t, f); m.Tool == "ask_user" {
			answered = m.OK && m.Result == "The user answered: Lisbon"
		}
	}
	for _, f := range framesOf(frames, wsproto.EventSolverCompleted) {
		if m := meta[wsproto.SolverCompleted](t, f); m.TaskID == "trip" && !strings.Contains(m.Result, "Lisbon") {
			t.Errorf("result %q does not quote the answer", m.Result)
		}
	}
	if !answered {
		t.Errorf("no ask_user result with the answer")
	}
}

// Cancelling a task while its tool call waits aborts the call at once:
// its tool_result says cancelled, then solver.cancelled.
func TestCancelTaskDuringToolCall(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "q", Title: "Ask", Description: "[sim:ask=Sure?]"}}})
	c.until(wsproto.EventUserConfirm)
	c.send("user.cancel_task", map[string]any{"task_id": "q"})
	frames := c.until(wsproto.EventFinalAnswer)
	got := []string{}
	for _, f := range frames[:2] {
		got = append(got, f.Event)
	}
	res := meta[wsproto.ToolResult](t, frames[0])
	if got[0] != wsproto.EventToolResult || got[1] != wsproto.EventSolverCancelled || res.OK || res.Result != "cancelled" || res.Tool != "ask_user" {
		t.Errorf("after cancel: %v, %+v", got, res)
	}
}

// workspace makes a workspace holding notes.md.
func workspace(t *testing.T) string {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.md"), []byte("Buy bread."), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Automatic tracking over the wire: three successful calls complete the
// active item, two failed ones in a row block the next.
func TestTodoTracking(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--workspace", workspace(t))
	c, _ := connect(t, base)
	ok, missing := `[sim:tool=read_file {"path":"notes.md"}]`, `[sim:tool=read_file {"path":"gone.md"}]`
	frames := solveAll(t, c, []wsproto.Task{{ID: "t", Title: "Track", Description: ok + ok + ok + missing + missing}})
	checkLoop(t, frames)
	var got []string
	for _, f := range framesOf(frames, wsproto.EventTodoItemProgress) {
		m := meta[wsproto.TodoItemProgress](t, f)
		got = append(got, fmt.Sprintf("v%d %s %s %d", m.Version, m.Item.ID, m.Item.Status, m.Item.ToolCalls))
	}
	want := []string{"v2 1 in_progress 1", "v3 1 in_progress 2", "v4 1 completed 3", "v5 2 in_progress 1", "v6 2 blocked 2"}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("todo.item_progress: %v, want first %v", got, want)
	}
}

// A connection dropped in the middle of a tool-heavy task: the resume
// replays exactly what was missed, and every tool call stays paired.
func TestDropDuringToolCalls(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--workspace", workspace(t))
	c, hello := connect(t, base)
	desc := "[sim:sleep=600ms]" + strings.Repeat(`[sim:tool=read_file {"path":"notes.md"}]`, 4)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "a", Title: "A", Description: desc}, {ID: "b", Title: "B", Description: desc}}})
	var before []client.Frame
	for len(before) < 9 { // inside the first tool calls
		before = append(before, c.next())
	}
	c.ws.CloseNow()
	sums := checksums(before)
	last := before[len(before)-1].Seq
	r := resume(t, base, hello, last, sums[last])
	m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
	if !m.Resumed || m.Resync {
		t.Fatalf("system.connected %+v, want a replay", m)
	}
	all := append(before, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, all, 1)
	checkLoop(t, all)
	calls := map[string]int{}
	for _, f := range framesOf(all, wsproto.EventToolCall) {
		calls[meta[wsproto.ToolCall](t, f).Tool]++
	}
	if calls["todo_write"] != 2 || calls["read_file"] != 8 || calls["list_files"] != 2 || calls["todo_update"] < 2 {
		t.Errorf("tool calls %v, want per task: todo_write, 4 read_file, list_files, todo_update", calls)
	}
}
