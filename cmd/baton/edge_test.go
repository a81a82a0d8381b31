package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/edge"
	"github.com/baton-run/baton/internal/wstest"
)

// The HTTP edge's attacks, through the real server: slow bodies, idle
// keep-alive connections and rebound Hosts (package edge; docs/security.md
// §7).

// hostOf is base's host:port.
func hostOf(base string) string { return strings.TrimPrefix(base, "http://") }

// attackConns is how many connections an attack opens at once: 2,000,
// unless the test process's file limit (which its clients share with the
// server) or the cap the server derives from it allow fewer.
func attackConns(t *testing.T) int {
	limit := edge.FileLimit()
	n := min(2000, (int(limit)-300)/2, edge.ConnsForFileLimit(limit)-50)
	if n < 2000 {
		t.Logf("the file limit (%d) allows %d connections, not 2,000", limit, n)
	}
	if n < 100 {
		t.Skipf("the file limit (%d) is too low for the attack", limit)
	}
	return n
}

// slowBody is a POST /agui declaring a 1 MB body of which it sends one
// byte at a time (trickle).
type slowBody struct {
	c      net.Conn
	dialed time.Time
	closed chan time.Time // when the server closed it (its read ended)
	status string         // the status line the server answered with, if any
}

func openSlowBody(t *testing.T, addr string) *slowBody {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := &slowBody{c: c, dialed: time.Now(), closed: make(chan time.Time, 1)}
	fmt.Fprintf(c, "POST /agui HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{", addr)
	return s
}

// watch reads what the server sends until it closes the connection.
func (s *slowBody) watch(wg *sync.WaitGroup) {
	defer wg.Done()
	s.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(s.c)
	line, _ := br.ReadString('\n')
	s.status = strings.TrimSpace(line)
	io.Copy(io.Discard, br)
	s.closed <- time.Now()
}

// trickle writes a byte to each of conns every interval until stop.
func trickle(conns []*slowBody, every time.Duration, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for _, s := range conns {
			s.c.SetWriteDeadline(time.Now().Add(time.Second))
			s.c.Write([]byte(" "))
		}
	}
}

// refusedStatus sends a POST /agui's head on a new connection and returns
// the status line answered at once.
func refusedStatus(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "POST /agui HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000000\r\n\r\n{", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Retry-After")), nil
}

// TestSlowBodiesBounded: slow bodies — POST /agui declaring 1 MB and
// trickling a byte at a time — are closed once --body-timeout passes, and
// from one address no more than --max-conns-per-ip are held: the others,
// and a WebSocket upgrade, are refused with 429 at once.
func TestSlowBodiesBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		bound   time.Duration
		perIP   int // connections per address (0: no limit)
		refused int // connections tried while the slow ones are held: each refused
	}{
		{"beyond the address's limit", 3 * time.Second, 50, 1950},
		{"2,000 at once", 300 * time.Millisecond, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := tt.perIP
			if n == 0 {
				n = attackConns(t)
			}
			base := startServer(t, "--body-timeout", tt.bound.String(), "--max-conns-per-ip", fmt.Sprint(tt.perIP))
			addr := hostOf(base)
			began := time.Now()
			var slow []*slowBody
			for range n {
				slow = append(slow, openSlowBody(t, addr))
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			wg.Add(1 + len(slow))
			go trickle(slow, tt.bound/3, stop, &wg)
			for _, s := range slow {
				go s.watch(&wg)
			}
			defer func() { close(stop); wg.Wait() }()

			if tt.refused > 0 {
				// The held connections were accepted first (the kernel's
				// backlog is in order), so every other one is refused
				// while they are held, the WebSocket too.
				sem := make(chan struct{}, 32)
				errs := make(chan error, tt.refused)
				var unanswered atomic.Int64
				var rwg sync.WaitGroup
				for range tt.refused {
					sem <- struct{}{}
					rwg.Add(1)
					go func() {
						defer rwg.Done()
						defer func() { <-sem }()
						st, err := refusedStatus(addr)
						switch {
						case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
							unanswered.Add(1) // closed unanswered: past the refusals the server answers at once
						case err == nil && st != "429 5":
							errs <- fmt.Errorf("answered %q, want 429 with Retry-After 5", st)
						case err != nil:
							errs <- err
						}
					}()
				}
				rwg.Wait()
				close(errs)
				for err := range errs {
					t.Fatalf("a connection beyond the %d held: %v", n, err)
				}
				t.Logf("%d refused with 429, %d closed unanswered", tt.refused-int(unanswered.Load()), unanswered.Load())
				var resp *http.Response
				eventually(t, "an answer to a WebSocket upgrade", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					var ws *websocket.Conn
					var err error
					ws, resp, err = websocket.Dial(ctx, wsURL(base), nil)
					if err == nil {
						ws.CloseNow()
						t.Fatal("a WebSocket from the address was upgraded")
					}
					return resp != nil
				})
				if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" {
					t.Fatalf("the WebSocket: %d, want 429 with Retry-After 5", resp.StatusCode)
				}
				if time.Since(began) > tt.bound {
					t.Fatalf("the refusals took %v, past the body bound: the test proves nothing", time.Since(began))
				}
			}
			var last time.Duration
			for _, s := range slow {
				select {
				case at := <-s.closed:
					took := at.Sub(s.dialed)
					if took < tt.bound-50*time.Millisecond {
						t.Fatalf("a slow body closed after %v, before the bound %v", took, tt.bound)
					}
					last = max(last, took)
				case <-time.After(tt.bound + 10*time.Second):
					t.Fatalf("a slow body still open %v after it began (bound %v)", time.Since(s.dialed), tt.bound)
				}
				if s.status != "" && !strings.HasPrefix(s.status, "HTTP/1.1 4") {
					t.Fatalf("a slow body answered %q", s.status)
				}
			}
			// A connection's bound runs from its accept, and the last of
			// 2,000 is accepted a while after its dial; net/http then
			// keeps it half a second after its answer. Unbounded, they
			// would trickle on until the test's end.
			t.Logf("%d slow bodies closed, the last %v after it began (bound %v)", len(slow), last, tt.bound)
			if tt.perIP > 0 { // their places are free again
				// (net/http holds a connection whose body it left unread
				// for half a second after its FIN: eventually.)
				eventually(t, "a WebSocket once the slow bodies closed", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					ws, _, err := websocket.Dial(ctx, wsURL(base), nil)
					if err != nil {
						return false
					}
					ws.CloseNow()
					return true
				})
			}
		})
	}
}

