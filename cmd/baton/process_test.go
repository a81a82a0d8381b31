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
// test binary, and twice when that is built with -race (a plain build for
// the tests that measure memory, which the race detector multiplies).

// build is one build of cmd/baton, made once per test binary.
type build struct {
	race bool
	once sync.Once
	path string
	err  error
}

var (
	raceBuild  = build{race: raceEnabled}
	plainBuild = build{}
)

// raceExit is the exit code of a Baton process that found a data race
// (GORACE's exitcode), which halts at the first one (halt_on_error).
const raceExit = 66

// batonBinary builds cmd/baton once per test binary, with -race when the
// test binary has it: the cluster's takeovers, adoptions and fencing
// then run under the race detector too, and a race a process reports
// fails the test that ran it (startBaton).
func batonBinary(t *testing.T) string { return raceBuild.binary(t) }

// plainBinary builds cmd/baton without -race, for the tests that measure a
// process's memory.
func plainBinary(t *testing.T) string { return plainBuild.binary(t) }

func (b *build) binary(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "baton-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "baton")
		args := []string{"build", "-o", b.path}
		if b.race {
			args = append(args, "-race")
		}
		start := time.Now()
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		t.Logf("built %s (race %v) in %v", b.path, b.race, time.Since(start).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// node is one Baton process of a test's cluster.
type node struct {
	name string
	addr string // host:port it listens on
	cmd  *exec.Cmd
	log  *logSink
	done chan struct{} // closed when the process has ended
	// exit is how the process ended, set before done is closed.
	exit *os.ProcessState
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
// its log is shown if t failed. A data race the process reports (built
// with -race) fails t.
func startBaton(t *testing.T, name string, args ...string) *node {
	t.Helper()
	return startBinary(t, batonBinary(t), name, args...)
}

// startBinary is startBaton with a binary of choice (plainBinary).
func startBinary(t *testing.T, bin, name string, args ...string) *node {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// A race halts the process at once, with an exit code of its own: the
	// test sees it in the log and the exit, never as a hang elsewhere.
	cmd.Env = append(os.Environ(), fmt.Sprintf("GORACE=halt_on_error=1 exitcode=%d", raceExit))
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
		n.exit = cmd.ProcessState
		close(n.done)
	}()
	t.Cleanup(func() {
		n.kill(t)
		n.checkRaces(t)
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

// checkRaces fails t if the process, once ended, reported a data race: in
// its log (the race detector writes to stderr) or by its exit code.
func (n *node) checkRaces(t *testing.T) {
	t.Helper()
	if strings.Contains(n.log.String(), "WARNING: DATA RACE") {
		t.Errorf("node %s reported a data race (see its log)", n.name)
	} else if n.exit != nil && n.exit.ExitCode() == raceExit {
		t.Errorf("node %s exited with %d, the race detector's exit code", n.name, raceExit)
	}
}
