package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

// TestDebugProcessVar: /debug/vars publishes the process's CPU time and
// write syscalls, and both grow with work done; a second debug surface in
// the same process (run called again) serves the same var.
func TestDebugProcessVar(t *testing.T) {
	read := func(base string) proc.Stats {
		t.Helper()
		resp, err := http.Get(base + "/debug/vars")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Process *proc.Stats `json:"process"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || v.Process == nil {
			t.Fatalf("/debug/vars: %v, process %v", err, v.Process)
		}
		return *v.Process
	}
	first := httptest.NewServer(debugRoutes())
	defer first.Close()
	second := httptest.NewServer(debugRoutes())
	defer second.Close()

	before := read(first.URL)
	deadline := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(deadline) { // CPU to count
	}
	after := read(second.URL)
	if runtime.GOOS != "windows" && after.CPUNs <= before.CPUNs {
		t.Errorf("cpu_ns %d, then %d after 20ms of work", before.CPUNs, after.CPUNs)
	}
	if _, ok := proc.WriteSyscalls(); ok && (before.WriteSyscalls == 0 || after.WriteSyscalls <= before.WriteSyscalls) {
		t.Errorf("write_syscalls %d, then %d after an HTTP answer", before.WriteSyscalls, after.WriteSyscalls)
	}
}
