//go:build unix

package openaitest

import (
	"fmt"
	"syscall"
	"testing"
)

// ClosedBaseURL returns a base URL on 127.0.0.1 where a connection is
// refused, for tests of an unreachable endpoint. Its port stays bound to
// a socket that never listens, until the test ends: a port merely freed
// could be taken meanwhile by a listener of a test running beside it
// (seen: the request then read EOF, not "connection refused").
func ClosedBaseURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("the bound socket's address is %T", sa)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/v1", in.Port)
}
