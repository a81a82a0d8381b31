// Package wstest is a raw test connection to a Baton WebSocket: the frames
// exactly as the server sends them, with the envelope's invariants checked
// on every frame read (a text frame; metadata present and not null; an
// event id, a timestamp and a session id; a seq exactly on the sequenced
// events, wsproto.Sequenced). A test writes the frames it means to send —
// any fields, any order, invalid ones too — and reads one frame at a time:
// nothing is acknowledged, resumed or answered for it, unlike the client
// package, which is a well-behaved client and hides the wire.
//
// It knows the wire protocol (wsproto) and the frame's shape
// (client.Frame), and nothing of any server: the tests of orchestrator,
// web and cmd/baton dial their own servers with it. What only one suite
// checks (cmd/baton records every resume token handed out) it hooks in
// through Options.
package wstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// Options configures a Conn. A nil *Options means the defaults; the
// caller's struct is never modified.
type Options struct {
	// HTTPHeader is sent with the handshake (Authorization, Origin, a test
	// server's own headers). Defaults to none.
	HTTPHeader http.Header
	// Subprotocols are offered in the handshake. Defaults to none.
	Subprotocols []string
	// HTTPClient makes the handshake's request; a test that needs a socket
	// option (a tiny receive buffer for a client that never reads) gives
	// one whose transport dials it. Defaults to http.DefaultClient.
	HTTPClient *http.Client
	// Timeout bounds the handshake, each write, and each read of Next and
	// of the methods built on it (Expect, Until, CloseCode...). Defaults
	// to 10 s.
	Timeout time.Duration
	// ReadLimit is the largest frame read, in bytes. Defaults to 16 MiB.
	ReadLimit int64
	// OnConnected is called with the metadata of every system.connected
	// read, on the goroutine that read it, before the frame is returned.
	// Defaults to nothing.
	OnConnected func(wsproto.Connected)
}

const (
	defaultTimeout   = 10 * time.Second
	defaultReadLimit = 1 << 24
)

// Conn is a test's connection to a Baton WebSocket. The methods that fail
// the test on an error (Send..., Next, Expect..., Until, CloseCode) must be
// called from the test's goroutine. Read and ReadRaw report errors instead,
// and one goroutine may read through them while another sends: one reader
// and one writer at a time, as coder/websocket allows.
type Conn struct {
	t    testing.TB
	ws   *websocket.Conn
	opts Options
}

// Dial opens a connection to url (ws://HOST:PORT/PATH) and fails t if it
// cannot. The connection is closed when the test ends, by a t.Cleanup:
// after the test function's defers, so a test server stopped with defer
// would wait for it (httptest.Server.Close waits for its handlers). Stop
// the server in a Cleanup registered before the dial.
func Dial(t testing.TB, url string, opts *Options) *Conn {
	t.Helper()
	c, resp, err := TryDial(t, url, opts)
	if err != nil {
		status := "no response"
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("dial %s: %v (%s)", url, err, status)
	}
	return c
}

// TryDial is Dial for a test that expects a refusal: it returns the error
// and the handshake's response (nil when none came) rather than fail t.
func TryDial(t testing.TB, url string, opts *Options) (*Conn, *http.Response, error) {
	t.Helper()
	c := &Conn{t: t}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.Timeout <= 0 {
		c.opts.Timeout = defaultTimeout
	}
	if c.opts.ReadLimit <= 0 {
		c.opts.ReadLimit = defaultReadLimit
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPHeader: c.opts.HTTPHeader, Subprotocols: c.opts.Subprotocols, HTTPClient: c.opts.HTTPClient,
	})
	if err != nil {
		return nil, resp, err
	}
	ws.SetReadLimit(c.opts.ReadLimit)
	t.Cleanup(func() { ws.CloseNow() })
	c.ws = ws
	return c, resp, nil
}

// Connect dials and reads the server's first frame, system.connected.
func Connect(t testing.TB, url string, opts *Options) (*Conn, wsproto.Connected) {
	t.Helper()
	c := Dial(t, url, opts)
	var m wsproto.Connected
	c.ExpectMeta(wsproto.EventConnected, &m)
	return c, m
}

// WS is the connection itself, for what Conn does not wrap: Close,
// CloseNow, Ping, Subprotocol, a write from another goroutine.
func (c *Conn) WS() *websocket.Conn { return c.ws }

