package main

import (
	"bytes"
	"expvar"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/internal/proc"
)

// publishProcess publishes the "process" var as cmd/baton's debug
// endpoint does: the in-process server's process is the test's.
var publishProcess sync.Once

// TestLoadServerStats: with -debug-addr the report has the server's CPU
// time and write syscalls per event, read from its /debug/vars before and
// after the load; a debug endpoint without the var fails the tool before
// it loads anything.
func TestLoadServerStats(t *testing.T) {
	publishProcess.Do(func() { expvar.Publish("process", expvar.Func(func() any { return proc.Read() })) })
	debug := httptest.NewServer(expvar.Handler())
	defer debug.Close()
	url := baton(t)

	addr := strings.TrimPrefix(debug.URL, "http://")
	rep, err := load(t, "-url", url, "-sessions", "4", "-runs", "2", "-ramp", "0s", "-debug-addr", addr)
	if err != nil || rep.ViolationsNum != 0 {
		t.Fatalf("run: %v; violations %v", err, rep.Violations)
	}
	if rep.ServerCPUPerEvent <= 0 || rep.ClientCPUPerEvent <= 0 {
		t.Errorf("server CPU %.2fµs, client CPU %.2fµs per event: want both", rep.ServerCPUPerEvent, rep.ClientCPUPerEvent)
	}
	if _, ok := proc.WriteSyscalls(); ok && rep.ServerWritesPerEvent <= 0 {
		t.Errorf("server write syscalls %.2f per event, want some", rep.ServerWritesPerEvent)
	}

	t.Run("a server without the var", func(t *testing.T) {
		bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"memstats":{}}`))
		}))
		defer bare.Close()
		var out bytes.Buffer
		err := run(t.Context(), []string{"-url", url, "-sessions", "1", "-runs", "1", "-debug-addr", bare.URL, "-json", "-quiet"}, &out, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `no "process" var`) || out.Len() != 0 {
			t.Errorf("run: %v, printed %q; want the missing var reported before any load", err, out.String())
		}
	})
}

func TestServerStatsSince(t *testing.T) {
	before := serverStats{Stats: proc.Stats{CPUNs: 1e6, WriteSyscalls: 10}, writes: true}
	tests := []struct {
		name          string
		after         serverStats
		events        int
		cpuUS, writes float64
	}{
		{"both", serverStats{Stats: proc.Stats{CPUNs: 3e6, WriteSyscalls: 210}, writes: true}, 100, 20, 2},
		{"no write counts", serverStats{Stats: proc.Stats{CPUNs: 3e6}}, 100, 20, 0},
		{"no events", serverStats{Stats: proc.Stats{CPUNs: 3e6, WriteSyscalls: 210}, writes: true}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, writes := tt.after.since(before, tt.events)
			if cpu != tt.cpuUS || writes != tt.writes {
				t.Errorf("since = %v µs, %v writes; want %v, %v", cpu, writes, tt.cpuUS, tt.writes)
			}
		})
	}
}
