package main

import (
	"context"
	"time"

	"encoding/json"
	"fmt"
	"github.com/coder/websocket"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// exportState asks for sid's signed state.
func (c *maConn) exportState(sid string) (map[string]any, float64) {
	c.t.Helper()
	c.send(map[string]any{"event": "user.request_state", "session_id": sid})
	frames := c.until("agent.state_exported", sid)
	f := frames[len(frames)-1]
	st, _ := f.meta()["signed_state"].(map[string]any)
	if st == nil || st["signature"] == "" || st["version"] == nil {
		c.t.Fatalf("state_exported %v", f)
	}
	last, _ := f.meta()["last_seq"].(float64)
	return st, last
}

// restore sends user.reconnect_with_state with state and the cursor's
// fields merged in.
func (c *maConn) restore(state any, content map[string]any, top map[string]any) {
	c.t.Helper()
	f := map[string]any{"event": "user.reconnect_with_state", "signed_state": state, "timestamp": "2026-01-01T00:00:00"}
	if content != nil {
		f["content"] = content
	}
	for k, v := range top {
		f[k] = v
	}
	c.send(f)
}

// TestMyagentRestore: a state exported on one connection restores the
// session on another from the client's cursor (last_seq, last_event_id,
// or none: all the ring holds): agent.state_restored, the replay, then
// system.notice; the run then goes on there.
func TestMyagentRestore(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	for _, tt := range []struct {
		name    string
		cursor  func(sid string) (content, top map[string]any)
		replays int // the seq the replay starts after
	}{
		{"last_seq in content", func(string) (map[string]any, map[string]any) { return map[string]any{"last_seq": 2}, nil }, 2},
		{"last_seq at the top", func(string) (map[string]any, map[string]any) { return nil, map[string]any{"last_seq": 3} }, 3},
		{"last_event_id", func(sid string) (map[string]any, map[string]any) {
			return map[string]any{"last_event_id": sid + "-1"}, nil
		}, 1},
		{"none", func(string) (map[string]any, map[string]any) { return nil, nil }, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c1 := dialMA(t, maURL(base, ""))
			sid := c1.create()
			confirm := c1.waitConfirm(sid, "Plan a trip")
			state, last := c1.exportState(sid)
			if float64(confirm["seq"].(float64)) != last {
				t.Fatalf("exported last_seq %v, confirm at %v", last, confirm["seq"])
			}
			c1.ws.CloseNow()

			c2 := dialMA(t, maURL(base, ""))
			content, top := tt.cursor(sid)
			c2.restore(state, content, top)
			f := c2.next()
			if f.event() != "agent.state_restored" || f.sid() != sid || f.meta()["original_session_id"] != sid ||
				f.meta()["replayed"] != last-float64(tt.replays) {
				t.Fatalf("restored %v", f)
			}
			frames := c2.until("system.notice", sid)
			if got := checkSeqs(t, frames, sid, tt.replays); got != int(last) {
				t.Fatalf("replay ended at %d, want %v", got, last)
			}
			if n := frames[len(frames)-1]; n["content"] != "Replay completed" || n.meta()["replayed"] != last-float64(tt.replays) {
				t.Fatalf("notice %v", n)
			}
			c2.send(map[string]any{"event": "user.response", "session_id": sid, "step_id": confirm["step_id"], "content": map[string]any{"confirmed": true}})
			checkSeqs(t, c2.until("agent.final_answer", sid), sid, int(last))
		})
	}
}

