package edge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// serve runs an http.Server with h on a Listener with opts, on loopback,
// until the test ends.
func serve(t *testing.T, h http.Handler, opts ListenOptions) (*Listener, string) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	l := Listen(inner, &opts)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { srv.Serve(l); close(served) }()
	t.Cleanup(func() {
		srv.Close() // closes l, and every connection it served
		<-served
	})
	return l, l.Addr().String()
}

// rawConn is a client connection the test writes and reads itself.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

// dialFrom connects to addr from the local IP from ("" for any).
func dialFrom(t *testing.T, addr, from string) *rawConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends a GET of path and returns the response's status and
// Retry-After; the body is read, and the connection kept alive when
// the server keeps it.
func (c *rawConn) get(t *testing.T, path string) (status int, retryAfter string) {
	t.Helper()
	status, retryAfter, err := c.tryGet(path)
	if err != nil {
		t.Fatal(err)
	}
	return status, retryAfter
}

// tryGet is get, returning what fails.
func (c *rawConn) tryGet(path string) (status int, retryAfter string, err error) {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return 0, "", fmt.Errorf("write: %w", err)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, "", fmt.Errorf("read: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// TestListenerLimits: connections beyond the limits are answered 429 (per
// address) or 503 (in total) with a Retry-After and closed, before any
// server reads them; those within are served; an address's neighbour is
// counted apart; a place given back is taken again.
func TestListenerLimits(t *testing.T) {
	tests := []struct {
		name   string
		opts   ListenOptions
		from   []string // the local address of each connection held open
		next   string   // the local address of the one more
		status int      // what the one more gets
	}{
		{"per address", ListenOptions{MaxConnsPerIP: 2}, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.1", http.StatusTooManyRequests},
		{"per address, a neighbour", ListenOptions{MaxConnsPerIP: 2}, []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.2", http.StatusOK},
		{"in total", ListenOptions{MaxConns: 3}, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}, "127.0.0.4", http.StatusServiceUnavailable},
		{"per address before in total", ListenOptions{MaxConnsPerIP: 1, MaxConns: 1}, []string{"127.0.0.1"}, "127.0.0.1", http.StatusTooManyRequests},
		{"under both", ListenOptions{MaxConnsPerIP: 2, MaxConns: 3}, []string{"127.0.0.1", "127.0.0.2"}, "127.0.0.1", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, addr := serve(t, okHandler, tt.opts)
			var held []*rawConn
			for _, from := range tt.from {
				c := dialFrom(t, addr, from)
				if st, _ := c.get(t, "/"); st != http.StatusOK {
					t.Fatalf("connection within the limits: %d", st)
				}
				held = append(held, c)
			}
			if n := l.Open(); n != len(held) {
				t.Fatalf("Open() = %d, want %d", n, len(held))
			}
			c := dialFrom(t, addr, tt.next)
			st, retry := c.get(t, "/")
			if st != tt.status {
				t.Fatalf("one more: %d, want %d", st, tt.status)
			}
			if st == http.StatusOK {
				return
			}
			if retry != "5" {
				t.Fatalf("Retry-After %q, want 5", retry)
			}
			if _, err := c.br.ReadByte(); err != io.EOF {
				t.Fatalf("after the refusal: %v, want the connection closed", err)
			}
			c.Close() // as a client does after Connection: close
			// The place of a connection closed is taken again.
			held[0].Close()
			deadline := time.Now().Add(5 * time.Second)
			for {
				c := dialFrom(t, addr, tt.next)
				st, _, err := c.tryGet("/")
				if st == http.StatusOK {
					break
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Fatalf("the place of a closed connection is still taken: %d %v", st, err)
				}
			}
		})
	}
}

// TestListenerHijackedCountsOnce: a WebSocket is the connection it was
// upgraded on: it counts once while open, not again for its upgrade,
// and its place is given back once when it closes.
func TestListenerHijackedCountsOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan struct{}, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer func() { closed <- struct{}{} }()
		defer ws.CloseNow()
		for {
			if _, _, err := ws.Read(r.Context()); err != nil {
				return
			}
		}
	})
	l, addr := serve(t, h, ListenOptions{MaxConnsPerIP: 1})
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := l.Open(); n != 1 {
		t.Fatalf("Open() = %d with one WebSocket, want 1", n)
	}
	_, resp, err := websocket.Dial(ctx, "ws://"+addr+"/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second WebSocket: %v %v, want 429", resp, err)
	}
	ws.Close(websocket.StatusNormalClosure, "")
	<-closed // after the handler's CloseNow, which closed the socket
	if n := l.Open(); n != 0 {
		t.Fatalf("Open() = %d after the WebSocket closed, want 0", n)
	}
	ws, _, err = websocket.Dial(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	ws.CloseNow()
}

