package web

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// entry is one step of a recorded session: a frame the server sent (In),
// a frame the client sent (Out), or the server's own state taken at a quiet
// moment (Snapshot: a resync's {phase, run}).
type entry struct {
	In       json.RawMessage `json:"in,omitempty"`
	Out      json.RawMessage `json:"out,omitempty"`
	Snapshot json.RawMessage `json:"snapshot,omitempty"`
}

// wireFrame is what the recorder reads of a server frame.
type wireFrame struct {
	Event    string          `json:"event"`
	Seq      uint64          `json:"seq"`
	StepID   string          `json:"step_id"`
	Metadata json.RawMessage `json:"metadata"`
}

func (f wireFrame) meta(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(f.Metadata, &m); err != nil {
		t.Fatalf("%s metadata: %v", f.Event, err)
	}
	return m
}

// recorder is a client of a real server that logs every frame it reads and
// sends, in the order a client meets them: a frame sent is logged after the
// frames read before it was sent.
type recorder struct {
	t   *testing.T
	ctx context.Context
	url string

	c      *wstest.Conn
	frames chan []byte   // from the connection's reader goroutine
	done   chan struct{} // closed when that goroutine has ended
	err    error         // why it ended; read after done

	session, token string
	lastSeq        uint64
	log            []entry
}

func newRecorder(ctx context.Context, t *testing.T, url string) *recorder {
	r := &recorder{t: t, ctx: ctx, url: url}
	r.c = wstest.Dial(t, url, nil)
	r.startReader()
	f := r.next()
	if f.Event != wsproto.EventConnected {
		t.Fatalf("first frame %s, want system.connected", f.Event)
	}
	m := f.meta(t)
	r.session, r.token = m["session_id"].(string), m["resume_token"].(string)
	t.Cleanup(r.close)
	return r
}

// startReader starts the goroutine that reads r.c, which close ends and
// waits for.
func (r *recorder) startReader() {
	frames, done, c := make(chan []byte, 4096), make(chan struct{}), r.c
	go func() {
		defer close(done)
		defer close(frames)
		for {
			b, err := c.ReadRaw(r.ctx) // the envelope checked
			if err != nil {
				r.err = err
				return
			}
			select {
			case frames <- b:
			case <-r.ctx.Done():
				return
			}
		}
	}()
	r.frames, r.done = frames, done
}

func (r *recorder) close() {
	r.c.WS().CloseNow()
	<-r.done
}

// next reads and logs the next frame.
func (r *recorder) next() wireFrame {
	r.t.Helper()
	var b []byte
	select {
	case got, ok := <-r.frames:
		if !ok {
			<-r.done
			r.t.Fatalf("the connection ended while waiting for a frame: %v", r.err)
		}
		b = got
	case <-r.ctx.Done():
		r.t.Fatalf("no frame before the deadline: %v", r.ctx.Err())
	}
	r.log = append(r.log, entry{In: b})
	var f wireFrame
	if err := json.Unmarshal(b, &f); err != nil {
		r.t.Fatalf("frame %s: %v", b, err)
	}
	if f.Seq != 0 {
		if f.Seq != r.lastSeq+1 {
			r.t.Fatalf("seq %d after %d", f.Seq, r.lastSeq)
		}
		r.lastSeq = f.Seq
	}
	return f
}

// send logs and writes a client frame.
func (r *recorder) send(frame map[string]any) {
	r.t.Helper()
	b, err := json.Marshal(frame)
	if err != nil {
		r.t.Fatal(err)
	}
	r.log = append(r.log, entry{Out: b})
	r.c.SendRaw(websocket.MessageText, b)
}

func (r *recorder) respond(stepID string, meta map[string]any) {
	r.send(map[string]any{"event": wsproto.EventUserResponse, "step_id": stepID, "metadata": meta})
}

// drive reads frames until the current run ends, handing each to react.
func (r *recorder) drive(react func(f wireFrame)) {
	r.t.Helper()
	for {
		f := r.next()
		if f.Event == wsproto.EventError {
			r.t.Fatalf("system.error: %s", f.Metadata)
		}
		react(f)
		switch f.Event {
		case wsproto.EventFinalAnswer, wsproto.EventPlanCancelled, wsproto.EventPipelineCancelled:
			return
		}
	}
}

// snapshot logs the server's own state: it leaves the connection and
// resumes on a new one with a wrong checksum, which the server answers with
// a resync. Only at a quiet moment — nothing emitted since the last frame
// read — does the snapshot describe the same point of the log; anything
// else fails the test.
func (r *recorder) snapshot() {
	r.t.Helper()
	r.close()
	for b := range r.frames {
		r.t.Fatalf("not a quiet moment: %s arrived after the last frame read", b)
	}
	r.c = wstest.Dial(r.t, r.url, nil)
	read := func() wireFrame {
		b, err := r.c.ReadRaw(r.ctx)
		if err != nil {
			r.t.Fatalf("resync: %v", err)
		}
		var f wireFrame
		if err := json.Unmarshal(b, &f); err != nil {
			r.t.Fatal(err)
		}
		return f
	}
	if f := read(); f.Event != wsproto.EventConnected {
		r.t.Fatalf("resync: first frame %s", f.Event)
	}
	r.c.Send(wsproto.EventUserReconnect, map[string]any{
		"session_id": r.session, "resume_token": r.token, "last_seq": r.lastSeq, "state_checksum": "wrong"})
	f := read()
	if f.Event != wsproto.EventConnected || !f.meta(r.t)["resync"].(bool) {
		r.t.Fatalf("resync answered %s %s", f.Event, f.Metadata)
	}
	r.token = f.meta(r.t)["resume_token"].(string) // each resume rotates it
	f = read()
	var snap struct {
		Seq     uint64          `json:"seq"`
		Phase   json.RawMessage `json:"phase"`
		Run     json.RawMessage `json:"run"`
		History json.RawMessage `json:"history"`
	}
	if f.Event != wsproto.EventStateSnapshot || json.Unmarshal(f.Metadata, &snap) != nil {
		r.t.Fatalf("resync: %s %s, want system.state_snapshot", f.Event, f.Metadata)
	}
	if snap.Seq != r.lastSeq {
		r.t.Fatalf("not a quiet moment: the snapshot is of seq %d, the last frame read was %d", snap.Seq, r.lastSeq)
	}
	b, _ := json.Marshal(map[string]json.RawMessage{"phase": snap.Phase, "run": snap.Run, "history": snap.History})
	r.log = append(r.log, entry{Snapshot: b})
	r.startReader()
}