// TestMyagentStateRefused: a forged, tampered, foreign or stale signed
// state is refused with agent.error "Invalid state: …" and changes
// nothing: the session it names (another client's) goes on undisturbed,
// and the connection that sent it works on.
func TestMyagentStateRefused(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--state-key", "key-one-0123456789")
	other := startServer(t, "--state-key", "key-two-0123456789")

	victim := dialMA(t, maURL(base, ""))
	vid := victim.create()
	confirm := victim.waitConfirm(vid, "Plan a trip")
	good, _ := victim.exportState(vid)

	// A state another server (another key) signed, of its own session.
	oc := dialMA(t, maURL(other, ""))
	foreign, _ := oc.exportState(oc.create())

	mutate := func(f func(m map[string]any)) map[string]any {
		var m map[string]any
		b, _ := json.Marshal(good)
		json.Unmarshal(b, &m)
		f(m)
		return m
	}
	thief := dialMA(t, maURL(base, ""))
	for _, tt := range []struct {
		name  string
		state any
		want  string
	}{
		{"missing", nil, "Missing signed_state"},
		{"not an object", "abc", "Invalid state: signed_state is not a signed state object"},
		{"signature flipped", mutate(func(m map[string]any) { m["signature"] = strings.Repeat("0", 64) }), "Invalid state: signature mismatch"},
		{"no signature", mutate(func(m map[string]any) { delete(m, "signature") }), "Invalid state: signature mismatch"},
		{"token changed", mutate(func(m map[string]any) { m["state"].(map[string]any)["resume_token"] = "guess" }), "Invalid state: signature mismatch"},
		{"session changed", mutate(func(m map[string]any) { m["state"].(map[string]any)["session_id"] = "sess_other" }), "Invalid state: signature mismatch"},
		{"seq changed", mutate(func(m map[string]any) { m["state"].(map[string]any)["last_seq"] = 0 }), "Invalid state: signature mismatch"},
		{"timestamp changed", mutate(func(m map[string]any) { m["timestamp"] = "2030-01-01T00:00:00Z" }), "Invalid state: signature mismatch"},
		{"other version", mutate(func(m map[string]any) { m["version"] = "1.0" }), `Invalid state: unknown version "1.0"`},
		{"another server's key", foreign, "Invalid state: signature mismatch"},
	} {
		thief.restore(tt.state, nil, nil)
		f := thief.next()
		if s, _ := f["content"].(string); f.event() != "agent.error" || !strings.HasPrefix(s, tt.want) || f.sid() != "" {
			t.Errorf("%s: answered %v", tt.name, f)
		}
	}
	thief.create() // the thief's connection works on

	// A state exported before a later resume: refused once the rotation
	// has committed (the restoring client read its new token).
	c2 := dialMA(t, maURL(base, ""))
	c2.restore(good, map[string]any{"last_seq": confirm["seq"]}, nil)
	c2.until("system.notice", vid)
	eventually(t, "the token rotation", func() bool {
		return logs.count(t, "resume token committed", map[string]any{"session": vid}) == 1
	})
	thief.restore(good, nil, nil)
	if f := thief.next(); f.event() != "agent.error" || !strings.HasPrefix(f["content"].(string), "Invalid state: the session cannot be resumed") {
		t.Errorf("a stale state: answered %v", f)
	}
	c2.send(map[string]any{"event": "user.response", "session_id": vid, "step_id": confirm["step_id"], "content": map[string]any{"confirmed": true}})
	for _, f := range c2.until("agent.final_answer", vid) {
		if f.event() == "agent.error" {
			t.Errorf("the session's client got %v", f)
		}
	}
}

