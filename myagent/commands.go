package myagent

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// handle carries out one client frame. Nothing a frame holds reaches a
// session the connection did not create or restore.
func (c *conn) handle(b []byte) {
	var f clientFrame
	if err := json.Unmarshal(b, &f); err != nil {
		c.fail("", "Invalid JSON: a frame must be a JSON object with an event", obj{"code": wsproto.CodeInvalidJSON})
		return
	}
	content, err := decodeValue(f.Content)
	if err != nil {
		c.fail(f.SessionID, "Invalid JSON in content", obj{"code": wsproto.CodeInvalidJSON})
		return
	}
	switch f.Event {
	case "user.create_session":
		c.createSession()
		return
	case "user.reconnect_with_state":
		c.reconnect(&f, content)
		return
	case "user.ack":
		c.ack(&f, content)
		return
	case "user.message", "user.solve_tasks", "user.response", "user.cancel", "user.cancel_task",
		"user.restart_task", "user.cancel_plan", "user.replan", "user.request_state":
	case "":
		c.fail(f.SessionID, "Missing event", obj{"code": wsproto.CodeInvalidMessage})
		return
	default:
		c.fail(f.SessionID, "Unknown event type: "+f.Event, obj{"code": wsproto.CodeUnknownType})
		return
	}
	if f.SessionID == "" {
		c.fail("", "Missing session_id for "+f.Event, obj{"code": wsproto.CodeInvalidMessage})
		return
	}
	s := c.lookup(f.SessionID)
	if s == nil {
		c.fail(f.SessionID, "Session not found", obj{"code": "session_not_found"})
		return
	}
	if err := c.command(s, &f, content); err != nil {
		c.fail(s.id, errText(err), obj{"code": wsproto.CodeInvalidMessage})
	}
}

