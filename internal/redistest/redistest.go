// Package redistest runs a real redis-server for tests: one process per
// Start, on a free loopback port, with no persistence (StartAOF: with an
// append-only file), in the test's temporary directory, stopped when the
// test ends. It owns only the process and the port; what the tests store in
// it is theirs.
//
// Without redis-server on PATH (Debian's redis-server package) a test that
// needs it is skipped, and counted in the package's skip report, or fails
// when the environment variable CI is set, so CI never passes without
// running the Redis tests (see internal/skipreport).
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/skipreport"
)

// startTimeout bounds how long a redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is a running redis-server. Its methods are called from the test's
// goroutine, not concurrently.
type Server struct {
	bin  string
	dir  string
	port int

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	paused bool          // stopped with SIGSTOP (Pause)
	conf   []string      // more redis-server arguments, after the defaults (aof.go)
}

// Start runs a redis-server for t and stops it when t ends. It skips t (or
// fails it when CI is set) when redis-server is not installed; the
// package's TestMain must wrap its M with skipreport.Reporting.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipreport.Skip(t, "redis-server not found: install Debian's redis-server (7.0 or later) to run the Redis tests")
	}
	s := &Server{bin: bin, dir: t.TempDir()}
	// A port found free may be taken before redis-server binds it; try
	// another then.
	for attempt := 1; ; attempt++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("redistest: %v", err)
		}
	}
	t.Cleanup(s.stop)
	return s
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the redis:// URL of database 0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a go-redis client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server at once (SIGKILL) and waits for the process to end.
// Clients see their connections drop and later dials refused.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop()
}

// Restart kills the server and starts a new, empty one on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	if err := s.start(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// Pause stops the server's process (SIGSTOP), as a stall does: its
// connections stay open and every command waits, unanswered, until
// Continue. stop continues a paused server before killing it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("redistest: pause: %v", err)
	}
	s.paused = true
}

// Continue resumes a paused server (SIGCONT).
func (s *Server) Continue(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("redistest: continue: %v", err)
	}
	s.paused = false
}

// start runs redis-server on s.port and waits until it answers PING, the
// process exits, or startTimeout passes.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port))
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", logPath, "--daemonize", "no")
	cmd.Args = append(cmd.Args, s.conf...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { // owned by s: stop waits for exited
		cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := ping(ctx, s.Addr())
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, tail(logPath))
		case <-ctx.Done():
			s.stop()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v (%v): %s",
				s.port, startTimeout, err, tail(logPath))
		case <-tick.C:
		}
	}
}

// stop kills the process, if running, and waits for it.
func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	if s.paused {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// ping sends one PING over a fresh connection and expects +PONG.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return errors.New("PING answered " + strings.TrimSpace(line))
	}
	return nil
}

// freePort returns a loopback port nothing listens on at the moment.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail returns the end of a log file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
