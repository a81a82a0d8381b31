package main

import (
	"os"
	"testing"
)

func TestProcParsers(t *testing.T) {
	status := []byte("Name:\tbaton\nVmHWM:\t  627812 kB\nVmRSS:\t  440100 kB\n")
	netstat := []byte("TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 127323 127324\n" +
		"IpExt: InNoRoutes ListenOverflows\nIpExt: 1 2\n")
	tests := []struct {
		name string
		got  int64
		want int64
	}{
		{"VmHWM", must(statusKB(status, "VmHWM")), 627812},
		{"VmRSS", must(statusKB(status, "VmRSS")), 440100},
		{"absent status line", must(statusKB(status, "VmSwap")), 0},
		{"ListenOverflows", netstatField(netstat, "ListenOverflows"), 127323},
		{"ListenDrops", netstatField(netstat, "ListenDrops"), 127324},
		{"absent counter", netstatField(netstat, "TCPTimeouts"), 0},
		{"no TcpExt", netstatField([]byte("IpExt: A\nIpExt: 1\n"), "A"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %d, want %d", tt.got, tt.want)
			}
		})
	}
}

func must(v int64, _ bool) int64 { return v }

// TestReadPID reads the test's own process, as -server-pid reads a server.
func TestReadPID(t *testing.T) {
	s, err := readPID(os.Getpid(), true)
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if s.rss <= 0 || s.peak < s.rss {
		t.Errorf("readPID = %+v: want a resident size and a peak at least as large", s)
	}
}
