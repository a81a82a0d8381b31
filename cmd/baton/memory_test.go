package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/wsproto"
)

// TestHugeResultsBoundedMemory is issue 23's memory attack, end to end: one
// user.solve_tasks frame of about 2.4 KB, --max-tasks tasks each asking the
// simulated model for a 16 MB result. Baton runs as a process of its own
// (the binary go build makes, no race detector), so that its peak RSS
// (VmHWM) is the attack's alone. Every result is cut where it enters, to
// --max-result-bytes, and marked truncated with its original size; the
// peak RSS grows by less than 100 MiB, and the live heap after the run
// holds about what the ring and the state keep of 50 cut results.
//
// A server that builds the results (before the limit it took 9.9 GB) is
// killed by the test once its RSS has grown by 512 MiB, so a failing run
// fails in seconds and never takes the machine's memory.
func TestHugeResultsBoundedMemory(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		skipreport.Skip(t, "no /proc/PID/status on "+runtime.GOOS+": the RSS of a Baton process is read from it on Linux only")
	}
	const (
		tasks       = 50       // --max-tasks
		resultBytes = 16000000 // what each task asks for
		limit       = 128 << 10
		peakBound   = 100 << 20
		killAt      = 512 << 20
	)
	p := startProcess(t, "--sim-delay", "0", "--log-level", "warn")
	base := p.status(t)["VmRSS"]

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var watch sync.WaitGroup
	killed := make(chan int64, 1)
	watch.Go(func() { p.watch(ctx, base+killAt, killed) })
	defer watch.Wait()
	defer cancel()

	var live frameLog
	cl, err := client.Dial(ctx, "ws://"+p.addr+"/ws", &client.Options{OnEvent: live.add})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	list := make([]wsproto.Task, tasks)
	for i := range list {
		list[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Big",
			Description: fmt.Sprintf("[sim:result_bytes=%d]", resultBytes), DependsOn: []string{}}
	}
	if err := cl.SolveTasks(ctx, list); err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx, finished); err != nil {
		select {
		case rss := <-killed:
			t.Fatalf("Baton's RSS grew to %d MiB (%d MiB at start): killed", rss>>20, base>>20)
		default:
		}
		t.Fatalf("the run did not end: %v", err)
	}
	st := p.status(t)
	peak, after := st["VmHWM"]-base, st["VmRSS"]-base
	heap := p.liveHeap(t)
	t.Logf("%d tasks × result_bytes=%d: RSS %.1f MiB at start, peak growth %.1f MiB, %.1f MiB more after the run; live heap after a GC %.1f MiB",
		tasks, resultBytes, float64(base)/(1<<20), float64(peak)/(1<<20), float64(after)/(1<<20), float64(heap)/(1<<20))
	if peak > peakBound {
		t.Errorf("peak RSS grew by %d MiB, over %d MiB", peak>>20, peakBound>>20)
	}
	// The ring holds each cut result twice (solver.completed and the
	// simulated aggregator's progress line), the state once: 3 × 50 ×
	// 128 KiB is 18.75 MiB, plus the process's own few MiB.
	if heap > 40<<20 {
		t.Errorf("live heap after the run %d MiB, want under 40 MiB", heap>>20)
	}

	completed := 0
	for _, f := range live.all() {
		if f.Event != wsproto.EventSolverCompleted {
			continue
		}
		completed++
		var m struct { // as a client reads it
			TaskID        string `json:"task_id"`
			Result        string `json:"result"`
			Truncated     bool   `json:"truncated"`
			OriginalBytes int    `json:"original_bytes"`
		}
		if err := json.Unmarshal(f.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		if !m.Truncated || m.OriginalBytes != resultBytes || len(m.Result) > limit || !strings.HasSuffix(m.Result, wsproto.CutMarker) {
			t.Errorf("%s: truncated %v, original_bytes %d, result of %d bytes ending %q; want it cut to %d bytes, marked",
				m.TaskID, m.Truncated, m.OriginalBytes, len(m.Result), m.Result[max(0, len(m.Result)-8):], limit)
		}
	}
	if completed != tasks {
		t.Errorf("%d solver.completed, want %d", completed, tasks)
	}
	if v := cl.View(); v.Run == nil || v.Run.FinalAnswer == nil || len(*v.Run.FinalAnswer) > limit {
		t.Errorf("final answer not within %d bytes", limit)
	}
}

// process is a Baton process a test started, with the memory store and
// /debug/ served.
type process struct {
	*node
	debugAddr string // host:port of /debug/
}

// startProcess starts the baton binary, built without -race (which would
// multiply its memory), on a free port, with /debug/ on another, and
// waits until it listens. The process is killed when t ends.
func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	debug := freeAddr(t)
	n := startBinary(t, plainBinary(t), "baton", append([]string{"--addr", "127.0.0.1:0", "--debug-addr", debug}, args...)...)
	return &process{node: n, debugAddr: debug}
}

// status is the process's memory figures from /proc/PID/status, in bytes:
// VmRSS (resident now), VmHWM (the most it has been resident).
func (p *process) status(t *testing.T) map[string]int64 {
	t.Helper()
	st, err := readStatus(p.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func readStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || !strings.HasPrefix(name, "Vm") || len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			out[name] = n << 10
		}
	}
	if out["VmRSS"] == 0 || out["VmHWM"] == 0 {
		return nil, fmt.Errorf("/proc/%d/status has no VmRSS or VmHWM:\n%s", pid, b)
	}
	return out, nil
}

// watch kills the process if its RSS passes most before ctx is done,
// reporting the RSS it saw on killed: a server whose memory is unbounded
// then fails its test at once, instead of swapping the machine.
func (p *process) watch(ctx context.Context, most int64, killed chan<- int64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-tick.C:
		}
		st, err := readStatus(p.cmd.Process.Pid)
		if err == nil && st["VmRSS"] > most {
			p.cmd.Process.Kill()
			killed <- st["VmRSS"]
			return
		}
	}
}

// liveHeap is the process's heap in use after a collection, read from
// /debug/vars once /debug/pprof/heap?gc=1 has collected.
func (p *process) liveHeap(t *testing.T) int64 {
	t.Helper()
	get := func(path string, v any) {
		resp, err := http.Get("http://" + p.debugAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if v != nil {
			if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	get("/debug/pprof/heap?gc=1", nil)
	var vars struct {
		Memstats struct {
			HeapAlloc int64
		} `json:"memstats"`
	}
	get("/debug/vars", &vars)
	return vars.Memstats.HeapAlloc
}
