package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Baton as a process of its own, for the tests that kill it, read its
// memory from /proc or need its os.Args: the binary is built once per
// test binary.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// batonBinary builds cmd/baton once per test binary.
func batonBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "baton")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// node is one Baton process of a test's cluster.
type node struct {
	name string
	addr string // host:port it listens on
	cmd  *exec.Cmd
	log  *logSink
	done chan struct{} // closed when the process has ended
}

func (n *node) url() string { return "ws://" + n.addr + "/ws" }

// freeAddr returns a loopback address no one listens on now, for a node
// that must come back on the same address after a restart.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startBaton starts the baton binary with args (which must include an
// --addr) and waits until it listens. The process is killed when t ends;
// its log is shown if t failed.
func startBaton(t *testing.T, name string, args ...string) *node {
	t.Helper()
	cmd := exec.Command(batonBinary(t), args...)
	n := &node{name: name, cmd: cmd, log: &logSink{}, done: make(chan struct{})}
	cmd.Stderr = n.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	// One goroutine reads stdout to its end, then waits for the process
	// (Wait must not run before the reads from its pipe are done).
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "baton listening on ws://"); ok {
				host, _, _ := strings.Cut(rest, "/")
				listening <- host
			}
		}
		cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.kill(t)
		if t.Failed() {
			t.Logf("log of node %s:\n%s", n.name, n.log.String())
		}
	})
	select {
	case n.addr = <-listening:
	case <-n.done:
		t.Fatalf("node %s exited before listening:\n%s", name, n.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not listen within 30s:\n%s", name, n.log.String())
	}
	return n
}

// kill ends the process at once, as a crash would (SIGKILL).
func (n *node) kill(t *testing.T) {
	t.Helper()
	n.cmd.Process.Kill()
	n.wait(t)
}

// stop asks the process to shut down (SIGTERM) and waits for it.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.cmd.Process.Signal(syscall.SIGTERM)
	n.wait(t)
}

func (n *node) wait(t *testing.T) {
	t.Helper()
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s did not end within 30s", n.name)
	}
}
