//go:build !linux

package skipreport

import "os"

// goStderr returns nil: outside Linux the go command's stderr is not
// reached, and the report goes to the binary's stderr (seen under -v).
func goStderr() *os.File { return nil }
