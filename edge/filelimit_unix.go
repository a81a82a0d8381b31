//go:build unix

package edge

import "syscall"

// FileLimit is the process's current (soft) limit on open files,
// RLIMIT_NOFILE: Go raises it to the hard limit at start. 0 when it
// cannot be read.
func FileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return uint64(r.Cur)
}
