// Package proc reads the running process's own resource counters: the CPU
// time it has used and the write system calls it has made. It knows
// nothing of Baton; the server publishes them on its debug endpoint and the
// load tool divides them by the events it received.
package proc

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
)

// Stats are the process's counters as the server's debug endpoint
// publishes them: the "process" var of /debug/vars.
type Stats struct {
	// CPUNs is the user and system CPU time used, in nanoseconds.
	CPUNs int64 `json:"cpu_ns"`
	// WriteSyscalls counts the write system calls made; 0 (left out)
	// where that is not available.
	WriteSyscalls uint64 `json:"write_syscalls,omitempty"`
}

// Read returns the process's counters now.
func Read() Stats {
	w, _ := WriteSyscalls()
	return Stats{CPUNs: CPU().Nanoseconds(), WriteSyscalls: w}
}

// WriteSyscalls returns how many write system calls the process has made
// (syscw of /proc/self/io), and false where that is not available (off
// Linux, or a kernel without task I/O accounting).
func WriteSyscalls() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	return field(b, "syscw")
}

// field reads a "name: value" line of a /proc file.
func field(b []byte, name string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(k) != name {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}
