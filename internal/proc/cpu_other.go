//go:build !unix

package proc

import "time"

// CPU returns 0: this platform's CPU time is not read.
func CPU() time.Duration { return 0 }
