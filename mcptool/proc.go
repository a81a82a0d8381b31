package mcptool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// A process is one run of a server's command. The package owns it rather
// than leaving it to the SDK's CommandTransport so that it learns of the
// process's exit from Wait (not from stdout, which a leftover child may
// hold open) and can stop the server's children with it (its own process
// group, where the platform has them).
type process struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // the server's stdin; closing it asks the server to exit
	stdout *stdoutReader  // read end of the server's stdout
	stderr *stderrLog

	exited  chan struct{} // closed when Wait has returned
	waitErr error         // Wait's result; read only after exited is closed
}

// startProcess starts spec's command; wg owns the goroutine that waits
// for it.
func startProcess(spec Spec, log *slog.Logger, wg *sync.WaitGroup) (*process, error) {
	cmd := exec.Command(spec.Command, spec.Args...)
	// After the process exits, do not wait long for children that still
	// hold its stderr.
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Our own pipe rather than StdoutPipe, which Wait closes: the SDK's
	// reader must end by our Close, not race with Wait.
	pr, pw, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	cmd.Stdout = pw
	errLog := &stderrLog{log: log}
	cmd.Stderr = errLog
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	p := &process{
		cmd:    cmd,
		stdin:  stdin,
		stdout: &stdoutReader{f: pr, ended: make(chan struct{})},
		stderr: errLog,
		exited: make(chan struct{}),
	}
	wg.Go(func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
		// What the server wrote before it exited is read to the end, but
		// whatever still holds stdout (a child of the server) must not
		// keep the session alive after the server is gone.
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-p.stdout.ended:
		case <-t.C:
		}
		p.stdout.Close()
	})
	return p, nil
}

// stdoutReader is the read end of a server's stdout; it tells when reading
// has ended.
type stdoutReader struct {
	f     *os.File
	once  sync.Once
	ended chan struct{} // closed when a Read has failed (EOF included)
}

func (r *stdoutReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if err != nil {
		r.once.Do(func() { close(r.ended) })
	}
	return n, err
}

// Close closes the pipe, which ends a Read in progress.
func (r *stdoutReader) Close() error { return r.f.Close() }

// pid returns the process's id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// stop closes the server's stdin, then sends SIGTERM if it has not exited
// within grace and SIGKILL if it has not exited within another grace, and
// returns once it has exited; what is left of its process group is killed.
func (p *process) stop(grace time.Duration) {
	p.stdin.Close()
	if !p.waitExit(grace) {
		_ = terminate(p.cmd.Process)
		if !p.waitExit(grace) {
			_ = kill(p.cmd.Process)
			<-p.exited
		}
	}
	// What is left of its process group (children of the server).
	_ = kill(p.cmd.Process)
	p.stdout.Close()
}

// waitExit reports whether the process exits within d.
func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// exitError describes how the process ended; call it after exited is
// closed.
func (p *process) exitError() error {
	var err error
	if p.waitErr == nil {
		err = errors.New("exited with status 0")
	} else {
		err = fmt.Errorf("exited: %w", p.waitErr)
	}
	if tail := p.stderr.tail(); tail != "" {
		err = fmt.Errorf("%w; its stderr ends with: %s", err, tail)
	}
	return err
}

// Bounds on what is kept of a server's stderr.
const (
	maxStderrLine  = 1024
	stderrTailSize = 3 // lines
)

// stderrLog logs a server's stderr line by line (at info level: an operator sees why a server fails) and keeps
// its last lines for error messages.
type stderrLog struct {
	log *slog.Logger

	// mu guards the fields below (Write runs in exec's copying goroutine).
	mu      sync.Mutex
	partial []byte
	last    []string
}

func (w *stderrLog) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.partial = append(w.partial, b...)
			if len(w.partial) > maxStderrLine {
				w.line(w.partial)
				w.partial = w.partial[:0]
			}
			break
		}
		w.partial = append(w.partial, b[:i]...)
		w.line(w.partial)
		w.partial = w.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

// line records one line; the caller holds mu.
func (w *stderrLog) line(b []byte) {
	s := strings.TrimRight(string(b), "\r")
	if len(s) > maxStderrLine {
		s = cut(s, maxStderrLine)
	}
	if strings.TrimSpace(s) == "" {
		return
	}
	w.log.Info("mcp server stderr", "line", s)
	if len(w.last) == stderrTailSize {
		w.last = append(w.last[:0], w.last[1:]...)
	}
	w.last = append(w.last, s)
}

// tail returns the last lines written, joined with " | ".
func (w *stderrLog) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := w.last
	if p := strings.TrimSpace(string(w.partial)); p != "" {
		lines = append(lines[:len(lines):len(lines)], cut(p, maxStderrLine))
	}
	return strings.Join(lines, " | ")
}
