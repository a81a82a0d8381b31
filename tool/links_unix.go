//go:build unix

package tool

import (
	"io/fs"
	"syscall"
)

// linkCountKnown says whether linkCount can read a file's hard links here.
const linkCountKnown = true

// linkCount returns how many hard links the file of fi has.
func linkCount(fi fs.FileInfo) (uint64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return uint64(st.Nlink), true
}
