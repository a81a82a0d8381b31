package skipreport

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// goStderr returns the go command's stderr when this binary's parent is
// the go command and its stderr is not this binary's (the go command
// reads the binary's output to show it only on failure or -v); nil
// otherwise, or when it cannot be reached safely.
func goStderr() *os.File {
	ppid := os.Getppid()
	proc := "/proc/" + strconv.Itoa(ppid)
	if exe, err := os.Readlink(proc + "/exe"); err != nil || filepath.Base(exe) != "go" {
		return nil // run by hand, by go test -exec, by an IDE: its stderr is ours to use
	}
	var own, theirs unix.Stat_t
	if unix.Fstat(2, &own) != nil || unix.Stat(proc+"/fd/2", &theirs) != nil {
		return nil
	}
	if own.Dev == theirs.Dev && own.Ino == theirs.Ino {
		return nil // the go command streams our output (go test with no package)
	}

	// The same open file as the go command's, offset included.
	if pidfd, err := unix.PidfdOpen(ppid, 0); err == nil {
		fd, err := unix.PidfdGetfd(pidfd, 2, 0)
		unix.Close(pidfd)
		if err == nil {
			return os.NewFile(uintptr(fd), "the go command's stderr")
		}
	}
	// Without the right to (Yama's ptrace_scope ≥ 1 forbids a child to
	// take its parent's files), open it anew: a terminal or a pipe is
	// written as the go command writes it, a file only if it appends.
	if theirs.Mode&unix.S_IFMT == unix.S_IFREG && !appends(proc+"/fdinfo/2") {
		return nil
	}
	f, err := os.OpenFile(proc+"/fd/2", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

// appends reports whether the open file that fdinfo describes was opened
// with O_APPEND.
func appends(fdinfo string) bool {
	f, err := os.Open(fdinfo)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&unix.O_APPEND != 0
		}
	}
	return false
}
