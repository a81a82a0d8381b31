//go:build !unix

package edge

// FileLimit is 0 where the process's limit on open files cannot be read:
// no cap is derived from it.
func FileLimit() uint64 { return 0 }