// TestIdleConnsClosed: 2,000 keep-alive connections left idle after one
// GET /healthz are closed once --idle-timeout passes, not before.
func TestIdleConnsClosed(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	n := attackConns(t)
	base := startServer(t, "--idle-timeout", idle.String(), "--max-conns-per-ip", "0")
	addr := hostOf(base)
	type idler struct {
		sent     time.Time
		answered time.Time
		closed   time.Time
		err      error
	}
	idlers := make([]idler, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range idlers {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sem <- struct{}{}
		wg.Add(1)
		go func(d *idler) {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			d.sent = time.Now()
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			<-sem
			if err != nil {
				d.err = err
				return
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK || resp.Close {
				d.err = fmt.Errorf("healthz: %d, close %v: want 200 kept alive", resp.StatusCode, resp.Close)
				return
			}
			d.answered = time.Now()
			_, d.err = br.ReadByte() // the server's close
			d.closed = time.Now()
		}(&idlers[i])
	}
	wg.Wait()
	var last time.Duration
	for _, d := range idlers {
		if d.err != io.EOF {
			t.Fatalf("an idle connection ended with %v, want the server's close (EOF)", d.err)
		}
		// The idle time starts once the server has written the answer:
		// after the request was sent, before the answer was read.
		if early := d.closed.Sub(d.sent); early < idle {
			t.Fatalf("an idle connection closed %v after its request, before the bound %v", early, idle)
		}
		took := d.closed.Sub(d.answered)
		if took > idle+10*time.Second {
			t.Fatalf("an idle connection closed %v after its answer, want about %v", took, idle)
		}
		last = max(last, took)
	}
	t.Logf("%d idle connections closed, the last %v after its answer (bound %v)", n, last, idle)
}

// TestStreamsOutliveBounds: an SSE stream (POST /agui), a WebSocket on
// /ws and one of the myagent dialect live well past --body-timeout and
// --idle-timeout: the stream runs to its end, and the WebSockets, quiet
// for longer than both, still work.
func TestStreamsOutliveBounds(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	base := startServer(t, "--body-timeout", bound.String(), "--idle-timeout", bound.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _ := connect(t, base)
	ma := dialMA(t, maURL(base, ""))

	began := time.Now()
	evs := post(t, ctx, base, aguiInput(newThread(), "r1", "Slowly [sim:sleep=1500ms]", "chat"), nil)
	if last := lastOf(t, evs); last.typ() != "RUN_FINISHED" {
		t.Fatalf("the stream ended with %s", last.typ())
	}
	if took := time.Since(began); took < 4*bound {
		t.Fatalf("the stream lasted %v: not past the bounds (%v), the test proves nothing", took, bound)
	}
	// Quiet past both bounds: the time passing is what is tested.
	<-time.After(4 * bound)
	ws.send("user.message", nil)
	ws.sendFrame(map[string]any{"event": "user.message", "content": "Still there?", "metadata": map[string]any{"mode": "chat"}})
	ws.until("agent.final_answer")
	ma.create()
}

// TestEveryConnectionCountsOnce: --max-conns-per-ip counts connections,
// whatever they carry: with a limit of 1, one WebSocket on /ws, one of
// the myagent dialect and one AG-UI stream each work alone (the dialect's
// and AG-UI's own connections to /ws, in process, are not counted again),
// and while one is open a plain GET from the address is refused with 429.
func TestEveryConnectionCountsOnce(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--max-conns-per-ip", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refusedGet := func(t *testing.T) {
		t.Helper()
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "5" {
			t.Fatalf("a GET beside the open connection: %d, want 429 with Retry-After 5", resp.StatusCode)
		}
	}
	// admitted retries open until it is not refused with 429: the place
	// of the connection a subtest closed is given back once the server
	// has closed its end.
	admitted := func(t *testing.T, what string, open func() (int, error)) {
		t.Helper()
		var st int
		var err error
		eventually(t, what+" to be admitted", func() bool {
			st, err = open()
			return st != http.StatusTooManyRequests
		})
		if err != nil {
			t.Fatalf("%s: %d %v", what, st, err)
		}
	}
	t.Run("a WebSocket on /ws", func(t *testing.T) {
		var c *conn
		admitted(t, "a WebSocket", func() (int, error) {
			w, resp, err := wstest.TryDial(t, wsURL(base), connOptions(nil))
			if err != nil {
				return statusOf(resp), err
			}
			c = newConn(t, w)
			return http.StatusSwitchingProtocols, nil
		})
		c.expect("system.connected")
		refusedGet(t)
		c.ws.Close(websocket.StatusNormalClosure, "")
	})
	t.Run("the myagent dialect", func(t *testing.T) {
		var c *maConn
		admitted(t, "a myagent WebSocket", func() (int, error) {
			var resp *http.Response
			var err error
			c, resp, err = tryDialMA(t, maURL(base, ""))
			if err != nil {
				return statusOf(resp), err
			}
			return http.StatusSwitchingProtocols, nil
		})
		c.next() // system.connected
		c.create()
		refusedGet(t)
		c.ws.Close(websocket.StatusNormalClosure, "")
	})
	t.Run("an AG-UI stream", func(t *testing.T) {
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		var resp *http.Response
		admitted(t, "an AG-UI POST", func() (int, error) {
			b := strings.NewReader(fmt.Sprintf(`{"threadId":%q,"runId":"r1","messages":[{"id":"m1","role":"user","content":"Hi [sim:sleep=300ms]"}],"forwardedProps":{"mode":"chat"}}`, newThread()))
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/agui", b)
			req.Header.Set("Content-Type", "application/json")
			var err error
			resp, err = (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				return 0, err
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				resp.Body.Close()
			}
			return resp.StatusCode, nil
		})
		refusedGet(t) // while the stream is open
		if last := lastOf(t, readSSE(t, resp, 0)); last.typ() != "RUN_FINISHED" {
			t.Fatalf("the stream ended with %s", last.typ())
		}
	})
}

// statusOf is a refused dial's status, 0 when there was no response.
func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// hostRequest is one request of TestReboundHost: its method and path, and
// whether it asks for a WebSocket upgrade.
type hostRequest struct {
	name, method, path string
	upgrade            bool
}

// hostRequests are Baton's surface: /ws, the UI and the myagent dialect on
// /, --myagent-path, AG-UI, and the health and metrics endpoints.
var hostRequests = []hostRequest{
	{"/ws", "GET", "/ws", true},
	{"the UI", "GET", "/", false},
	{"myagent on /", "GET", "/", true},
	{"--myagent-path", "GET", "/myagent", true},
	{"AG-UI", "POST", "/agui", false},
	{"metrics", "GET", "/metrics", false},
	{"liveness", "GET", "/healthz", false},
	{"readiness", "GET", "/readyz", false},
}

// sendAs makes hr to base with Host and Origin both host (a rebound page's
// request), with header, and returns the status.
func sendAs(t *testing.T, base, host string, hr hostRequest, header http.Header) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{"Origin": {"http://" + host}}
	for k, v := range header {
		h[k] = v
	}
	if hr.upgrade {
		ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+hr.path, &websocket.DialOptions{Host: host, HTTPHeader: h})
		if err == nil {
			ws.CloseNow()
			return http.StatusSwitchingProtocols
		}
		if resp == nil {
			t.Fatalf("%s: %v", hr.name, err)
		}
		return resp.StatusCode
	}
	var body io.Reader
	if hr.method == "POST" {
		body = strings.NewReader(fmt.Sprintf(`{"threadId":%q,"runId":"r1","messages":[{"id":"m1","role":"user","content":"Hi"}],"forwardedProps":{"mode":"chat"}}`, newThread()))
	}
	req, _ := http.NewRequestWithContext(ctx, hr.method, base+hr.path, body)
	req.Host = host
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", hr.name, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body) // an AG-UI run to its end
	return resp.StatusCode
}

