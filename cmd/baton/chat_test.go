package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// chat sends a chat-mode user.message.
func (c *conn) chat(text string) {
	c.sendFrame(map[string]any{"event": "user.message", "content": text, "metadata": map[string]any{"mode": "chat"}})
}

// checkChatRun checks the events of a whole chat run (every frame of it,
// once each, in order) against what §5.6 promises: no planning event and
// no plan confirmation; every solver.start names the mode and the one
// task t1 (the request as its description); the answer streamed in the
// answering round's solver.progress messages is the task's result and the
// final answer; the end is aggregate.start, aggregate.completed,
// pipeline.completed and agent.final_answer. It returns the answer.
func checkChatRun(t *testing.T, frames []client.Frame, request string) string {
	t.Helper()
	checkLoop(t, frames)
	var streamed strings.Builder // the text since the latest tool result
	var result, answer string
	var tail []string // the events after solver.completed
	for _, f := range frames {
		if !wsproto.Sequenced(f.Event) {
			continue
		}
		if result != "" {
			tail = append(tail, f.Event)
		}
		switch f.Event {
		case wsproto.EventPlanStart, wsproto.EventPlanStepCompleted, wsproto.EventPlanCompleted, wsproto.EventAggregateProgress:
			t.Errorf("a chat run emitted %s", f.Event)
		case wsproto.EventUserConfirm:
			if k := meta[wsproto.UserConfirm](t, f).Kind; k == wsproto.ConfirmPlan {
				t.Errorf("a chat run asked for a plan confirmation")
			}
		case wsproto.EventSolverStart:
			m := meta[wsproto.SolverStart](t, f)
			if m.TaskID != "t1" || m.Mode != wsproto.ModeChat || m.Task == nil || m.Task.ID != "t1" ||
				m.Task.Description != request || m.Task.Title == "" || m.Task.DependsOn == nil {
				t.Errorf("solver.start of a chat run: %s", f.Metadata)
			}
			streamed.Reset()
		case wsproto.EventToolResult:
			streamed.Reset()
		case wsproto.EventSolverProgress:
			streamed.WriteString(meta[wsproto.SolverProgress](t, f).Message)
		case wsproto.EventSolverCompleted:
			result = meta[wsproto.SolverCompleted](t, f).Result
		case wsproto.EventFinalAnswer:
			answer = meta[wsproto.FinalAnswer](t, f).Content
		case wsproto.EventPipelineCompleted:
			if pc := meta[wsproto.PipelineCompleted](t, f); pc.Status != wsproto.StatusSucceeded || pc.Completed != 1 {
				t.Errorf("pipeline.completed %+v", pc)
			}
		}
	}
	want := []string{wsproto.EventAggregateStart, wsproto.EventAggregateCompleted, wsproto.EventPipelineCompleted, wsproto.EventFinalAnswer}
	if result == "" || answer != result || streamed.String() != answer || strings.Join(tail, " ") != strings.Join(want, " ") {
		t.Errorf("result %q, streamed %q, answer %q, then %v; want one text, and %v", result, streamed.String(), answer, tail, want)
	}
	return answer
}

// TestChatRunWithToolAndDrop: a chat-mode message runs one agent loop —
// here calling an MCP tool that asks first — and the client, dropped
// mid-answer, resumes and ends with every event exactly once and the
// answer, which quotes the tool.
func TestChatRunWithToolAndDrop(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--mcp", everything(t, filepath.Join(t.TempDir(), "pid")), "--mcp-confirm", "ev")
	c, hello := connect(t, base)
	request := `What does the echo say? [sim:tool=ev__echo {"message":"hi from chat"}]`
	c.chat(request)

	frames := c.until(wsproto.EventUserConfirm)
	ask := meta[wsproto.UserConfirm](t, frames[len(frames)-1])
	if ask.Kind != wsproto.ConfirmTool || ask.Tool != "ev__echo" || ask.TaskID != "t1" {
		t.Fatalf("the chat run asked %+v, want the tool's confirmation", ask)
	}
	c.respond(ask.StepID, map[string]any{"approved": true})
	// Read into the answer: the first piece of it after the tool's result.
	for after := false; ; {
		f := c.next()
		frames = append(frames, f)
		if f.Event == wsproto.EventToolResult && meta[wsproto.ToolResult](t, f).Tool == "ev__echo" {
			after = true
		}
		if after && f.Event == wsproto.EventSolverProgress && meta[wsproto.SolverProgress](t, f).Message != "" {
			break
		}
		if f.Event == wsproto.EventFinalAnswer {
			t.Fatal("the run ended before the drop: the test proves nothing")
		}
	}
	c.ws.CloseNow()
	// The client had the frames up to two before the piece: the piece
	// and the one before it were lost with the connection.
	had := frames[:len(frames)-2]
	last := had[len(had)-1].Seq
	r := resume(t, base, hello, last, checksums(had)[last])
	m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
	if !m.Resumed || m.Resync || m.Replayed == nil || *m.Replayed < 2 {
		t.Fatalf("resume: %+v, want a replay of the lost piece and more", m)
	}
	all := append(had, r.until(wsproto.EventFinalAnswer)...)
	checkStream(t, all, 1)
	answer := checkChatRun(t, all, request)
	if !strings.Contains(answer, `ev__echo: "Echo: hi from chat"`) {
		t.Errorf("the answer does not quote the tool: %q", answer)
	}
}