// TestRefusedHeldBriefly: a refused client that neither reads nor closes
// is closed after RefuseTimeout; past MaxRefusing such clients, more are
// closed at once, without an answer; Close ends those still held.
func TestRefusedHeldBriefly(t *testing.T) {
	const timeout = 300 * time.Millisecond
	l, addr := serve(t, okHandler, ListenOptions{MaxConns: 1, RefuseTimeout: timeout, MaxRefusing: 2})
	first := dialFrom(t, addr, "")
	if st, _ := first.get(t, "/"); st != http.StatusOK {
		t.Fatal(st)
	}
	began := time.Now()
	for range 2 { // answered, then held until the timeout: they never close
		c := dialFrom(t, addr, "")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if b, err := io.ReadAll(c); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 503 Service Unavailable\r\n") {
			t.Fatalf("refused: %q %v", b, err)
		}
	}
	// Beyond MaxRefusing a connection is closed without an answer, until
	// the silent ones' timeout frees their places.
	answered := func() bool {
		c := dialFrom(t, addr, "")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		b, _ := io.ReadAll(c) // unanswered, its request unread: reset, or closed
		c.Close()
		return len(b) > 0
	}
	if answered() && time.Since(began) < timeout {
		t.Fatal("a refusal beyond MaxRefusing was answered")
	}
	for !answered() {
		if time.Since(began) > timeout+5*time.Second {
			t.Fatalf("the silent refused clients still held after %v (RefuseTimeout %v)", time.Since(began), timeout)
		}
	}
	if took := time.Since(began); took < timeout {
		t.Fatalf("a silent refused client was let go after %v, before RefuseTimeout %v", took, timeout)
	}
	var held *rawConn
	for held == nil { // a place of the refusals answered: the last silent one, or the last answered, may still hold one
		c := dialFrom(t, addr, "")
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		line, err := c.br.ReadString('\n')
		switch {
		case err == nil && strings.Contains(line, "503"):
			held = c
		case err == nil || isTimeout(err):
			t.Fatalf("refused: %q %v", line, err)
		case time.Since(began) > timeout+5*time.Second:
			t.Fatalf("no refusal answered: %v", err)
		}
	}
	mute := dialFrom(t, addr, "") // sends no request: closed unanswered at the timeout
	mute.SetDeadline(time.Now().Add(5 * time.Second))
	l.Close() // before its timeout: Close ends it, and the mute one
	if b, err := io.ReadAll(mute); len(b) != 0 || isTimeout(err) {
		t.Fatalf("a refused client that sent nothing: %q %v, want it closed unanswered", b, err)
	}
	if _, err := io.ReadAll(held.br); err != nil {
		t.Fatalf("after Close: %v", err)
	}
}

func TestRefusal(t *testing.T) {
	tests := []struct {
		name   string
		status int
		retry  time.Duration
		want   string
	}{
		{"per address", 429, 5 * time.Second, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\n"},
		{"in total", 503, 30 * time.Second, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 30\r\n"},
		{"under a second rounds up", 503, time.Millisecond, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := refusal(tt.status, tt.retry)
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(b))), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if !strings.HasPrefix(string(b), tt.want) || !resp.Close || string(body) != refusalBody[tt.status] {
				t.Fatalf("refusal %q", b)
			}
		})
	}
}

func TestAddrKey(t *testing.T) {
	tests := []struct {
		name, host, want string
	}{
		{"IPv4 is its own key", "192.0.2.7", "192.0.2.7"},
		{"IPv4 neighbours differ", "192.0.2.8", "192.0.2.8"},
		{"IPv6 is its /64", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"the same /64", "2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"the next /64", "2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"IPv4-mapped IPv6 is IPv4", "::ffff:192.0.2.7", "192.0.2.7"},
		{"loopback", "::1", "::/64"},
		{"the zone is dropped", "fe80::1%eth0", "fe80::/64"},
		{"not an address", "pipe", "pipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AddrKey(tt.host); got != tt.want {
				t.Errorf("AddrKey(%q) = %q, want %q", tt.host, got, tt.want)
			}
		})
	}
	mapped := &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}
	if got := addrKeyOf(mapped); got != "192.0.2.7" {
		t.Errorf("addrKeyOf(%v) = %q", mapped, got)
	}
}

func TestConnsForFileLimit(t *testing.T) {
	tests := []struct {
		name  string
		limit uint64
		want  int
	}{
		{"unknown: no cap", 0, 0},
		{"a small limit keeps half", 64, 25},
		{"at least 64 kept", 200, 108},
		{"the usual 1024 keeps an eighth", 1024, 716},
		{"a large limit", 1 << 20, 734003},
		{"unlimited", ^uint64(0), 751619276},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ConnsForFileLimit(tt.limit); got != tt.want {
				t.Errorf("ConnsForFileLimit(%d) = %d, want %d", tt.limit, got, tt.want)
			}
		})
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