// TestMyagentAuth: the dialect authenticates as /ws does, with ?token=
// read as ?access_token=; a state of one subject's session does not
// resume it for another.
func TestMyagentAuth(t *testing.T) {
	t.Parallel()
	base := startServer(t, twoSubjects...)
	for _, tt := range []struct {
		name   string
		query  string
		header http.Header
		status int // 0: upgraded
	}{
		{"no credential", "", nil, http.StatusUnauthorized},
		{"a wrong token", "?token=nope", nil, http.StatusUnauthorized},
		{"?token=", "?token=" + url.QueryEscape(aliceToken), nil, 0},
		{"?access_token=", "?access_token=" + url.QueryEscape(bobToken), nil, 0},
		{"Bearer header", "", http.Header{"Authorization": {"Bearer " + aliceToken}}, 0},
		{"a token twice", "?token=" + url.QueryEscape(aliceToken) + "&access_token=" + url.QueryEscape(aliceToken), nil, http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := maURL(base, "") + tt.query
			c, resp, err := tryDialWithHeader(t, u, tt.header)
			if tt.status != 0 {
				if err == nil || resp == nil || resp.StatusCode != tt.status {
					t.Fatalf("dial: %v %v, want %d", err, resp, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if f := c.next(); f.event() != "system.connected" {
				t.Fatalf("first frame %v", f)
			}
			c.create()
		})
	}
	alice := dialMA(t, maURL(base, "")+"?token="+url.QueryEscape(aliceToken))
	aid := alice.create()
	confirm := alice.waitConfirm(aid, "Plan a trip")
	state, _ := alice.exportState(aid)
	bob := dialMA(t, maURL(base, "")+"?token="+url.QueryEscape(bobToken))
	bob.restore(state, nil, nil)
	if f := bob.next(); f.event() != "agent.error" || !strings.HasPrefix(f["content"].(string), "Invalid state: the session cannot be resumed") {
		t.Errorf("bob restoring alice's state: %v", f)
	}
	alice.send(map[string]any{"event": "user.response", "session_id": aid, "step_id": confirm["step_id"], "content": map[string]any{"confirmed": true}})
	alice.until("agent.final_answer", aid)
}

// TestMyagentAck: an ack in any of its forms prunes the session's ring up
// to it, so that a restore from before it is a resync; without one, the
// restore replays.
func TestMyagentAck(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	for _, tt := range []struct {
		name string
		ack  func(sid string, last float64) map[string]any // nil: no ack
	}{
		{"none", nil},
		{"last_seq", func(sid string, last float64) map[string]any {
			return map[string]any{"event": "user.ack", "session_id": sid, "content": map[string]any{"last_seq": last}}
		}},
		{"last_event_id, no session_id", func(sid string, last float64) map[string]any {
			return map[string]any{"event": "user.ack", "content": map[string]any{"last_event_id": fmt.Sprintf("%s-%d", sid, int(last))}}
		}},
		{"a bare number", func(sid string, last float64) map[string]any {
			return map[string]any{"event": "user.ack", "session_id": sid, "content": last}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := dialMA(t, maURL(base, ""))
			sid := c.create()
			c.send(map[string]any{"event": "user.solve_tasks", "session_id": sid, "content": []any{map[string]any{"id": 1, "title": "A"}}})
			frames := c.until("agent.final_answer", sid)
			last := frames[len(frames)-1]["seq"].(float64)
			if tt.ack != nil {
				c.send(tt.ack(sid, last))
			}
			// /ws reads a connection's frames in order: once the cancel is
			// answered, the ack has been applied.
			c.send(map[string]any{"event": "user.cancel", "session_id": sid})
			if f := c.next(); f.event() != "agent.error" || f.meta()["code"] != "no_active_run" {
				t.Fatalf("after the ack: %v", f)
			}
			state, _ := c.exportState(sid)
			c.ws.CloseNow()
			c2 := dialMA(t, maURL(base, ""))
			c2.restore(state, map[string]any{"last_seq": 0}, nil)
			f := c2.next()
			wantResync := tt.ack != nil
			if f.event() != "agent.state_restored" || f.meta()["resync"] != wantResync {
				t.Fatalf("restored %v", f)
			}
			got := c2.until("system.notice", sid)
			if wantResync {
				if len(got) != 2 || got[0].event() != "system.state_snapshot" {
					t.Fatalf("resync %v", got)
				}
			} else if checkSeqs(t, got, sid, 0) != int(last) {
				t.Fatalf("replay %v", got)
			}
		})
	}
}

func tryDialWithHeader(t *testing.T, u string, h http.Header) (*maConn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &maConn{t: t, ws: ws}, resp, nil
}
