package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// canTellPeers says whether socketPID works here: it reads Linux's /proc.
const canTellPeers = true

// socketPID returns which of pids holds the other end of c, a loopback
// TCP connection accepted here; 0 when none does. The peer's socket is the
// one /proc/net/tcp lists with c's remote address as its local one and
// c's local address as its remote one; its inode names it among the
// descriptors of the process that holds it (/proc/PID/fd).
func socketPID(c net.Conn, pids []int) (int, error) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok || local.IP.To4() == nil || remote.IP.To4() == nil {
		return 0, fmt.Errorf("not an IPv4 TCP connection: %v", c.RemoteAddr())
	}
	inode, err := socketInode(procAddr(remote), procAddr(local))
	if err != nil || inode == "" {
		return 0, err
	}
	link := "socket:[" + inode + "]"
	for _, pid := range pids {
		fds := fmt.Sprintf("/proc/%d/fd", pid)
		entries, err := os.ReadDir(fds)
		if err != nil {
			continue // the process has ended
		}
		for _, e := range entries {
			if l, err := os.Readlink(fds + "/" + e.Name()); err == nil && l == link {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// procAddr is a as /proc/net/tcp writes it: the address's four bytes as a
// host-order hex number, a colon, the port in hex.
func procAddr(a *net.TCPAddr) string {
	return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(a.IP.To4()), a.Port)
}

// socketInode returns the inode of the TCP socket from local to remote,
// "" when there is none (it has closed).
func socketInode(local, remote string) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", fmt.Errorf("telling the nodes' connections apart: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && fields[1] == local && fields[2] == remote {
			if _, err := strconv.ParseUint(fields[9], 10, 64); err != nil {
				return "", errors.New("/proc/net/tcp: an inode that is not a number")
			}
			return fields[9], nil
		}
	}
	return "", sc.Err()
}
