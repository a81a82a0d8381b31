//go:build !unix

package mcptool

import (
	"os"
	"os/exec"
)

// Without process groups, only the server process itself is stopped.

func setProcessGroup(*exec.Cmd) {}

func terminate(p *os.Process) error { return p.Kill() }

func kill(p *os.Process) error { return p.Kill() }
