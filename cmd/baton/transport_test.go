package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

func TestBadFrames(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	tests := []struct {
		name    string
		typ     websocket.MessageType
		frame   string
		code    string
		refType string
	}{
		{"invalid JSON", websocket.MessageText, `{"event":`, "invalid_json", ""},
		{"invalid UTF-8", websocket.MessageText, "{\"event\":\"user.message\",\"content\":\"\xff\xfe\"}", "invalid_json", ""},
		{"deeply nested", websocket.MessageText, `{"event":"user.ack","metadata":{"x":` + deep + `}}`, "invalid_json", ""},
		{"array", websocket.MessageText, `[1,2]`, "invalid_message", ""},
		{"string", websocket.MessageText, `"hello"`, "invalid_message", ""},
		{"number", websocket.MessageText, `42`, "invalid_message", ""},
		{"null", websocket.MessageText, `null`, "invalid_message", ""},
		{"missing event", websocket.MessageText, `{"content":"hi"}`, "invalid_message", ""},
		{"empty event", websocket.MessageText, `{"event":""}`, "invalid_message", ""},
		{"event of the wrong type", websocket.MessageText, `{"event":5}`, "invalid_message", ""},
		{"metadata of the wrong type", websocket.MessageText, `{"event":"user.ack","metadata":"x"}`, "invalid_message", "user.ack"},
		{"last_seq a string", websocket.MessageText, `{"event":"user.ack","metadata":{"last_seq":"3"}}`, "invalid_message", "user.ack"},
		{"negative last_seq", websocket.MessageText, `{"event":"user.ack","metadata":{"last_seq":-1}}`, "invalid_message", "user.ack"},
		{"fractional last_seq", websocket.MessageText, `{"event":"user.ack","metadata":{"last_seq":1.5}}`, "invalid_message", "user.ack"},
		{"message without content", websocket.MessageText, `{"event":"user.message"}`, "invalid_message", "user.message"},
		{"tasks not a list", websocket.MessageText, `{"event":"user.solve_tasks","metadata":{"tasks":{"id":"a"}}}`, "invalid_message", "user.solve_tasks"},
		{"task id a number", websocket.MessageText, `{"event":"user.solve_tasks","metadata":{"tasks":[{"id":1,"title":"x"}]}}`, "invalid_message", "user.solve_tasks"},
		{"unknown event", websocket.MessageText, `{"event":"user.dance"}`, "unknown_type", "user.dance"},
		{"server event sent by a client", websocket.MessageText, `{"event":"plan.completed"}`, "unknown_type", "plan.completed"},
		{"binary frame", websocket.MessageBinary, `{"event":"user.message","content":"hi"}`, "invalid_message", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, base)
			c.sendRaw(tt.typ, []byte(tt.frame))
			if e := c.expectError(tt.code); e.RefType != tt.refType || e.Message == "" {
				t.Errorf("error %+v, want ref_type %q", e, tt.refType)
			}
			// Nothing changed: no event was emitted, and the session works.
			c.message("still working")
			if f := c.expect(wsproto.EventPlanStart); f.Seq != 1 {
				t.Errorf("first event after a bad frame has seq %d, want 1", f.Seq)
			}
		})
	}
	t.Run("unknown fields are ignored", func(t *testing.T) {
		t.Parallel()
		c, _ := connect(t, base)
		c.sendRaw(websocket.MessageText, []byte(`{"event":"user.message","content":"hi","colour":"blue","metadata":{"x":1}}`))
		c.expect(wsproto.EventPlanStart)
	})
}

func TestFrameTooBig(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	c.sendRaw(websocket.MessageText, []byte(`{"event":"user.message","content":"`+strings.Repeat("x", 70*1024)+`"}`))
	if code := c.closeCode(); code != websocket.StatusMessageTooBig {
		t.Fatalf("close code %d, want 1009", code)
	}
	r := resume(t, base, hello, 0, "")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed || m.Resync {
		t.Fatalf("resume after 1009: %+v", m)
	}
}

