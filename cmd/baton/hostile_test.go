package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// Hostile peers, end to end. The tests that count goroutines or measure the
// heap are not parallel: they run before the parallel tests start, alone
// with their own server.

// bigWork is a run of some 30 MiB of events that leaves little in the
// session's state: 40 tasks, each reading a 64 KiB file 12 times (tool
// results are events, not state; the answers quote 200 bytes of each).
// The server needs --workspace set to a directory holding big.txt (see
// bigWorkspace), --max-rounds 16 and a --tool-result-limit above 64 KiB.
func bigWork() []wsproto.Task {
	tasks := make([]wsproto.Task, 40)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Read",
			Description: strings.Repeat(`[sim:tool=read_file {"path":"big.txt"}] `, 12), DependsOn: []string{}}
	}
	return tasks
}

// bigWorkProduced is about how many bytes of frames bigWork makes.
const bigWorkProduced = 40 * 12 * 64 << 10

// bigWorkspace is a workspace holding the 64 KiB file bigWork reads.
func bigWorkspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	line := strings.Repeat("All work and no play makes a dull log line. ", 15) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat(line, 64<<10/len(line)+1)[:64<<10]), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// dialNoRead opens a WebSocket whose socket receive buffer is tiny, reads
// its system.connected and nothing after it, ever: the kernel soon stops
// taking what the server writes.
func dialNoRead(t *testing.T, base string) (*conn, wsproto.Connected) {
	t.Helper()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	c := newConn(t, wstest.Dial(t, wsURL(base), connOptions(&wstest.Options{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}})))
	return c, meta[wsproto.Connected](t, c.expect(wsproto.EventConnected))
}

// TestSlowReader: a client that never reads while its session produces
// some 30 MiB of events overflows its send queue, and the server ends its
// connection with 1013 within the write timeout and the close frame's 5 s
// rather than wait or buffer; a session beside it keeps getting its events at once; and once
// the run has ended, the server holds a fraction of what was produced (the
// ring of 16 events, the session's small state). The slow session resumes.
//
// What the heap assertion can and cannot see: it is the whole process's
// live heap, the test's own recorder of every byte written included (for
// the slow client, what its socket took before it filled). A server that
// queued without bound would hold the 30 MiB; this one must hold under a
// third of it.
func TestSlowReader(t *testing.T) {
	logs := &logSink{}
	// A ring of 16: the send queue holds 80 frames. No pings: the client
	// that does not read would not answer them, and this is about the
	// queue. A write may take 2 s (the pong timeout).
	base := startServerLogging(t, logs, "--buffer-size", "16", "--ping-interval", "1h", "--pong-timeout", "2s",
		"--workspace", bigWorkspace(t), "--max-rounds", "16", "--tool-result-limit", "70000")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	healthz(t, base)
	before := heapInUse()

	slow, hello := dialNoRead(t, base)
	var mu sync.Mutex
	var worst time.Duration // the other session's slowest event
	var worstEvent string
	other, err := client.Dial(ctx, wsURL(base), &client.Options{OnEvent: func(f client.Frame) {
		mu.Lock()
		defer mu.Unlock()
		if d := f.Received.Sub(f.Timestamp); f.Seq != 0 && d > worst {
			worst, worstEvent = d, f.Event
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	slow.send("user.solve_tasks", map[string]any{"tasks": bigWork()})
	sent := time.Now()
	if err := other.SolveTasks(ctx, []wsproto.Task{sleepTask("a", "300ms"), sleepTask("b", "300ms"), sleepTask("c", "300ms", "a", "b")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the slow client to be dropped", func() bool { return healthz(t, base).Connections == 1 })
	overflow := logs.find(t, "send queue overflow; closing slow client", map[string]any{"session": hello.SessionID})
	closed := logs.find(t, "connection closed", map[string]any{"session": hello.SessionID})
	if overflow == nil || closed == nil || closed["close_status"] != 1013.0 {
		t.Fatalf("the slow client's overflow %v and close %v: want both, close_status 1013", overflow, closed)
	}
	metricsReach(t, base,
		want{"baton_send_queue_overflows_total", "", 1, true},
		want{"baton_connections_closed_total", `end="too_slow"`, 1, true})
	// From the overflow, the close waits for the write under way, which
	// the write timeout (2 s) bounds, then for the close frame, which
	// coder/websocket gives 5 s: a client that reads nothing takes both.
	took := logTime(t, closed).Sub(logTime(t, overflow))
	t.Logf("the slow client was dropped %v after its run started, %v after its queue overflowed", time.Since(sent), took)
	if took > 2*time.Second+5*time.Second+time.Second {
		t.Errorf("closed %v after the overflow; want within the 2 s write timeout, 5 s for the close frame and 1 s of slack", took)
	}
	if err := other.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("the other session's slowest event: %s after %v", worstEvent, worst)
	if worst > 2*time.Second {
		t.Errorf("an event of the other session took %v (%s) to arrive; want under 2 s", worst, worstEvent)
	}
	mu.Unlock()
	eventually(t, "the slow session's run to end", func() bool {
		return logs.find(t, "run ended", map[string]any{"session": hello.SessionID, "outcome": "succeeded"}) != nil
	})
	other.Close()
	kept := int64(heapInUse()) - int64(before)
	t.Logf("heap kept after the run: %.1f MiB of about %d MiB produced", float64(kept)/(1<<20), bigWorkProduced>>20)
	if kept > bigWorkProduced/3 {
		t.Errorf("the server keeps %d bytes after a run of about %d for a client that read nothing", kept, bigWorkProduced)
	}
	r := resume(t, base, hello, 0, "")
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resumed || !m.Resync {
		t.Fatalf("resume after 1013: %+v, want a resync (the ring of 16 no longer holds seq 1)", m)
	}
}

// logTime is when a log record was written.
func logTime(t *testing.T, r map[string]any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["time"]))
	if err != nil {
		t.Fatalf("log time %v: %v", r["time"], err)
	}
	return at
}

// TestSilentPeerDropped: a raw TCP client that completes the handshake and
// then neither reads nor answers a ping is dropped within ping interval +
// pong timeout, and every goroutine the server had for it ends.
func TestSilentPeerDropped(t *testing.T) {
	const interval, timeout = 100 * time.Millisecond, 200 * time.Millisecond
	base := startServer(t, "--ping-interval", interval.String(), "--pong-timeout", timeout.String())
	healthz(t, base) // the HTTP client's connection, kept for the polls below
	goroutines := runtime.NumGoroutine()

	nc, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", strings.TrimPrefix(base, "http://"))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	opened := time.Now()
	// From here the client reads nothing: system.connected and the pings
	// wait in its socket. Its drop is waited for by its count, which stays
	// true, not by /healthz's connections: they are 0 too before the
	// server has counted the connection it just upgraded.
	metricsReach(t, base, want{"baton_connections_closed_total", `end="no_pong"`, 1, true})
	if took := time.Since(opened); took < timeout || took > interval+timeout+time.Second {
		t.Errorf("dropped after %v; want after the pong timeout (%v), within interval + timeout (%v) and 1 s of slack",
			took, timeout, interval+timeout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the peer connected", runtime.NumGoroutine(), goroutines)
		}
		time.Sleep(5 * time.Millisecond) // polling a count; nothing to wait on
	}
}