// SendRaw writes one frame of typ as it is.
func (c *Conn) SendRaw(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	if err := c.ws.Write(ctx, typ, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// SendFrame writes v as a JSON text frame.
func (c *Conn) SendFrame(v map[string]any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.SendRaw(websocket.MessageText, b)
}

// Send writes a frame with only the fields it needs: no metadata when
// meta is nil.
func (c *Conn) Send(event string, meta any) {
	c.t.Helper()
	frame := map[string]any{"event": event}
	if meta != nil {
		frame["metadata"] = meta
	}
	c.SendFrame(frame)
}

// Message sends a user.message: a run's start, or a message to a run.
func (c *Conn) Message(text string) {
	c.t.Helper()
	c.SendFrame(map[string]any{"event": wsproto.EventUserMessage, "content": text})
}

// Respond sends a user.response to the step stepID.
func (c *Conn) Respond(stepID string, meta map[string]any) {
	c.t.Helper()
	c.SendFrame(map[string]any{"event": wsproto.EventUserResponse, "step_id": stepID, "metadata": meta})
}

// Read reads one frame and checks the envelope's invariants. An error is
// the connection's end (websocket.CloseStatus says with which code), the
// end of ctx — which closes the connection, as every cancelled read of
// coder/websocket does — or a frame that breaks an invariant, returned
// with the error as far as it decoded.
func (c *Conn) Read(ctx context.Context) (client.Frame, error) {
	f, _, err := c.read(ctx)
	return f, err
}

// ReadRaw is Read returning the frame's bytes as the server sent them,
// checked as Read checks them.
func (c *Conn) ReadRaw(ctx context.Context) ([]byte, error) {
	_, b, err := c.read(ctx)
	return b, err
}

func (c *Conn) read(ctx context.Context) (client.Frame, []byte, error) {
	typ, b, err := c.ws.Read(ctx)
	if err != nil {
		return client.Frame{}, nil, err
	}
	if typ != websocket.MessageText {
		return client.Frame{}, b, errors.New("a binary frame from the server")
	}
	f, err := Check(b)
	f.Received = time.Now()
	if err != nil {
		return f, b, err
	}
	if f.Event == wsproto.EventConnected && c.opts.OnConnected != nil {
		var m wsproto.Connected
		if err := json.Unmarshal(f.Metadata, &m); err != nil {
			return f, b, fmt.Errorf("decode system.connected: %w", err)
		}
		c.opts.OnConnected(m)
	}
	return f, b, nil
}

// Check decodes a server frame and checks the envelope's invariants: the
// checks of every frame a Conn reads, for a test that reads the wire some
// other way.
func Check(b []byte) (client.Frame, error) {
	var f client.Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return client.Frame{}, fmt.Errorf("decode %s: %w", b, err)
	}
	var env map[string]json.RawMessage
	json.Unmarshal(b, &env) // decoded once above: an object
	if meta, ok := env["metadata"]; !ok || string(meta) == "null" || f.EventID == "" || f.Timestamp.IsZero() || f.SessionID == "" {
		return f, fmt.Errorf("bad envelope: %s", b)
	}
	if _, hasSeq := env["seq"]; hasSeq != wsproto.Sequenced(f.Event) {
		return f, fmt.Errorf("seq presence wrong on %s: %s", f.Event, b)
	}
	return f, nil
}

// Next reads one frame within the Timeout and fails the test on any
// error Read reports.
func (c *Conn) Next() client.Frame {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
	defer cancel()
	f, err := c.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// Expect reads one frame, which must be event.
func (c *Conn) Expect(event string) client.Frame {
	c.t.Helper()
	f := c.Next()
	if f.Event != event {
		c.t.Fatalf("got %s %s, want %s", f.Event, f.Metadata, event)
	}
	return f
}

// ExpectMeta reads one frame, which must be event, and decodes its
// metadata into v.
func (c *Conn) ExpectMeta(event string, v any) client.Frame {
	c.t.Helper()
	f := c.Expect(event)
	if err := json.Unmarshal(f.Metadata, v); err != nil {
		c.t.Fatalf("decode %s metadata: %v", event, err)
	}
	return f
}

// ExpectError reads one frame, which must be a system.error of code.
func (c *Conn) ExpectError(code string) wsproto.Error {
	c.t.Helper()
	var e wsproto.Error
	c.ExpectMeta(wsproto.EventError, &e)
	if e.Code != code {
		c.t.Fatalf("system.error %q (%s), want %q", e.Code, e.Message, code)
	}
	return e
}

// Until reads frames until one of events, and returns every frame read,
// that one last.
func (c *Conn) Until(events ...string) []client.Frame {
	c.t.Helper()
	var out []client.Frame
	for {
		f := c.Next()
		out = append(out, f)
		for _, e := range events {
			if f.Event == e {
				return out
			}
		}
	}
}

// CloseCode reads until the connection ends, each read within the
// Timeout, and returns its close code: -1 when it ended without a close
// frame, or on a read that timed out or a frame that broke an invariant.
func (c *Conn) CloseCode() websocket.StatusCode {
	c.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		_, err := c.Read(ctx)
		cancel()
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}