func TestReplaced(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	r := resume(t, base, hello, 0, "")
	r.expect(wsproto.EventConnected)
	if code := c.closeCode(); code != 4000 {
		t.Fatalf("close code %d, want 4000", code)
	}
	r.message("on the new connection")
	r.expect(wsproto.EventPlanStart)
}

// TestPongTimeout: a client that stops reading answers no ping; the server
// drops it, and its session can be resumed.
func TestPongTimeout(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--ping-interval", "20ms", "--pong-timeout", "50ms")
	c, hello := connect(t, base)
	// c never reads again, so it never answers a ping: the server must drop it.
	eventually(t, "the silent connection to be dropped", func() bool { return healthz(t, base).Connections == 0 })
	if _, err := c.read(5 * time.Second); websocket.CloseStatus(err) == 4000 {
		t.Fatalf("dropped as replaced, not for its pong: %v", err)
	}
	r := resume(t, base, hello, 0, "")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed || m.Resync {
		t.Fatalf("resume after the drop: %+v", m)
	}
}

func TestShutdownClosesWith1012(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	base := startServerCtx(t, ctx, done, io.Discard)
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{sleepTask("a", "1h")}})
	c.expect(wsproto.EventSolverStart)
	cancel()
	if code := c.closeCode(); code != websocket.StatusServiceRestart {
		t.Fatalf("close code %d, want 1012", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		origin string
		ok     bool
	}{
		{"no Origin (native client)", nil, "", true},
		{"same host", nil, "", true},
		{"foreign origin refused by default", nil, "http://evil.example", false},
		{"foreign origin allowed", []string{"--allowed-origins", "evil.example, other.example"}, "http://evil.example", true},
		{"a pattern matches case-insensitively", []string{"--allowed-origins", "App.Example"}, "https://app.example", true},
		{"a pattern without a port does not match an origin with one", []string{"--allowed-origins", "app.example"}, "http://app.example:3000", false},
		{"a port pattern matches that origin", []string{"--allowed-origins", "localhost:*"}, "http://localhost:5173", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			h := http.Header{}
			if tt.name == "same host" {
				h.Set("Origin", base)
			} else if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, wsURL(base), &websocket.DialOptions{HTTPHeader: h})
			if tt.ok {
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				ws.CloseNow()
				return
			}
			if err == nil {
				ws.CloseNow()
				t.Fatal("foreign origin accepted")
			}
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("response %v, want 403", resp)
			}
		})
	}
}

// The startup line names a URL a person can open, localhost when Baton
// listens on every interface.
func TestOpenableAddr(t *testing.T) {
	tests := []struct {
		name string
		addr *net.TCPAddr
		want string
	}{
		{"every IPv4 interface", &net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "localhost:8080"},
		{"every IPv6 interface", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "localhost:8080"},
		{"loopback", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, "127.0.0.1:9"},
		{"IPv6 loopback", &net.TCPAddr{IP: net.IPv6loopback, Port: 9}, "[::1]:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := openableAddr(tt.addr); got != tt.want {
				t.Errorf("openableAddr(%v) = %q, want %q", tt.addr, got, tt.want)
			}
		})
	}
}

// TestServesUI checks the binary's routes: the UI at /, the JS client
// beside it, and an unknown path 404 rather than the page.
func TestServesUI(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	tests := []struct {
		name, path string
		status     int
		contains   string
	}{
		{"page", "/", http.StatusOK, `data-testid="connection"`},
		{"client", "/baton-client.js", http.StatusOK, "export class BatonClient"},
		{"unknown", "/nope.js", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Get(base + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.contains) {
				t.Errorf("GET %s: %s, body %.200q; want %d with %q", tt.path, resp.Status, body, tt.status, tt.contains)
			}
		})
	}
}
