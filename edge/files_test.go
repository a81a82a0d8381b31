//go:build linux

package edge

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// filesHelperEnv starts the test binary as filesHelper, with the file
// limit and cap it names: "LIMIT:MAXCONNS".
const filesHelperEnv = "EDGE_TEST_FILES_HELPER"

// filesHelper serves on a Listener in a process limited to LIMIT open
// files: it prints its address, serves until its stdin closes, then
// prints "out_of_files=N shed=M" and exits.
func filesHelper() int {
	limit, maxConns, _ := strings.Cut(os.Getenv(filesHelperEnv), ":")
	n, _ := strconv.ParseUint(limit, 10, 64)
	mc, _ := strconv.Atoi(maxConns)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
		fmt.Println("setrlimit:", err)
		return 1
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		return 1
	}
	l := Listen(inner, &ListenOptions{MaxConns: mc, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	srv := &http.Server{Handler: okHandler, ErrorLog: nil}
	go srv.Serve(l)
	fmt.Println(l.Addr())
	io.Copy(io.Discard, os.Stdin)
	srv.Close()
	fmt.Printf("out_of_files=%d shed=%d\n", l.outOfFiles.Load(), l.shed.Load())
	return 0
}

// TestFileLimit: in a process allowed 64 open files, 150 clients each
// holding a connection. Without a cap, the accepts past the last
// descriptor fail with EMFILE: each such connection is taken on the spare
// descriptor and answered 503 (or reset), never left in the backlog for
// accept to fail on in a loop — one failed accept per connection shed —
// and net/http never logs "too many open files". With the cap
// ConnsForFileLimit derives, the accepts never run out of descriptors and
// every connection beyond the cap gets a whole 503. Either way the
// connections served keep being served, and once they close new ones are.
func TestFileLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	const limit, clients = 64, 150
	tests := []struct {
		name     string
		maxConns int
	}{
		{"no cap: the spare descriptor", 0},
		{"the cap from the file limit", ConnsForFileLimit(limit)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d", filesHelperEnv, limit, tt.maxConns))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := false
			defer func() {
				stdin.Close()
				if !waited {
					cmd.Wait()
				}
			}()
			out := bufio.NewScanner(stdout)
			if !out.Scan() {
				t.Fatal("the helper did not start")
			}
			addr := out.Text()

			var served, refused, reset []*rawConn
			for range clients {
				c := dialFrom(t, addr, "")
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
					reset = append(reset, c)
					continue
				}
				resp, err := http.ReadResponse(c.br, nil)
				switch {
				case err != nil && isTimeout(err):
					t.Fatalf("a connection got no answer in 10 s: left in the backlog")
				case err != nil:
					reset = append(reset, c) // shed, its request unread: closing reset it
				case resp.StatusCode == http.StatusOK:
					io.Copy(io.Discard, resp.Body)
					served = append(served, c) // kept open: it holds a descriptor
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
					c.Close() // as a client does after Connection: close
					refused = append(refused, c)
				default:
					t.Fatalf("status %d", resp.StatusCode)
				}
			}
			t.Logf("%d served, %d refused with 503, %d reset", len(served), len(refused), len(reset))
			if len(served) < 20 || len(served)+len(refused)+len(reset) != clients {
				t.Fatalf("%d served, %d refused, %d reset of %d", len(served), len(refused), len(reset), clients)
			}
			if tt.maxConns > 0 && (len(served) != tt.maxConns || len(reset) != 0) {
				t.Fatalf("with a cap of %d: %d served, %d reset; want the cap served and the others refused whole", tt.maxConns, len(served), len(reset))
			}
			for _, c := range served { // served still
				if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				if resp, err := http.ReadResponse(c.br, nil); err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("a connection served before: %v", err)
				}
			}
			for _, c := range served {
				c.Close()
			}
			deadline := time.Now().Add(10 * time.Second)
			tries := 0
			for { // once they closed, a new connection is served
				tries++
				c := dialFrom(t, addr, "")
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
				resp, err := http.ReadResponse(c.br, nil)
				c.Close()
				if err == nil && resp.StatusCode == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no connection served after the others closed: %v", err)
				}
			}
			stdin.Close()
			if !out.Scan() {
				t.Fatalf("no stats from the helper; its stderr: %s", stderr.String())
			}
			waited = true
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the helper: %v; its stderr: %s", err, stderr.String())
			}
			var outOfFiles, shed int
			fmt.Sscanf(out.Text(), "out_of_files=%d shed=%d", &outOfFiles, &shed)
			t.Logf("accepts out of files: %d; shed on the spare: %d", outOfFiles, shed)
			if tt.maxConns > 0 && outOfFiles != 0 {
				t.Fatalf("with the cap, %d accepts ran out of files", outOfFiles)
			}
			if outOfFiles > shed+5 || shed > len(refused)+len(reset)+tries {
				t.Fatalf("%d accepts out of files for %d connections shed: accept spun", outOfFiles, shed)
			}
			if strings.Contains(stderr.String(), "too many open files; retrying") {
				t.Fatalf("net/http retried accepts: %s", stderr.String())
			}
		})
	}
}
