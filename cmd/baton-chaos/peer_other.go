//go:build !linux

package main

import (
	"errors"
	"net"
)

// canTellPeers says whether socketPID works here: it reads Linux's /proc,
// so --cluster needs Linux.
const canTellPeers = false

func socketPID(net.Conn, []int) (int, error) {
	return 0, errors.New("telling the nodes' connections apart needs Linux's /proc")
}
