package web

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

// testServer is a real Baton server (the orchestrator on the simulated
// model, the UI at /) behind a TCP proxy that can cut every connection
// the way a lost network does.
type testServer struct {
	URL   string // http://127.0.0.1:PORT through the proxy
	Orch  *orchestrator.Server
	proxy *proxy
}

// WS is the server's WebSocket URL through the proxy.
func (s *testServer) WS() string { return "ws" + strings.TrimPrefix(s.URL, "http") + "/ws" }

// Cut drops every connection through the proxy without a close
// handshake and returns how many it dropped.
func (s *testServer) Cut() int { return s.proxy.cut() }

// startServer starts a server for one test; opts may be nil. The sim's
// pacing is --sim-delay's: delay per round.
func startServer(t *testing.T, delay time.Duration, opts *orchestrator.Options) *testServer {
	t.Helper()
	var o orchestrator.Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	orch, err := orchestrator.New(orchestrator.Models{
		Planner:    &planner.Sim{Delay: delay},
		Solver:     &solver.Sim{Delay: delay},
		Aggregator: &aggregator.Sim{Delay: delay},
	}, &o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux() // as cmd/baton's routes
	mux.Handle("GET /ws", orch)
	mux.Handle("GET /", Handler())
	backend := httptest.NewServer(mux)
	p := newProxy(t, backend.Listener.Addr().String())
	t.Cleanup(func() {
		p.close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := orch.Close(ctx); err != nil {
			t.Errorf("close orchestrator: %v", err)
		}
		backend.Close()
	})
	return &testServer{URL: "http://" + p.ln.Addr().String(), Orch: orch, proxy: p}
}

// proxy forwards TCP connections to a backend; cut drops them all.
type proxy struct {
	ln      net.Listener
	backend string
	wg      sync.WaitGroup // the accept loop and every pipe

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
}

func newProxy(t *testing.T, backend string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[b] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, b)
		go p.pipe(b, c)
	}
}

// pipe copies src to dst until either fails, then closes both.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src) // ends with an error on a cut: that is the point
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *proxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // RST, as a dead network looks to the peer that next writes
		}
		c.Close()
	}
	n := len(p.conns) / 2
	clear(p.conns)
	return n
}

func (p *proxy) close() {
	p.ln.Close()
	p.cut()
	p.wg.Wait()
}
