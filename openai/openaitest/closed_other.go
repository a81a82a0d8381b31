//go:build !unix

package openaitest

import (
	"net"
	"testing"
)

// ClosedBaseURL returns a base URL on 127.0.0.1 where nothing listens (a
// port that was free a moment ago), for tests of an unreachable endpoint.
func ClosedBaseURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/v1"
}
