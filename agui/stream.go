package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// An SSE event's id is SEQ:K:BASE — the Baton seq of the event it was
// mapped from, its index among the AG-UI events that event maps to, and
// the seq the stream started after. The stream's own first events
// (RUN_STARTED, STATE_SNAPSHOT, and the interrupt that may end it at
// once) are BASE:0:BASE, BASE:1:BASE, BASE:2:BASE. A resume replays the
// ring from BASE and skips up to SEQ:K: the mapping depends on the
// stream's events alone, so it makes the same events again.

// position is where an SSE event stands in its stream.
type position struct {
	seq  uint64
	k    int
	base uint64
}

func (p position) String() string { return fmt.Sprintf("%d:%d:%d", p.seq, p.k, p.base) }

// parsePosition reads a Last-Event-ID.
func parsePosition(s string) (position, error) {
	var p position
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return p, fmt.Errorf("Last-Event-ID %q: want SEQ:K:BASE", s)
	}
	var err1, err2, err3 error
	p.seq, err1 = strconv.ParseUint(parts[0], 10, 63)
	k, err2 := strconv.ParseUint(parts[1], 10, 16)
	p.base, err3 = strconv.ParseUint(parts[2], 10, 63)
	if err := errors.Join(err1, err2, err3); err != nil || p.seq < p.base {
		return p, fmt.Errorf("Last-Event-ID %q: want SEQ:K:BASE, numbers with SEQ ≥ BASE", s)
	}
	p.k = int(k)
	return p, nil
}

// stream writes an SSE response. Its headers go out with its first write.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	base    uint64
	last    position // of the latest event written
	wrote   int      // events written
	started bool
}

func newStream(w http.ResponseWriter, timeout time.Duration, base uint64) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), timeout: timeout, base: base,
		last: position{seq: base, k: -1, base: base}}
}

func (s *stream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// write sends e with the id of its position. A client that does not take
// it within the timeout is cut: the write fails.
func (s *stream) write(seq uint64, k int, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode %v: %w", e["type"], err)
	}
	p := position{seq: seq, k: k, base: s.base}
	s.last = p
	s.wrote++
	return s.send("id: " + p.String() + "\ndata: " + string(b) + "\n\n")
}

// comment keeps an idle stream open through proxies.
func (s *stream) comment() error { return s.send(": keepalive\n\n") }

func (s *stream) send(text string) error {
	s.start()
	// ErrNotSupported (a wrapped writer): the write then has no deadline.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write([]byte(text)); err != nil {
		return fmt.Errorf("write the stream: %w", err)
	}
	if err := s.rc.Flush(); err != nil {
		return fmt.Errorf("flush the stream: %w", err)
	}
	return nil
}

// done clears the write deadline, for the connection's next request.
func (s *stream) done() { _ = s.rc.SetWriteDeadline(time.Time{}) }

// writeAfter is write for a stream that resumes after cur: events at or
// before it were sent already.
func (s *stream) writeAfter(cur *position, seq uint64, k int, e Event) error {
	if cur != nil && (seq < cur.seq || seq == cur.seq && k <= cur.k) {
		return nil
	}
	return s.write(seq, k, e)
}

// pump maps the session's events onto s until the stream ends: RUN_FINISHED
// or RUN_ERROR (nil), the client gone or too slow, or /ws closed (an
// error; the client resumes with the last id it has). Events at or
// before cur are mapped but not sent again. first, when not nil, is a
// frame read already, handled before the others.
func (h *Handler) pump(ctx context.Context, c *conn, m *mapper, s *stream, cur *position, first *frame) error {
	tick := time.NewTicker(h.opts.Heartbeat)
	defer tick.Stop()
	if first != nil {
		for k, e := range m.event(*first) {
			if err := s.writeAfter(cur, first.Seq, k, e); err != nil {
				return err
			}
		}
		if m.done {
			return nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := s.comment(); err != nil {
				return err
			}
		case f, ok := <-c.frames:
			if !ok {
				return fmt.Errorf("/ws closed: %w", c.err)
			}
			switch {
			case f.Seq > 0 && wsproto.Sequenced(f.Event):
				for k, e := range m.event(f) {
					if err := s.writeAfter(cur, f.Seq, k, e); err != nil {
						return err
					}
				}
				if m.done {
					return nil
				}
			case f.Event == wsproto.EventError:
				// An answer to this stream's command (busy, an answer
				// that lost): the run goes on, this stream ends.
				var e wsproto.Error
				json.Unmarshal(f.Metadata, &e)
				return s.write(s.last.seq, s.last.k+1, m.failed(e.Message, e.Code))
			}
		}
	}
}

// opening writes a stream's first events: RUN_STARTED (unless the client
// has it), STATE_SNAPSHOT, and when confirmations wait for an answer the
// RUN_FINISHED interrupt that ends the stream at once (it reports true).
func (s *stream) opening(m *mapper, runStarted bool, view View, pending []wsproto.UserConfirm) (bool, error) {
	if runStarted {
		if err := s.write(s.base, 0, Event{"type": "RUN_STARTED", "threadId": m.threadID, "runId": m.runID}); err != nil {
			return false, err
		}
	}
	if err := s.write(s.base, 1, Event{"type": "STATE_SNAPSHOT", "snapshot": view}); err != nil {
		return false, err
	}
	if len(pending) == 0 {
		return false, nil
	}
	ins := make([]any, 0, len(pending))
	for i := range pending {
		meta, _ := json.Marshal(pending[i])
		ins = append(ins, interruptOf(frame{Metadata: meta}, &pending[i]))
	}
	return true, s.write(s.base, 2, m.finished(Event{"type": "interrupt", "interrupts": ins}, nil))
}
