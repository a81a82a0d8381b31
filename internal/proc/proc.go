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
