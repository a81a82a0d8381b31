//go:build unix

package mcptool

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup makes the server lead a process group of its own, so that
// its children (npx runs the server as a grandchild) are stopped with it,
// and a terminal's Ctrl-C reaches Baton, which stops its servers, rather
// than the servers directly.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate asks the server's process group to exit.
func terminate(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// kill kills the server's process group, also after the server itself has
// exited: the group's id cannot have been reused while any member of the
// group lives.
func kill(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }
