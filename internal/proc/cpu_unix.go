//go:build unix

package proc

import (
	"syscall"
	"time"
)

// CPU returns the user and system CPU time the process has used
// (getrusage(RUSAGE_SELF)), 0 where that is not available.
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
