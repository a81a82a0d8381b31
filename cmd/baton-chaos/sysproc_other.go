//go:build !linux

package main

import "syscall"

// sysProcAttr puts a child in its own process group, so a Ctrl-C at the
// terminal reaches only the command, which kills its children itself.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
