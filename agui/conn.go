package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

// conn is one connection to the orchestrator's /ws, made for one request.
// Its reader goroutine hands the frames over on a channel; Close stops it
// and waits for it.
type conn struct {
	ws     *websocket.Conn
	frames chan frame
	// err is set before frames is closed: why reading stopped.
	err    error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// readLimit bounds a frame from /ws, as the Go client does.
const readLimit = 1 << 24

// dialError is a refused upgrade: the orchestrator's status and message,
// passed on to the client (401, 429, 503 …).
type dialError struct {
	status int
	msg    string
}

func (e *dialError) Error() string {
	return fmt.Sprintf("/ws refused the connection: %d %s", e.status, e.msg)
}

// forwarded are the headers of the client's request /ws sees: its
// credential, and what says where it comes from behind a proxy. Origin is
// not among them: this package checks it itself (originOK).
var forwarded = []string{"Authorization", "User-Agent", "X-Forwarded-For", "X-Real-Ip", "Forwarded"}

// dial connects to /ws as the client of r.
func (h *Handler) dial(ctx context.Context, r *http.Request) (*conn, error) {
	hdr := http.Header{}
	for _, k := range forwarded {
		if v := r.Header.Values(k); len(v) > 0 {
			hdr[k] = v
		}
	}
	ws, resp, err := h.ws.Dial(ctx, h.opts.WSPath, r.RemoteAddr, hdr)
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, &dialError{status: resp.StatusCode, msg: http.StatusText(resp.StatusCode)}
		}
		return nil, fmt.Errorf("dial /ws: %w", err)
	}
	ws.SetReadLimit(readLimit)
	rctx, cancel := context.WithCancel(ctx)
	c := &conn{ws: ws, frames: make(chan frame, 64), cancel: cancel}
	c.wg.Add(1)
	go c.read(rctx)
	return c, nil
}

func (c *conn) read(ctx context.Context) {
	defer c.wg.Done()
	defer close(c.frames)
	for {
		_, data, err := c.ws.Read(ctx)
		if err != nil {
			c.err = err
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.err = fmt.Errorf("decode a frame of /ws: %w", err)
			return
		}
		select {
		case c.frames <- f:
		case <-ctx.Done():
			c.err = ctx.Err()
			return
		}
	}
}

// Close closes the connection and waits for its reader.
func (c *conn) Close() {
	c.cancel()
	c.ws.CloseNow()
	c.wg.Wait()
}

// next returns the next frame, or an error once the connection is gone.
func (c *conn) next(ctx context.Context) (frame, error) {
	select {
	case f, ok := <-c.frames:
		if !ok {
			return frame{}, fmt.Errorf("/ws closed: %w", c.err)
		}
		return f, nil
	case <-ctx.Done():
		return frame{}, ctx.Err()
	}
}

// send writes a client frame.
func (c *conn) send(ctx context.Context, event string, stepID string, content string, meta any) error {
	f := map[string]any{"event": event}
	if stepID != "" {
		f["step_id"] = stepID
	}
	if content != "" {
		f["content"] = content
	}
	if meta != nil {
		f["metadata"] = meta
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write to /ws: %w", err)
	}
	return nil
}

// errSessionGone is a follow the orchestrator refused: the session is
// gone (or was never this subject's; the two are not told apart).
var errSessionGone = errors.New("the thread's session is gone")

// hello reads the fresh session's system.connected.
func (c *conn) hello(ctx context.Context) (wsproto.Connected, error) {
	var hi wsproto.Connected
	f, err := c.next(ctx)
	if err != nil {
		return hi, err
	}
	if f.Event != wsproto.EventConnected {
		return hi, fmt.Errorf("/ws opened with %s, not system.connected", f.Event)
	}
	return hi, json.Unmarshal(f.Metadata, &hi)
}

// follow attaches the connection to rec's session beside its others
// (§3.6), from lastSeq. With resync set the answer is a snapshot whatever
// the ring holds (a checksum no seq has): the state now, then live
// events. It returns the answer's system.connected, and its snapshot when
// it is a resync.
func (c *conn) follow(ctx context.Context, rec record, lastSeq uint64, resync bool) (wsproto.Connected, *wsproto.Snapshot, error) {
	var hi wsproto.Connected
	meta := map[string]any{"session_id": rec.SessionID, "resume_token": rec.FollowToken, "last_seq": lastSeq, "follow": true}
	if resync {
		meta["state_checksum"] = "resync"
	}
	if err := c.send(ctx, wsproto.EventUserReconnect, "", "", meta); err != nil {
		return hi, nil, err
	}
	for {
		f, err := c.next(ctx)
		if err != nil {
			return hi, nil, err
		}
		switch f.Event {
		case wsproto.EventError:
			var e wsproto.Error
			json.Unmarshal(f.Metadata, &e)
			if e.Code == wsproto.CodeResumeRejected {
				return hi, nil, errSessionGone
			}
			return hi, nil, &streamError{code: e.Code, msg: e.Message}
		case wsproto.EventConnected:
			if err := json.Unmarshal(f.Metadata, &hi); err != nil {
				return hi, nil, fmt.Errorf("decode system.connected: %w", err)
			}
			if !hi.Resync {
				return hi, nil, nil
			}
		case wsproto.EventStateSnapshot:
			var s wsproto.Snapshot
			if err := json.Unmarshal(f.Metadata, &s); err != nil {
				return hi, nil, fmt.Errorf("decode system.state_snapshot: %w", err)
			}
			return hi, &s, nil
		}
	}
}

// streamError is a system.error of /ws.
type streamError struct{ code, msg string }

func (e *streamError) Error() string { return e.code + ": " + e.msg }
