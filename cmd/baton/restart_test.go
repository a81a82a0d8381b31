package main

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// confirmsUntil reads frames until n agent.user_confirm have come, and
// returns the frames read and the confirmations by kind and task (or
// question, for one from the decide step).
func confirmsUntil(t *testing.T, c *conn, n int) ([]client.Frame, map[string]wsproto.UserConfirm) {
	t.Helper()
	var frames []client.Frame
	got := map[string]wsproto.UserConfirm{}
	for len(got) < n {
		f := c.next()
		frames = append(frames, f)
		if f.Event == wsproto.EventUserConfirm {
			m := meta[wsproto.UserConfirm](t, f)
			got[m.Kind+" "+m.TaskID] = m
		}
	}
	return frames, got
}

// sameState checks what a client that resyncs must end with: the state
// built from the snapshot and the live events after it equals the state
// built from every event (a replay from seq 0 on a new connection, which
// closes the one in use). seed is the task list a user.solve_tasks run
// sent; answers are the input_request answers given, by step_id, which a
// client records itself when it sends them.
func sameState(t *testing.T, base string, hello wsproto.Connected, snap wsproto.Snapshot, live []client.Frame,
	seed []wsproto.Task, answers map[string]string) {
	t.Helper()
	state := wsproto.State{Phase: snap.Phase, Run: snap.Run}
	if snap.Run != nil {
		for _, p := range slices.Clone(snap.Run.PendingConfirm) { // answered after the snapshot
			if text, ok := answers[p.StepID]; ok {
				state.Answer(p.StepID, text)
			}
		}
	}
	for _, f := range live {
		if wsproto.Sequenced(f.Event) {
			state.ApplyJSON(f.Event, f.Metadata)
		}
	}
	all := resume(t, base, hello, 0, "")
	m := meta[wsproto.Connected](t, all.expect(wsproto.EventConnected))
	if m.Resync {
		t.Fatalf("the ring no longer holds the start")
	}
	var full wsproto.State
	for range *m.Replayed {
		f := all.next()
		if full.Run == nil && seed != nil && f.Event == wsproto.EventSolverStart {
			full.BeginSolving(meta[wsproto.SolverStart](t, f).RunID, "", seed)
		}
		full.ApplyJSON(f.Event, f.Metadata)
		if f.Event == wsproto.EventUserConfirm {
			if text, ok := answers[f.StepID]; ok {
				full.Answer(f.StepID, text)
			}
		}
	}
	a, _ := json.Marshal(full.Snapshot(0, ""))
	b, _ := json.Marshal(state.Snapshot(0, ""))
	if string(a) != string(b) {
		t.Errorf("state from snapshot+live:\n%s\nfrom every event:\n%s", b, a)
	}
}

