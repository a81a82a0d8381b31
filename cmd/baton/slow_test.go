package main

import (
	"context"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

// TestSlowClientClosedWith1013: a client that stops reading lets its send
// queue overflow; the server closes it with 1013 rather than wait, and the
// session resumes. The client's small receive buffer keeps the kernel from
// absorbing the backlog; the backlog is system.error replies to a flood of
// bad frames.
func TestSlowClientClosedWith1013(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--buffer-size", "16") // send queue: 16 + 64 frames
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, wsURL(base), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	c := &conn{t: t, ws: ws}
	hello := meta[wsproto.Connected](t, c.expect(wsproto.EventConnected))
	for range 5000 {
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"event":"user.dance"}`)); err != nil {
			break // closed under us: the overflow happened
		}
	}
	if code := c.closeCode(); code != websocket.StatusTryAgainLater {
		t.Fatalf("close code %d, want 1013", code)
	}
	r := resume(t, base, hello, 0, "")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed {
		t.Fatalf("resume after 1013: %+v", m)
	}
	metricsReach(t, base,
		want{"baton_send_queue_overflows_total", "", 1, true},
		want{"baton_connections_closed_total", `end="too_slow"`, 1, true})
}