// TestReboundHost: a page on attacker.example rebound to Baton's address
// sends Host and Origin attacker.example:PORT. Without authentication it
// is refused with 421 before any upgrade, stream or run — on /ws, the UI,
// the myagent dialect, AG-UI and /metrics — with a body and a log line
// naming --allowed-hosts; /healthz and /readyz answer. --allowed-hosts
// naming it (or --allowed-origins) lets it in; loopback names and IP
// literals always are. With authentication on, the check is off unless
// --allowed-hosts is set: the rebound page has no token, and gets 401.
func TestReboundHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []string
		host   string // with the server's port appended
		header http.Header
		status func(hostRequest) int
	}{
		{"rebound", nil, "attacker.example", nil, func(hr hostRequest) int {
			if hr.path == "/healthz" || hr.path == "/readyz" {
				return http.StatusOK
			}
			return http.StatusMisdirectedRequest
		}},
		{"rebound, allowed", []string{"--allowed-hosts", "*.example"}, "attacker.example", nil, served},
		{"rebound, its origin allowed", []string{"--allowed-origins", "attacker.example:3000"}, "attacker.example", nil, served},
		{"localhost", nil, "localhost", nil, served},
		{"a name under localhost", nil, "app.localhost", nil, served},
		{"IPv4 loopback", nil, "127.0.0.1", nil, served},
		{"IPv6 loopback", nil, "[::1]", nil, served},
		{"an IP literal", nil, "192.0.2.7", nil, served},
		{"rebound, authentication on", []string{"--auth-tokens", "alice=tok-alice-0123456789"}, "attacker.example", nil, func(hr hostRequest) int {
			if hr.upgrade || hr.method == "POST" {
				return http.StatusUnauthorized // no token: the page has none
			}
			return http.StatusOK
		}},
		{"rebound, authentication on, with a token", []string{"--auth-tokens", "alice=tok-alice-0123456789"}, "attacker.example",
			http.Header{"Authorization": {"Bearer tok-alice-0123456789"}}, served},
		{"rebound, authentication on and --allowed-hosts", []string{"--auth-tokens", "alice=tok-alice-0123456789", "--allowed-hosts", "baton.example.com"},
			"attacker.example", http.Header{"Authorization": {"Bearer tok-alice-0123456789"}}, func(hr hostRequest) int {
				if hr.path == "/healthz" || hr.path == "/readyz" {
					return http.StatusOK
				}
				return http.StatusMisdirectedRequest
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs := &logSink{}
			base := startServerLogging(t, logs, append([]string{"--myagent-path", "/myagent"}, tt.args...)...)
			_, port, _ := net.SplitHostPort(hostOf(base))
			host := net.JoinHostPort(strings.Trim(tt.host, "[]"), port)
			for _, hr := range hostRequests {
				if got, want := sendAs(t, base, host, hr, tt.header), tt.status(hr); got != want {
					t.Errorf("%s with Host %s: %d, want %d", hr.name, host, got, want)
				}
			}
			if tt.status(hostRequests[0]) != http.StatusMisdirectedRequest {
				return
			}
			rec := logs.find(t, "request refused: its Host is not a name this server answers for (DNS rebinding?)", map[string]any{"host": host, "level": "WARN"})
			if rec == nil || !strings.Contains(fmt.Sprint(rec["advice"]), "--allowed-hosts attacker.example") {
				t.Fatalf("no Warn line naming the host and --allowed-hosts: %v", rec)
			}
			if n := strings.Count(logs.String(), `"level":"WARN","msg":"request refused: its Host`); n != 1 {
				t.Fatalf("%d Warn lines for one host refused %d times, want 1", n, len(hostRequests)-2)
			}
		})
	}
}

// served is what Baton answers each of hostRequests from a Host it serves
// without authentication.
func served(hr hostRequest) int {
	if hr.upgrade {
		return http.StatusSwitchingProtocols
	}
	return http.StatusOK
}