// TestRestartTask: a failed task is skipped, then restarted with its
// skipped dependents; the connection drops right after the restart and
// the resume replays exactly what was missed.
func TestRestartTask(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	tasks := []wsproto.Task{failTask("a", "[sim:fail=permanent*1]"), failTask("b", "", "a"), failTask("c", "", "b"),
		failTask("hold", "[sim:ask=Done?]")}
	c.send("user.solve_tasks", map[string]any{"tasks": tasks})
	frames, asked := confirmsUntil(t, c, 2)
	failed, hold := asked[wsproto.ConfirmTaskFailed+" a"], asked[wsproto.ConfirmInput+" hold"]
	c.respond(failed.StepID, map[string]any{"action": "skip"})
	frames = append(frames, c.until(wsproto.EventSolverSkipped)...)
	frames = append(frames, c.until(wsproto.EventSolverSkipped)...) // b, then c

	for _, tt := range []struct {
		name, task, code string
	}{
		{"waiting for the user counts as running", "hold", "invalid_state"},
		{"a skipped task whose dependency failed", "b", "invalid_state"},
		{"an unknown task", "nope", "unknown_task"},
		{"no task id", "", "invalid_message"},
	} {
		c.send("user.restart_task", map[string]any{"task_id": tt.task})
		if e := c.expectError(tt.code); e.RefType != "user.restart_task" || e.Message == "" {
			t.Errorf("%s: %+v", tt.name, e)
		}
	}

	c.send("user.restart_task", map[string]any{"task_id": "a"})
	// The connection drops once the server has taken the command (a frame
	// sent just before an abrupt close may never be read), in the middle
	// of its effect: after the first solver.restarted.
	first := c.until(wsproto.EventSolverRestarted)
	frames = append(frames, first...)
	c.ws.CloseNow()
	sums := checksums(frames)
	last := frames[len(frames)-1].Seq
	r := resume(t, base, hello, last, sums[last])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); m.Resync {
		t.Fatalf("resume %+v, want a replay", m)
	}
	after := append(first, r.until(wsproto.EventSolverStart)...)
	var restarted []string
	for _, f := range framesOf(after, wsproto.EventSolverRestarted) {
		m := meta[wsproto.SolverRestarted](t, f)
		if m.Reason != wsproto.ReasonUserRestart || f.StepID != "" {
			t.Errorf("solver.restarted %+v", m)
		}
		restarted = append(restarted, m.TaskID)
	}
	if !slices.Equal(restarted, []string{"a", "b", "c"}) {
		t.Errorf("restarted %v, want a, b, c", restarted)
	}
	if m := meta[wsproto.SolverStart](t, after[len(after)-1]); m.TaskID != "a" || m.Attempt != 2 {
		t.Errorf("then %+v, want a's execution 2", m)
	}
	after = append(after, r.until(wsproto.EventSolverStart)...) // b, once a has completed
	r.respond(hold.StepID, map[string]any{"text": "yes"})
	after = append(after, r.until(wsproto.EventFinalAnswer)...)
	all := append(frames, after[len(first):]...)
	checkStream(t, all, 1)
	if pc := meta[wsproto.PipelineCompleted](t, framesOf(all, wsproto.EventPipelineCompleted)[0]); pc.Status != wsproto.StatusSucceeded || pc.Completed != 4 {
		t.Errorf("pipeline.completed %+v, want every task completed", pc)
	}

	// The run has ended: nothing is solving.
	r.send("user.restart_task", map[string]any{"task_id": "a"})
	r.expectError("no_active_run")
}

// TestRestartTaskNoRun: with no run solving — none at all, planning,
// awaiting the plan's confirmation — a restart is no_active_run.
func TestRestartTaskNoRun(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	c.send("user.restart_task", map[string]any{"task_id": "t1"})
	c.expectError("no_active_run")
	runToConfirm(t, c, "Restart before solving")
	c.send("user.restart_task", map[string]any{"task_id": "t1"})
	c.expectError("no_active_run")
}

// TestRestartResync: a client that resyncs after a restart ends in the
// state of one that saw every event.
func TestRestartResync(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	tasks := []wsproto.Task{failTask("a", ""), failTask("hold", "[sim:ask=Done?]")}
	c.send("user.solve_tasks", map[string]any{"tasks": tasks})
	var hold wsproto.UserConfirm
	for done := false; !done || hold.StepID == ""; { // a's completion and hold's question, in either order
		switch f := c.next(); f.Event {
		case wsproto.EventSolverCompleted:
			done = true
		case wsproto.EventUserConfirm:
			hold = meta[wsproto.UserConfirm](t, f)
		}
	}
	c.send("user.restart_task", map[string]any{"task_id": "a"})
	c.until(wsproto.EventSolverRestarted)

	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	if len(snap.Run.PendingConfirm) != 1 || snap.Run.PendingConfirm[0].StepID != hold.StepID {
		t.Fatalf("snapshot %+v: want the open question", snap.Run)
	}
	r.respond(hold.StepID, map[string]any{"text": "yes"})
	live := r.until(wsproto.EventFinalAnswer)
	checkStream(t, live, snap.Seq+1)
	sameState(t, base, hello, snap, live, tasks, map[string]string{hold.StepID: "yes"})
}