// errText is a bad input's message without the sentinel's prefix.
func errText(err error) string {
	msg := err.Error()
	if p := errBadInput.Error() + ": "; len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

func (c *conn) command(s *session, f *clientFrame, content any) error {
	switch f.Event {
	case "user.message":
		text, meta, err := toMessage(content)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.view.lastRequest = text
		s.mu.Unlock()
		c.send(s, batonFrame(wsproto.EventUserMessage, "", text, meta))
	case "user.solve_tasks":
		tasks, err := toSolve(content)
		if err != nil {
			return err
		}
		c.rememberTasks(s, tasks)
		c.send(s, batonFrame(wsproto.EventUserSolve, "", "", obj{"tasks": tasks}))
	case "user.response":
		step := f.StepID
		if step == "" {
			if m, ok := content.(obj); ok {
				step = str(m["step_id"])
			}
		}
		if step == "" {
			return badInput("Missing step_id in user response")
		}
		s.mu.Lock()
		kind := s.view.confirms[step]
		s.mu.Unlock()
		meta, err := toResponse(kind, content)
		if err != nil {
			return err
		}
		if tasks, ok := meta["tasks"]; ok { // an edited plan: what solver.* will name
			c.rememberTasks(s, tasks)
		}
		c.send(s, batonFrame(wsproto.EventUserResponse, step, "", meta))
	case "user.cancel":
		c.send(s, batonFrame(wsproto.EventUserCancel, "", "", nil))
	case "user.cancel_task", "user.restart_task":
		id, err := taskIDOf(content)
		if err != nil {
			return badInput("Missing task_id for %s", f.Event[len("user."):])
		}
		event := wsproto.EventUserCancelTask
		if f.Event == "user.restart_task" {
			event = wsproto.EventUserRestart
		}
		c.send(s, batonFrame(event, "", "", obj{"task_id": id}))
	case "user.cancel_plan":
		s.mu.Lock()
		planning := s.view.phase == phasePlanning || s.view.phase == phasePlanConfirm
		s.mu.Unlock()
		if !planning {
			c.notice(s, "No planning in progress", obj{"action": "cancel_plan", "ok": false})
			return nil
		}
		// The notice first: the events the cancel brings come after it.
		c.notice(s, "Plan cancellation requested", obj{"action": "cancel_plan", "ok": true})
		c.send(s, batonFrame(wsproto.EventUserCancel, "", "", nil))
	case "user.replan":
		return c.replan(s, content)
	case "user.request_state":
		s.mu.Lock()
		st := resumeState{SessionID: s.id, ResumeToken: s.token, LastSeq: s.view.lastSeq,
			ExportedAt: time.Now().UTC()}
		s.mu.Unlock()
		signed := sign(c.h.opts.StateKey, st)
		b, _ := json.Marshal(signed)
		c.push(obj{"event": "agent.state_exported", "session_id": s.id, "content": "Session state exported successfully",
			"metadata": obj{"signed_state": signed, "state_size": len(b), "last_seq": st.LastSeq,
				"current_step": st.LastSeq, "connection_id": c.id}})
	}
	return nil
}

// replan: while a plan waits for its confirmation, plan again with the
// question as feedback (Baton's user.replan); when idle, start a new run
// with the question, or the last request; else Baton's answer (busy).
func (c *conn) replan(s *session, content any) error {
	question := ""
	switch q := content.(type) {
	case string:
		question = q
	case obj:
		question = firstString(q, "question", "feedback")
	}
	s.mu.Lock()
	phase, last := s.view.phase, s.view.lastRequest
	s.mu.Unlock()
	switch phase {
	case phasePlanConfirm:
		c.notice(s, "Replan requested", obj{"action": "replan", "ok": true, "mode": "in_run"})
		c.send(s, batonFrame(wsproto.EventUserReplan, "", "", obj{"feedback": question}))
	case phaseIdle:
		if question == "" {
			question = last
		}
		if question == "" {
			return badInput("Replan requires a question when session is idle")
		}
		s.mu.Lock()
		s.view.lastRequest = question
		s.mu.Unlock()
		c.notice(s, "Replan started", obj{"action": "replan", "mode": "restart", "question": question})
		c.send(s, batonFrame(wsproto.EventUserMessage, "", question, obj{}))
	default:
		c.send(s, batonFrame(wsproto.EventUserReplan, "", "", obj{"feedback": question}))
	}
	return nil
}

// createSession gives the client a fresh Baton session.
func (c *conn) createSession() {
	s, err := c.freshSession()
	if err != nil {
		c.fail("", "Failed to create session: "+err.Error(), obj{"code": "session_unavailable"})
		return
	}
	s.view = newView(s.id, c.id)
	c.push(obj{"event": "agent.session_created", "session_id": s.id, "content": "Session created successfully",
		"metadata": obj{"agent_name": c.h.opts.AgentName, "connection_id": c.id}})
	c.start(s)
}

// ack acks the session the ack names (session_id, or its last_event_id),
// or the connection's only session.
func (c *conn) ack(f *clientFrame, content any) {
	sid, seq, err := ackOf(f, content)
	if err != nil {
		c.fail(f.SessionID, errText(err), obj{"code": wsproto.CodeInvalidAck})
		return
	}
	if sid == "" {
		sid = f.SessionID
	}
	var s *session
	if sid != "" {
		s = c.lookup(sid)
	} else {
		c.mu.Lock()
		if len(c.sessions) == 1 {
			for _, only := range c.sessions {
				s = only
			}
		}
		n := len(c.sessions)
		c.mu.Unlock()
		if s == nil {
			if n > 0 { // several sessions: an ack must say which
				c.fail("", "user.ack needs session_id or last_event_id on a connection with several sessions", obj{"code": wsproto.CodeInvalidAck})
			}
			return // nothing to ack yet: myagent's clients ack from the start
		}
	}
	if s == nil {
		c.fail(sid, "Session not found", obj{"code": "session_not_found"})
		return
	}
	if seq == 0 {
		return
	}
	c.send(s, batonFrame(wsproto.EventUserAck, "", "", obj{"last_seq": seq}))
}

// reconnect restores the session a signed state names on this connection:
// a resume of /ws with the state's token, from the client's last_seq (or
// last_event_id; none: 0, replaying all the ring holds). A state that does
// not verify, or that /ws rejects, changes nothing.
func (c *conn) reconnect(f *clientFrame, content any) {
	raw := f.SignedState
	m, _ := content.(obj)
	if len(raw) == 0 && m != nil && m["signed_state"] != nil {
		raw, _ = json.Marshal(m["signed_state"])
	}
	if len(raw) == 0 || string(raw) == "null" {
		c.fail("", "Missing signed_state in reconnect request", obj{"code": "invalid_state"})
		return
	}
	st, err := verify(c.h.opts.StateKey, raw, time.Now(), c.h.opts.StateTTL)
	if err != nil {
		c.fail("", "Invalid state: "+strings.TrimPrefix(err.Error(), errState.Error()+": "), obj{"code": "invalid_state"})
		return
	}
	var lastSeq uint64
	if m != nil && (m["last_seq"] != nil || m["last_event_id"] != nil) || len(f.LastSeq) > 0 || len(f.LastEventID) > 0 {
		sid, seq, err := ackOf(f, content)
		if err != nil {
			c.fail("", errText(err), obj{"code": "invalid_state"})
			return
		}
		if sid != "" && sid != st.SessionID {
			c.fail("", "last_event_id is not an event of the restored session", obj{"code": "invalid_state"})
			return
		}
		lastSeq = seq
	}
	if c.lookup(st.SessionID) != nil {
		c.fail(st.SessionID, "Session already active on this connection", obj{"code": "invalid_state"})
		return
	}
	fresh, err := c.freshSession()
	if err != nil {
		c.fail("", "Reconnection failed: "+err.Error(), obj{"code": "session_unavailable"})
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.h.opts.DialTimeout)
	defer cancel()
	c.send(fresh, batonFrame(wsproto.EventUserReconnect, "", "", obj{"session_id": st.SessionID,
		"resume_token": st.ResumeToken, "last_seq": lastSeq, "state_checksum": ""}))
	answer, err := readFrame(ctx, fresh.ws)
	if err != nil {
		fresh.ws.CloseNow()
		c.fail("", "Reconnection failed: no answer from the session", obj{"code": "session_unavailable"})
		return
	}
	meta, _ := answer["metadata"].(obj)
	if str(answer["event"]) != wsproto.EventConnected || meta["resumed"] != true {
		c.keepSpare(fresh) // still a fresh session, unchanged
		c.fail("", "Invalid state: the session cannot be resumed (expired, or resumed since with a newer state)",
			obj{"code": wsproto.CodeResumeRejected})
		return
	}
	s := &session{ws: fresh.ws, id: st.SessionID, token: str(meta["resume_token"]), view: newView(st.SessionID, c.id)}
	s.view.lastSeq = lastSeq
	resync := meta["resync"] == true
	replayed := 0
	if n, ok := meta["replayed"].(json.Number); ok {
		replayed, _ = strconv.Atoi(string(n))
	}
	c.push(obj{"event": "agent.state_restored", "session_id": s.id, "content": "Session state restored successfully",
		"metadata": obj{"original_session_id": st.SessionID, "restored_step": lastSeq, "message_count": 0,
			"agent_name": c.h.opts.AgentName, "connection_id": c.id, "warnings": []any{},
			"resync": resync, "replayed": replayed, "last_seq": meta["last_seq"]}})
	notice := obj{"event": "system.notice", "session_id": s.id, "content": "Replay completed",
		"metadata": obj{"action": "replay", "replayed": replayed, "resync": resync, "last_seq": lastSeq,
			"connection_id": c.id}}
	if replayed == 0 && !resync {
		notice["content"], notice["metadata"].(obj)["count"] = "No buffered events available for replay", 0
		c.push(notice)
	} else {
		s.replayLeft, s.notice = replayed, notice
	}
	c.start(s)
}

// rememberTasks gives s's view the tasks the client sent (Baton's shape).
func (c *conn) rememberTasks(s *session, tasks any) {
	b, _ := json.Marshal(tasks)
	asJSON, _ := decodeValue(b)
	s.mu.Lock()
	s.view.remember(asJSON)
	s.mu.Unlock()
}
