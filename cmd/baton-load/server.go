package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

// serverStats are the -debug-addr servers' counters, summed.
type serverStats struct {
	proc.Stats
	// writes is false when a server did not count its write syscalls.
	writes bool
}

// readServers reads the "process" var of each server's /debug/vars.
func readServers(ctx context.Context, addrs []string) (serverStats, error) {
	sum := serverStats{writes: true}
	for _, addr := range addrs {
		s, err := readServer(ctx, addr)
		if err != nil {
			return serverStats{}, fmt.Errorf("-debug-addr %s: %w", addr, err)
		}
		sum.CPUNs += s.CPUNs
		sum.WriteSyscalls += s.WriteSyscalls
		sum.writes = sum.writes && s.WriteSyscalls > 0
	}
	return sum, nil
}

func readServer(ctx context.Context, addr string) (proc.Stats, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/debug/vars", nil)
	if err != nil {
		return proc.Stats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return proc.Stats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return proc.Stats{}, fmt.Errorf("/debug/vars: %s", resp.Status)
	}
	var v struct {
		Process *proc.Stats `json:"process"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return proc.Stats{}, fmt.Errorf("/debug/vars: %w", err)
	}
	if v.Process == nil {
		return proc.Stats{}, fmt.Errorf("/debug/vars has no \"process\" var (a Baton older than it?)")
	}
	return *v.Process, nil
}

// since returns the servers' CPU time (µs) and write syscalls from before
// to s per event; the writes are 0 when a server did not count them.
func (s serverStats) since(before serverStats, events int) (cpuUS, writes float64) {
	if events == 0 {
		return 0, 0
	}
	cpuUS = float64(s.CPUNs-before.CPUNs) / 1e3 / float64(events)
	if s.writes && before.writes {
		writes = float64(s.WriteSyscalls-before.WriteSyscalls) / float64(events)
	}
	return cpuUS, writes
}
