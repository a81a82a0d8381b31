package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// pidStats are a server process's counters read from /proc (-server-pid).
type pidStats struct {
	cpu  time.Duration // user and system CPU time
	rss  int64         // resident memory now, bytes
	peak int64         // peak resident memory since the last reset, bytes
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTick = 100

// readPID reads pid's CPU time and memory from /proc; reset also resets
// its peak resident memory (clear_refs 5), so that a later read's peak is
// the peak since now.
func readPID(pid int, reset bool) (pidStats, error) {
	var s pidStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, fmt.Errorf("-server-pid: %w", err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	fields := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	if len(fields) < 13 {
		return s, fmt.Errorf("-server-pid: /proc/%d/stat has %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return s, fmt.Errorf("-server-pid: /proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	s.cpu = time.Duration(utime+stime) * time.Second / clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("-server-pid: %w", err)
	}
	rss, _ := statusKB(status, "VmRSS")
	peak, _ := statusKB(status, "VmHWM")
	s.rss, s.peak = rss<<10, peak<<10
	if reset {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			return s, fmt.Errorf("-server-pid: reset its peak memory: %w", err)
		}
	}
	return s, nil
}

// statusKB reads a "Name:   123 kB" line of /proc/PID/status.
func statusKB(b []byte, name string) (int64, bool) {
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(k) != name {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// listenOverflows returns the machine's TcpExt ListenOverflows (connections
// dropped on a full listen queue) from /proc/net/netstat, 0 when it cannot.
func listenOverflows() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0
	}
	return netstatField(b, "ListenOverflows")
}

// netstatField reads a TcpExt counter of /proc/net/netstat, 0 when absent.
func netstatField(b []byte, name string) int64 {
	// Pairs of lines: "TcpExt: names..." then "TcpExt: values...".
	var names [][]byte
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if string(n) == name && i < len(f) {
				v, _ := strconv.ParseInt(string(f[i]), 10, 64)
				return v
			}
		}
		return 0
	}
	return 0
}
