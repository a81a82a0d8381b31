// Package redistest runs a real redis-server for tests: one process per
// Start, on a free loopback port, with no persistence (or an append-only
// file: StartConfig, StartAOF), in the test's temporary directory, stopped
// when the test ends; a Sentinel setup of a master, a replica and
// sentinels (StartFailover, sentinel.go), the same binary in Sentinel mode;
// and a Redis Cluster of masters and their replicas (StartCluster,
// cluster.go), joined by redis-cli as an operator joins one, and changed
// as an operator changes one (Failover, Reshard, MoveSlot).
// It owns only the processes, the ports and the cluster's shape; what the
// tests store in them is theirs.
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
	cfg  Config

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been waited for
	paused bool          // stopped with SIGSTOP (Pause)
	conf   []string      // more redis-server arguments, after the defaults (aof.go)
}

// Config is how StartConfig runs a redis-server. The zero value is what
// Start runs: a master that persists nothing.
type Config struct {
	// AppendOnly persists every write to an append-only file in the
	// server's directory, fsynced before the write is answered
	// (appendfsync always): Restart then brings the data back.
	AppendOnly bool
	// ReplicaOf is the host:port of the master this server replicates;
	// "" (the default) runs a master.
	ReplicaOf string
	// sentinel runs the server in Sentinel mode with this configuration
	// file's contents (sentinel.go).
	sentinel string
	// cluster runs the server as a node of a Redis Cluster, its bus on
	// busPort (cluster.go).
	cluster bool
	busPort int
}

// Start runs a redis-server for t and stops it when t ends. It skips t (or
// fails it when CI is set) when redis-server is not installed; the
// package's TestMain must wrap its M with skipreport.Reporting.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, Config{})
}

// StartConfig is Start with cfg.
func StartConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipreport.Skip(t, "redis-server not found: install Debian's redis-server (7.0 or later) to run the Redis tests")
	}
	s := &Server{bin: bin, dir: t.TempDir(), cfg: cfg}
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

// Restart kills the server (SIGKILL) and starts it again on the same port
// and directory: empty, unless Config.AppendOnly had it keep its data.
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
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", logPath, "--daemonize", "no",
		// A replica's first sync starts at once, not after the default 5s
		// wait for more replicas.
		"--repl-diskless-sync-delay", "0"}
	if s.cfg.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	}
	if s.cfg.cluster {
		args = append(args, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, fmt.Sprintf("nodes-%d.conf", s.port)),
			"--cluster-port", strconv.Itoa(s.cfg.busPort),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)))
	}
	if s.cfg.ReplicaOf != "" {
		host, port, _ := net.SplitHostPort(s.cfg.ReplicaOf)
		args = append(args, "--replicaof", host, port)
	}
	if s.cfg.sentinel != "" {
		// Sentinel rewrites its configuration file: each start writes it
		// afresh, with this port.
		conf := filepath.Join(s.dir, fmt.Sprintf("sentinel-%d.conf", s.port))
		if err := os.WriteFile(conf, []byte(s.cfg.sentinel), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", conf, err)
		}
		args = append([]string{conf, "--sentinel"}, args[:2]...)
		args = append(args, "--bind", "127.0.0.1", "--dir", s.dir, "--logfile", logPath, "--daemonize", "no")
	} else {
		args = append(args, s.conf...)
	}
	cmd := exec.Command(s.bin, args...)
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
