package mcptool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/baton-run/baton/tool"
)

// crashWindow is how soon after its start a server's exit counts as one
// more failure in a row (see server.lost): a server that had run longer
// starts a fresh row.
const crashWindow = 10 * time.Second

// errClosed is the failure of a call after Close.
var errClosed = errors.New("the MCP servers have been stopped")

// A server is one configured MCP server; it outlives its processes.
type server struct {
	m          *Manager
	spec       Spec
	confirmAll bool // Options.Confirm names it
	trusted    bool // Options.Trust names it
	log        *slog.Logger
	client     *mcp.Client
	tools      []tool.Tool // set by start, then read-only

	// mu guards the fields below.
	mu       sync.Mutex
	conn     *conn    // the live connection; nil while down
	starting *attempt // the restart in progress, if any
	failures int      // failures in a row: failed starts, and early exits no call is blamed for
	retryAt  time.Time
	downErr  error // why the server is down (for the log: it may quote the server's stderr)
	closed   bool
}

// A conn is one process of a server with its MCP session.
type conn struct {
	proc    *process
	cs      *mcp.ClientSession
	started time.Time
	gone    chan struct{} // closed once the process has exited and the server knows

	// calls are the calls sent on this connection that got no answer: in
	// progress, or cut by the connection's end. When the connection ends,
	// they are blamed for it. Guarded by server.mu.
	calls map[*call]struct{}
}

// A call is one tool call sent to a server, for the log.
type call struct {
	tool string
	ids  []any // slog key-value pairs from tool.LogAttrs
}

// An attempt is a restart that calls wait for.
type attempt struct {
	done chan struct{} // closed when c or err is set
	c    *conn
	err  error
}

// start runs the server for the first time and lists its tools.
func (s *server) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.StartTimeout)
	defer cancel()
	c, err := s.connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp server %q (%s): %w", s.spec.Name, s.spec, err)
	}
	var listed []*mcp.Tool
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			// Start fails: the server is not to be restarted.
			s.close()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				err = fmt.Errorf("no tool list within %s: %w", s.m.opts.StartTimeout, err)
			}
			return fmt.Errorf("mcp server %q (%s): list tools: %w", s.spec.Name, s.spec, err)
		}
		listed = append(listed, t)
	}
	s.tools = s.buildTools(listed)
	s.log.Info("mcp server started", "pid", c.proc.pid(), "tools", len(s.tools))
	return nil
}

// connect starts a process and completes the MCP handshake with it. On
// success the connection is the server's live one and a monitor owns it.
func (s *server) connect(ctx context.Context) (*conn, error) {
	p, err := startProcess(s.spec, s.log, &s.m.wg)
	if err != nil {
		return nil, fmt.Errorf("run command: %w", err)
	}
	cs, err := s.client.Connect(ctx, &mcp.IOTransport{Reader: p.stdout, Writer: p.stdin}, nil)
	if err != nil {
		// A server that dies at once is usually the cause of the failed
		// handshake; give its exit a moment to be seen.
		exited := p.waitExit(200 * time.Millisecond)
		p.stop(s.m.opts.StopTimeout)
		switch {
		case exited:
			return nil, fmt.Errorf("MCP handshake: %v; the server %w", err, p.exitError())
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("no MCP handshake within %s (is it an MCP server on stdio?): %w", s.m.opts.StartTimeout, err)
			if tail := p.stderr.tail(); tail != "" {
				err = fmt.Errorf("%w; its stderr ends with: %s", err, tail)
			}
			return nil, err
		default:
			// stop has waited for the exit, so its stderr has been read.
			err = fmt.Errorf("MCP handshake: %w", err)
			if tail := p.stderr.tail(); tail != "" {
				err = fmt.Errorf("%w; its stderr ends with: %s", err, tail)
			}
			return nil, err
		}
	}
	c := &conn{proc: p, cs: cs, started: time.Now(), gone: make(chan struct{}), calls: make(map[*call]struct{})}
	// The connection is the server's before its monitor can see it end,
	// so that an exit right after the handshake marks the server down.
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.conn = c
	}
	s.mu.Unlock()
	s.m.wg.Go(func() { s.monitor(c) })
	if closed {
		c.cs.Close() // the monitor stops the process
		return nil, errClosed
	}
	return c, nil
}

// monitor waits for the end of c's session, whether the process died, the
// connection broke or Close closed it, then stops the process and marks
// the server down.
func (s *server) monitor(c *conn) {
	waitErr := c.cs.Wait()
	cause := fmt.Errorf("connection lost: %v", waitErr)
	if waitErr == nil {
		cause = errors.New("connection closed")
	}
	if !s.isClosed() && c.proc.waitExit(200*time.Millisecond) {
		cause = fmt.Errorf("the server %w", c.proc.exitError())
	}
	c.cs.Close()
	c.proc.stop(s.m.opts.StopTimeout)
	s.lost(c, cause)
}