// TestChatSnapshot: a resync in the middle of a chat run gets a snapshot
// that says what the run is — a chat run, solving its one task t1, with
// the task's question open — and the answer to that question, sent from
// the resynced connection, ends the run as usual.
func TestChatSnapshot(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	request := "Book me a table [sim:ask=For how many people?]"
	c.chat(request)
	frames := c.until(wsproto.EventUserConfirm)
	c.ws.CloseNow()

	r := resume(t, base, hello, frames[len(frames)-1].Seq, "not the checksum")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resync {
		t.Fatalf("resume %+v, want a resync", m)
	}
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	run := snap.Run
	if snap.Phase != wsproto.PhaseSolving || run == nil || run.Mode != wsproto.ModeChat || run.Request != request ||
		run.PlanVersion != 1 || len(run.Tasks) != 1 || run.Tasks[0].ID != "t1" || run.Tasks[0].Status != wsproto.TaskRunning ||
		run.Tasks[0].Description != request || len(run.PendingConfirm) != 1 || run.PendingConfirm[0].Kind != wsproto.ConfirmInput {
		t.Fatalf("snapshot of a chat run: phase %q, run %+v", snap.Phase, run)
	}
	// A client that folded the events has the same run as the snapshot.
	var folded wsproto.State
	for _, f := range frames {
		if wsproto.Sequenced(f.Event) {
			if err := folded.ApplyJSON(f.Event, f.Metadata); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, want := roundTrip(t, folded.Run), roundTrip(t, run); got != want {
		t.Errorf("the events fold into\n%s\nthe snapshot says\n%s", got, want)
	}
	r.respond(run.PendingConfirm[0].StepID, map[string]any{"text": "four"})
	rest := r.until(wsproto.EventFinalAnswer)
	if answer := meta[wsproto.FinalAnswer](t, rest[len(rest)-1]).Content; !strings.Contains(answer, "four") {
		t.Errorf("the answer %q does not quote the user's reply", answer)
	}
}

// TestChatDefaultMode: --default-mode chat makes a user.message without a
// mode a chat run; mode plan, or adaptive, still plans. On the default
// server a message without a mode plans.
func TestChatDefaultMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		args  []string
		meta  map[string]any
		first string // the run's first event
	}{
		{name: "chat default, no mode", args: []string{"--default-mode", "chat"}, first: wsproto.EventSolverStart},
		{name: "chat default, mode plan", args: []string{"--default-mode", "chat"}, meta: map[string]any{"mode": "plan"}, first: wsproto.EventPlanStart},
		{name: "chat default, adaptive", args: []string{"--default-mode", "chat"}, meta: map[string]any{"adaptive": true}, first: wsproto.EventPlanStart},
		{name: "plan default, no mode", first: wsproto.EventPlanStart},
		{name: "plan default, mode chat", meta: map[string]any{"mode": "chat"}, first: wsproto.EventSolverStart},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, _ := connect(t, base)
			frame := map[string]any{"event": "user.message", "content": "What time is it in Tokyo?"}
			if tt.meta != nil {
				frame["metadata"] = tt.meta
			}
			c.sendFrame(frame)
			if f := c.next(); f.Event != tt.first {
				t.Fatalf("the run began with %s %s, want %s", f.Event, f.Metadata, tt.first)
			}
			if tt.first == wsproto.EventPlanStart {
				return
			}
			frames := c.until(wsproto.EventFinalAnswer)
			checkChatRun(t, frames, "What time is it in Tokyo?")
		})
	}
}

