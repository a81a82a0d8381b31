package main

import "syscall"

// sysProcAttr puts a child in its own process group, so a Ctrl-C at the
// terminal reaches only the command, which kills its children itself; and
// has Linux kill the child should the command die without doing so.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