// lost marks the server down after c has ended.
//
// An exit while calls were in progress is blamed on those calls (a call
// that crashes its server): the next call starts the server again at once,
// whoever makes it, and the exit is not a failure in a row. Otherwise
// failures in a row are failed starts and exits within crashWindow of a
// start; an exit after a longer run starts a fresh row. The first failure
// of a row restarts at once too; from the second, the server waits (see
// backoff). So one client crashing a shared server never keeps it down for
// the others; a server that cannot stay up does not cost a process start
// per call.
func (s *server) lost(c *conn, cause error) {
	s.mu.Lock()
	current := s.conn == c
	closed := s.closed
	uptime := time.Since(c.started)
	blamed := make([]*call, 0, len(c.calls))
	for k := range c.calls {
		blamed = append(blamed, k)
	}
	var wait time.Duration
	if current {
		s.conn = nil
		if uptime >= crashWindow {
			s.failures = 0
		}
		if len(blamed) == 0 {
			s.failures++
			wait = s.backoff()
		}
		s.retryAt = time.Now().Add(wait)
		s.downErr = cause
	}
	s.mu.Unlock()
	switch {
	case closed:
		s.log.Debug("mcp server stopped", "pid", c.proc.pid())
	case current && len(blamed) > 0:
		// The cause may quote the server's stderr: it is for the operator,
		// with the ids of the calls, never for a client.
		for _, k := range blamed {
			s.log.Warn("mcp server stopped during a call; the next call restarts it at once",
				append(k.ids, "tool", k.tool, "pid", c.proc.pid(), "cause", cause.Error(),
					"uptime", uptime.Round(time.Millisecond), "calls_cut", len(blamed))...)
		}
	case current:
		s.log.Warn("mcp server down; the next call restarts it", "pid", c.proc.pid(),
			"cause", cause.Error(), "uptime", uptime.Round(time.Millisecond), "restart_after", wait)
	}
	close(c.gone)
}

// backoff returns how long the server stays down after its latest failure;
// the caller holds mu. A first failure restarts at once; from the second
// in a row the wait doubles from RestartBackoff up to MaxRestartBackoff.
func (s *server) backoff() time.Duration {
	return backoff(s.failures, s.m.opts.RestartBackoff, s.m.opts.MaxRestartBackoff)
}

func backoff(failures int, base, ceiling time.Duration) time.Duration {
	if failures <= 1 {
		return 0
	}
	d := base
	for i := 2; i < failures && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// session returns the live connection, restarting the server if it is down
// and its backoff has passed. A call that finds the server down within its
// backoff fails at once; one that finds a restart in progress waits for it
// (at most StartTimeout) or for ctx. Its errors other than ctx's and
// errClosed may quote the server's stderr: they are for the log.
func (s *server) session(ctx context.Context) (*conn, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, errClosed
	case s.conn != nil:
		c := s.conn
		s.mu.Unlock()
		return c, nil
	case s.starting == nil:
		if wait := time.Until(s.retryAt); wait > 0 {
			err := s.downErr
			s.mu.Unlock()
			return nil, fmt.Errorf("mcp server %q is down (%v); the next restart may be tried in %s",
				s.spec.Name, err, wait.Round(100*time.Millisecond))
		}
		a := &attempt{done: make(chan struct{})}
		s.starting = a
		s.m.wg.Go(func() { s.restart(a) })
	}
	a := s.starting
	s.mu.Unlock()
	select {
	case <-a.done:
		if a.err != nil {
			return nil, fmt.Errorf("mcp server %q: restart failed: %w", s.spec.Name, a.err)
		}
		return a.c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// restart starts the server again for the calls waiting on a.
func (s *server) restart(a *attempt) {
	ctx, cancel := context.WithTimeout(s.m.ctx, s.m.opts.StartTimeout)
	defer cancel()
	s.log.Info("restarting mcp server")
	c, err := s.connect(ctx)
	s.mu.Lock()
	s.starting = nil
	var wait time.Duration
	if err != nil {
		s.failures++
		wait = s.backoff()
		s.retryAt = time.Now().Add(wait)
		s.downErr = err
	}
	closed := s.closed
	s.mu.Unlock()
	// Logged before the waiting calls go on, so that the log tells the
	// restart before what they do next.
	switch {
	case closed:
	case err != nil:
		s.log.Warn("mcp server restart failed", "error", err.Error(), "restart_after", wait)
	default:
		s.log.Info("mcp server restarted", "pid", c.proc.pid())
	}
	a.c, a.err = c, err
	close(a.done)
}

// close stops the server's process, which ends its session (a graceful
// close of the session would wait for the calls in progress); the monitor
// does the rest, and Manager.Close waits for it.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.proc.stop(s.m.opts.StopTimeout)
	}
}

// isClosed reports whether Close has been called.
func (s *server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
