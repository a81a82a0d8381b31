package faultproxy_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for something that must happen.
const waitTimeout = 10 * time.Second

// echo is a line server: it answers each line with its name, ":" and the
// line. It is a real TCP server, closed when the test ends.
func echo(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(name + ":" + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if n := p.Conns(); n != 0 {
			t.Errorf("Conns after Close = %d, want 0", n)
		}
	})
	return p
}

// conn is a client connection through the proxy.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *faultproxy.Proxy) *conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{Conn: c, r: bufio.NewReader(c)}
}

// ask sends line and returns the answer read within d.
func (c *conn) ask(line string, d time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := c.r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func mustAsk(t *testing.T, c *conn, line, want string) {
	t.Helper()
	got, err := c.ask(line, waitTimeout)
	if err != nil || got != want {
		t.Fatalf("ask %q = %q, %v; want %q", line, got, err, want)
	}
}

// waitConns waits until p has n connections open.
func waitConns(t *testing.T, p *faultproxy.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for p.Conns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("Conns = %d, want %d", p.Conns(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cutOff checks that a new connection through p is closed at once: the
// dial itself may see the reset (on loopback the RST can come before the
// dialer reads the socket's state), or the first read does.
func cutOff(t *testing.T, p *faultproxy.Proxy, when string) {
	t.Helper()
	nc, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return
	}
	defer nc.Close()
	c := &conn{Conn: nc, r: bufio.NewReader(nc)}
	if got, err := c.ask("cut", waitTimeout); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("ask %s = %q, %v; want the connection closed at once", when, got, err)
	}
}

func TestForward(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "hi", "a:hi")
	waitConns(t, p, 1)
	c.Close()
	waitConns(t, p, 0)
}

func TestLatency(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "warm", "a:warm")
	const d = 100 * time.Millisecond
	p.SetLatency(d)
	began := time.Now()
	mustAsk(t, c, "slow", "a:slow")
	if took := time.Since(began); took < 2*d {
		t.Errorf("round trip with %v each way took %v, want at least %v", d, took, 2*d)
	}
	p.SetLatency(0)
	mustAsk(t, c, "fast", "a:fast")
}

func TestStall(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "before", "a:before")
	p.Stall()
	p.Stall() // idempotent
	if got, err := c.ask("held", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled ask = %q, %v; want a deadline", got, err)
	}
	// A new connection is accepted, and stalls too.
	c2 := dial(t, p)
	if got, err := c2.ask("new", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled ask on a new connection = %q, %v; want a deadline", got, err)
	}
	waitConns(t, p, 2)
	p.Unstall()
	p.Unstall() // idempotent
	// What was held is delivered, in order, nothing lost.
	c.SetDeadline(time.Now().Add(waitTimeout))
	if got, err := c.r.ReadString('\n'); err != nil || got != "a:held\n" {
		t.Fatalf("after Unstall read %q, %v; want a:held", got, err)
	}
	c2.SetDeadline(time.Now().Add(waitTimeout))
	if got, err := c2.r.ReadString('\n'); err != nil || got != "a:new\n" {
		t.Fatalf("after Unstall read %q, %v; want a:new", got, err)
	}
	mustAsk(t, c, "after", "a:after")
}

func TestReset(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "hi", "a:hi")
	waitConns(t, p, 1)
	p.Reset()
	if p.Conns() != 0 {
		t.Errorf("Conns after Reset = %d, want 0", p.Conns())
	}
	c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := c.r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Reset: %v, want a connection reset", err)
	}
	mustAsk(t, dial(t, p), "again", "a:again")
}

func TestPartition(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "hi", "a:hi")
	p.Partition()
	c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := c.r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Partition: %v, want a connection reset", err)
	}
	// New connections are cut off at once, not left hanging.
	cutOff(t, p, "while partitioned")
	if p.Conns() != 0 {
		t.Errorf("Conns while partitioned = %d, want 0", p.Conns())
	}
	p.Heal()
	mustAsk(t, dial(t, p), "healed", "a:healed")
}

func TestSetTarget(t *testing.T) {
	p := start(t, echo(t, "a"))
	c := dial(t, p)
	mustAsk(t, c, "1", "a:1")
	p.SetTarget(echo(t, "b"))
	mustAsk(t, c, "2", "a:2") // a current connection stays where it is
	mustAsk(t, dial(t, p), "3", "b:3")
}

// TestUnreachableTarget: a client whose target refuses is reset, not left
// waiting.
func TestUnreachableTarget(t *testing.T) {
	// The proxy listens first: a port freed before it listened could be
	// given to it, and it would dial itself.
	p := start(t, echo(t, "a"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.SetTarget(ln.Addr().String())
	ln.Close()
	cutOff(t, p, "with the target down")
}

// TestClose: Close resets open connections, including stalled ones and
// ones delayed by latency, and returns once every goroutine has ended
// (TestMain checks for leaks).
func TestClose(t *testing.T) {
	p, err := faultproxy.Start(echo(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	c1 := dial(t, p)
	mustAsk(t, c1, "1", "a:1")
	p.SetLatency(time.Hour)
	c1.Write([]byte("held by latency\n"))
	c2 := dial(t, p)
	waitConns(t, p, 2)
	p.Stall()
	c2.Write([]byte("held by stall\n"))
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close did not return")
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns after Close = %d, want 0", n)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("dial after Close succeeded")
	}
}

// TestServe: proxies made with New share one listener of the caller's,
// which hands each its connections; a fault of one leaves the other's
// connections alone, and a closed one resets what it is given.
func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := faultproxy.New(echo(t, "a")), faultproxy.New(echo(t, "b"))
	if pa.Addr() != "" {
		t.Errorf("Addr of a proxy without a listener = %q", pa.Addr())
	}
	// The listener's goroutine hands the connections out in turn: a, b, a…
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			[]*faultproxy.Proxy{pa, pb}[i%2].Serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		pa.Close()
		pb.Close()
	})
	connect := func() *conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &conn{Conn: c, r: bufio.NewReader(c)}
	}
	ca, cb := connect(), connect()
	mustAsk(t, ca, "1", "a:1")
	mustAsk(t, cb, "2", "b:2")
	waitConns(t, pa, 1)
	waitConns(t, pb, 1)

	pa.Partition()
	if got, err := ca.ask("3", waitTimeout); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("ask through a partitioned proxy = %q, %v; want the connection reset", got, err)
	}
	mustAsk(t, cb, "4", "b:4")

	if err := pa.Close(); err != nil {
		t.Fatal(err)
	}
	closed := connect() // the third connection: given to pa, closed
	if got, err := closed.ask("5", waitTimeout); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("ask through a closed proxy = %q, %v; want the connection reset", got, err)
	}
	mustAsk(t, cb, "6", "b:6")
}
