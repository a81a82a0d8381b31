package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// secret marks every text a client sends in TestLogs: requests, task
// titles and descriptions (and so the model's results, which repeat them).
// None of it may reach the log.
const secret = "Zanzibar-XYZZY"

// TestLogs: a connection's open and close, and a run's start and end with
// its outcome, are logged with their ids and durations; no message text is.
func TestLogs(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--retry-base", "1ms")
	secretTask := func(id, directive string) wsproto.Task {
		return wsproto.Task{ID: id, Title: "Task " + secret, Description: directive + " about " + secret, DependsOn: []string{}}
	}
	tests := []struct {
		name    string
		outcome string
		attrs   map[string]any // more attributes of "run ended"
		drive   func(t *testing.T, c *conn) []client.Frame
	}{
		{
			name: "succeeded", outcome: "succeeded", attrs: map[string]any{"completed": 2, "failed": 0},
			drive: func(t *testing.T, c *conn) []client.Frame {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{secretTask("a", ""), secretTask("b", "")}})
				return c.until(wsproto.EventFinalAnswer)
			},
		},
		{
			name: "failed", outcome: "failed", attrs: map[string]any{"completed": 0, "failed": 1},
			drive: func(t *testing.T, c *conn) []client.Frame {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{secretTask("a", "[sim:fail=permanent*1]")}})
				_, frames := answerTaskFailed(t, c, "skip")
				return append(frames, c.until(wsproto.EventFinalAnswer)...)
			},
		},
		{
			name: "rejected", outcome: "rejected",
			drive: func(t *testing.T, c *conn) []client.Frame {
				frames, confirm := runToConfirm(t, c, "Plan a trip to "+secret)
				c.respond(confirm.StepID, map[string]any{"confirmed": false})
				return append(frames, c.until(wsproto.EventPlanCancelled)...)
			},
		},
		{
			name: "plan failed", outcome: "plan_failed",
			drive: func(t *testing.T, c *conn) []client.Frame {
				c.message("Plan a trip to " + secret + " [sim:plan_fail=permanent*1]")
				return c.until(wsproto.EventPlanCancelled)
			},
		},
		{
			name: "cancelled", outcome: "cancelled", attrs: map[string]any{"reason": "user_cancel"},
			drive: func(t *testing.T, c *conn) []client.Frame {
				c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{secretTask("a", "[sim:sleep=1h]")}})
				frames := []client.Frame{c.expect(wsproto.EventSolverStart)}
				c.send("user.cancel", nil)
				return append(frames, c.until(wsproto.EventPipelineCancelled)...)
			},
		},
	}
	// The group returns when its parallel subtests have all ended.
	t.Run("group", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c, hello := connect(t, base)
				frames := tt.drive(t, c)
				var first struct {
					RunID string `json:"run_id"`
				}
				if err := json.Unmarshal(frames[0].Metadata, &first); err != nil || first.RunID == "" {
					t.Fatalf("no run_id in %s: %v", frames[0].Metadata, err)
				}
				if err := c.ws.Close(websocket.StatusNormalClosure, ""); err != nil {
					t.Fatalf("close: %v", err)
				}
				session := map[string]any{"session": hello.SessionID}
				eventually(t, "the connection's close to be logged", func() bool {
					return logs.find(t, "connection closed", session) != nil
				})
				if logs.find(t, "connection opened", session) == nil {
					t.Errorf("no connection opened for %s", hello.SessionID)
				}
				closed := logs.find(t, "connection closed", map[string]any{"session": hello.SessionID, "end": "client closed", "close_status": 1000})
				if closed == nil {
					t.Errorf("connection closed: %v, want end %q and close_status 1000", logs.find(t, "connection closed", session), "client closed")
				} else if _, ok := closed["duration_ms"].(float64); !ok {
					t.Errorf("connection closed without a duration: %v", closed)
				}
				ids := map[string]any{"session": hello.SessionID, "run": first.RunID}
				if logs.find(t, "run started", ids) == nil {
					t.Errorf("no run started with %v", ids)
				}
				want := map[string]any{"session": hello.SessionID, "run": first.RunID, "outcome": tt.outcome}
				for k, v := range tt.attrs {
					want[k] = v
				}
				ended := logs.find(t, "run ended", want)
				if ended == nil {
					t.Fatalf("no run ended with %v; the run's lines: %v", want, logs.find(t, "run ended", ids))
				}
				if _, ok := ended["duration_ms"].(float64); !ok {
					t.Errorf("run ended without a duration: %v", ended)
				}
			})
		}
	})
	if text := logs.String(); strings.Contains(text, secret) {
		t.Errorf("the log holds client text:\n%s", text)
	}
}

// TestConnectionLogsNameTheResumedSession: once a connection has resumed a
// session, its log lines name that session, not the fresh one it was given
// and that the resume discarded.
func TestConnectionLogsNameTheResumedSession(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--log-level", "debug", "--ping-interval", "50ms", "--pong-timeout", "200ms")
	c, hello := connect(t, base)
	if err := c.ws.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The resumed connection reads its system.connected and then nothing
	// more, so it answers no ping: the server drops it and logs why.
	r := dial(t, base)
	fresh := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
	r.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
		"resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""})
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed || m.SessionID != hello.SessionID {
		t.Fatalf("resume: %+v", m)
	}
	// frames 1: the resumed connection (the first one sent none).
	dropped := map[string]any{"session": hello.SessionID, "end": "server dropped: no pong", "frames": 1}
	eventually(t, "the resumed connection's drop to be logged", func() bool {
		return logs.find(t, "connection closed", dropped) != nil
	})
	if logs.find(t, "no pong; dropping connection", map[string]any{"session": hello.SessionID}) == nil {
		t.Errorf("no \"no pong\" line names the resumed session %s", hello.SessionID)
	}
	for _, rec := range logs.records(t) {
		if rec["session"] == fresh.SessionID && rec["msg"] != "connection opened" {
			t.Errorf("a line after the resume names the discarded session: %v", rec)
		}
	}
}
