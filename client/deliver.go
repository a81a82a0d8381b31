package client

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// deliver applies one frame: sequenced events once, in order; snapshots
// replace the state.
func (c *Client) deliver(f Frame) { c.deliverOf(f, "") }

// deliverOf is deliver for a frame of the session named session; "" is
// the client's. A frame of any other session is dropped as a violation:
// one session's event reached another's connection.
func (c *Client) deliverOf(f Frame, session string) {
	var confirms []wsproto.UserConfirm
	var ack []byte
	c.mu.Lock()
	c.delivering = true
	if session == "" {
		session = c.sessionID
	}
	if f.SessionID != session {
		// Dropped, so the application never sees another session's
		// event; and reported, because the server must never send it.
		c.stats.Foreign++
		c.violation("foreign frame: %s (seq %d) of session %s reached session %s", f.Event, f.Seq, f.SessionID, session)
		c.mu.Unlock()
		c.wake()
		return
	}
	switch {
	case f.Seq != 0:
		if f.Seq <= c.lastSeq {
			// Dropped, so the application still sees each event once; and
			// reported, because the server must never send it.
			c.stats.Duplicates++
			c.violation("duplicate: event seq %d (%s) at or below the last applied seq %d", f.Seq, f.Event, c.lastSeq)
			c.mu.Unlock()
			c.wake() // the view changed: a waiter may be counting violations
			return
		}
		if f.Seq != c.lastSeq+1 {
			c.violation("gap: event seq %d after %d", f.Seq, c.lastSeq)
		}
		c.lastSeq = f.Seq
		f.Replayed = f.Seq <= c.replayTo
		c.checksum = c.checksum.Next(f.EventID)
		if len(c.expectSum) > 0 {
			if want, ok := c.expectSum[f.Seq]; ok {
				delete(c.expectSum, f.Seq)
				if got := c.checksum.String(); want != got {
					c.violation("checksum at seq %d: client %s, server %s", f.Seq, got, want)
				}
			}
		}
		c.stats.Events++
		if !c.opts.SkipState {
			c.seedLocked(f)
			if err := c.state.ApplyJSON(f.Event, f.Metadata); err != nil {
				c.violation("seq %d: %v", f.Seq, err)
			}
		}
		switch f.Event {
		case wsproto.EventUserConfirm:
			var m wsproto.UserConfirm
			if json.Unmarshal(f.Metadata, &m) == nil {
				confirms = append(confirms, m)
			}
		case wsproto.EventFinalAnswer, wsproto.EventPlanCancelled, wsproto.EventPipelineCancelled:
			clear(c.answers)
			c.seed = nil
		}
		if c.opts.AckEvery > 0 {
			if c.sinceAck++; c.sinceAck >= c.opts.AckEvery {
				c.sinceAck = 0
				ack = appendAck(nil, f.Seq)
			}
		}
	case f.Event == wsproto.EventStateSnapshot:
		var s wsproto.Snapshot
		if err := json.Unmarshal(f.Metadata, &s); err != nil {
			c.violation("snapshot: %v", err)
			break
		}
		c.lastSeq = s.Seq
		var err error
		if c.checksum, err = buffer.ParseChecksum(s.StateChecksum); err != nil {
			c.violation("snapshot at seq %d: state_checksum: %v", s.Seq, err)
		}
		if !c.opts.SkipState {
			c.state.Load(s)
		}
		clear(c.expectSum)
		// An answer whose confirmation the server no longer has open
		// reached it (or came too late): it is not sent again.
		pending := map[string]bool{}
		if s.Run != nil {
			for _, p := range s.Run.PendingConfirm {
				pending[p.StepID] = true
				if _, answered := c.answers[p.StepID]; !answered {
					confirms = append(confirms, p)
				}
			}
		}
		maps.DeleteFunc(c.answers, func(id string, _ []byte) bool { return !pending[id] })
	case f.Event == wsproto.EventConnected:
		var m wsproto.Connected
		if json.Unmarshal(f.Metadata, &m) == nil && !c.opts.SkipState {
			c.state.SetHistoryLimit(m.HistoryLimit)
		}
	case f.Event == wsproto.EventError:
		if c.resent > 0 && resentReply(f) {
			c.resent--
			c.stats.ResentAnswers++
			break
		}
		c.stats.Errors++
	}
	ws := c.ws
	c.mu.Unlock()

	// Waiters are woken last: a condition may read what OnEvent records or
	// what OnConfirm answers, and must see it once it sees this frame.
	defer c.wake()
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(f)
	}
	if ack != nil {
		ws.Write(context.Background(), websocket.MessageText, ack)
	}
	for _, confirm := range confirms {
		if c.opts.OnConfirm == nil {
			break
		}
		if a := c.opts.OnConfirm(confirm); a != nil {
			c.Respond(context.Background(), confirm.StepID, *a)
		}
	}
}

// resentReply reports whether a system.error is the reply a re-sent
// answer gets when the server already had it.
func resentReply(f Frame) bool {
	code, _ := metaString(f.Metadata, "code")
	ref, _ := metaString(f.Metadata, "ref_type")
	return code == wsproto.CodeStepIDMismatch && ref == wsproto.EventUserResponse
}

// wake ends a frame's delivery and tells every Wait that the client's view
// may have changed. Every call of deliver ends with one.
func (c *Client) wake() {
	c.mu.Lock()
	c.delivering = false
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// checkReplay checks a resume answered with a replay (§3.5): the server
// says it replays the events after the client's last seq up to its latest,
// and how many that is. Each event's own seq is checked as it arrives.
func (c *Client) checkReplay(m wsproto.Connected) {
	switch {
	case m.LastSeq < c.lastSeq:
		c.violation("replay: the client is at seq %d, the server's latest is %d; want a resync", c.lastSeq, m.LastSeq)
	case m.Replayed == nil || uint64(*m.Replayed) != m.LastSeq-c.lastSeq:
		n := "none"
		if m.Replayed != nil {
			n = fmt.Sprint(*m.Replayed)
		}
		c.violation("replay: %s events announced from seq %d to %d, want %d", n, c.lastSeq, m.LastSeq, m.LastSeq-c.lastSeq)
	}
}

func (c *Client) violation(format string, args ...any) {
	c.stats.Violations = append(c.stats.Violations, fmt.Sprintf(format, args...))
}

// seedLocked gives the state the task list the client chose (its
// user.solve_tasks list, or its edit of the plan) at the run's first
// solver.start, as the server's state has it from then on: no event
// carries that list.
func (c *Client) seedLocked(f Frame) {
	if c.seed == nil || f.Event != wsproto.EventSolverStart || c.state.Phase == wsproto.PhaseSolving {
		return
	}
	var m wsproto.SolverStart
	if json.Unmarshal(f.Metadata, &m) != nil {
		return
	}
	request := ""
	if c.state.Run != nil && c.state.Run.RunID == m.RunID {
		request = c.state.Run.Request
	}
	c.state.BeginSolving(m.RunID, request, c.seed)
	c.seed = nil
}

// appendAck appends a user.ack of every event up to seq.
func appendAck(dst []byte, seq uint64) []byte {
	dst = append(dst, `{"event":"`+wsproto.EventUserAck+`","metadata":{"last_seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, '}', '}')
}