// TestChatBadMode: a bad mode (or a chat message that asks to adapt, or a
// malformed directive in a chat request) is invalid_message and changes
// nothing: the session's next run is its first, at seq 1.
func TestChatBadMode(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	for _, m := range []map[string]any{
		{"mode": "fast"},
		{"mode": ""},
		{"mode": 1},
		{"mode": nil, "adaptive": "yes"},
		{"mode": "CHAT"},
		{"mode": "chat", "adaptive": true},
	} {
		c.sendFrame(map[string]any{"event": "user.message", "content": "What time is it?", "metadata": m})
		if e := c.expectError(wsproto.CodeInvalidMessage); e.RefType != wsproto.EventUserMessage {
			t.Errorf("metadata %v: %+v", m, e)
		}
	}
	c.chat("What time is it? [sim:fail=nonsense*1]")
	if e := c.expectError(wsproto.CodeInvalidMessage); !strings.Contains(e.Message, "sim:fail") {
		t.Errorf("a malformed directive: %+v", e)
	}
	c.send(wsproto.EventUserCancel, nil)
	c.expectError(wsproto.CodeNoActiveRun)
	c.chat("What time is it?")
	f := c.next()
	if f.Event != wsproto.EventSolverStart || f.Seq != 1 {
		t.Fatalf("after the refusals the run began with %s seq %d, want solver.start seq 1", f.Event, f.Seq)
	}
	checkChatRun(t, append([]client.Frame{f}, c.until(wsproto.EventFinalAnswer)...), "What time is it?")
}

// TestChatCancel: user.cancel of a chat run cancels its task and ends the
// run as any run's cancel does; the session then takes the next run.
func TestChatCancel(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, _ := connect(t, base)
	c.chat("Think hard [sim:sleep=30s]")
	c.expect(wsproto.EventSolverStart)
	c.send(wsproto.EventUserCancel, nil)
	frames := c.until(wsproto.EventPipelineCancelled)
	var got []string
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventSolverCancelled:
			m := meta[wsproto.SolverCancelled](t, f)
			got = append(got, f.Event+" "+m.TaskID+" "+m.Reason)
		case wsproto.EventPipelineCancelled:
			got = append(got, f.Event+" "+meta[wsproto.PipelineCancelled](t, f).Reason)
		case wsproto.EventFinalAnswer, wsproto.EventAggregateStart:
			got = append(got, f.Event)
		}
	}
	if want := "solver.cancelled t1 pipeline_cancelled, pipeline.cancelled user_cancel"; strings.Join(got, ", ") != want {
		t.Errorf("the cancel: %q, want %q", strings.Join(got, ", "), want)
	}
	c.chat("And now?")
	frames = c.until(wsproto.EventFinalAnswer)
	checkChatRun(t, frames, "And now?")
}

// TestClusterChatTakenOver: the node running a chat run dies (SIGKILL)
// while the run's one task runs; the other node takes the run over from
// its checkpoint and the client, resuming there, gets the answer with
// every event once: a chat run is a run of one task, and stays a chat run.
func TestClusterChatTakenOver(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()

	var frames frameLog
	cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll,
		OnEvent: func(f client.Frame) { frames.add(f) }})
	request := "Summarise the week [sim:sleep=3s]"
	if err := cl.MessageChat(ctx, request); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, ctx, cl, "t1 running", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == 1 && v.Run.Tasks[0].Status == wsproto.TaskRunning
	})
	if v.Run.Mode != wsproto.ModeChat || v.Run.Request != request {
		t.Fatalf("the client's view of a chat run: %+v", v.Run)
	}
	a.kill(t)
	v = waitView(t, ctx, cl, "the final answer after the kill", finished)
	clean(t, v)
	if !strings.Contains(b.log.String(), "session taken over") {
		t.Errorf("B did not take the session over")
	}
	if v.Run.Mode != wsproto.ModeChat || len(v.Run.Tasks) != 1 || v.Run.Tasks[0].Status != wsproto.TaskCompleted ||
		v.Run.Tasks[0].Attempt != 2 || *v.Run.FinalAnswer != v.Run.Tasks[0].Result {
		t.Errorf("after the takeover: %+v (answer %q)", v.Run, *v.Run.FinalAnswer)
	}
	var seq []client.Frame
	for _, f := range frames.all() {
		if wsproto.Sequenced(f.Event) {
			seq = append(seq, f)
		}
	}
	checkStream(t, seq, 1)
	checkChatRun(t, seq, request)
}
