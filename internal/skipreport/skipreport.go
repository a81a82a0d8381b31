// Package skipreport holds the tests a test binary skipped because a
// program they run for real is missing (redis-server, node, npm,
// Chromium), and says so after the tests, one line per reason, even
// where the go command hides the test binary's output:
//
//	SKIPPED 19 tests in ./redisstore: redis-server not found: install Debian's redis-server (7.0 or later) to run the Redis tests
//
// A helper that finds the program missing calls Skip. When the
// environment variable CI is set to anything, Skip fails the test instead:
// CI never passes without running every test. A package whose tests can
// skip this way wraps its TestMain's M with Reporting (Skip fails a test
// of a package that does not), inside whatever else wraps it:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }
//
// Where the line goes. In package list mode (go test ./..., go test
// ./redisstore/) the go command prints nothing a passing test binary
// writes, stdout and stderr alike, unless -v is given: only its
// "ok  pkg" line. So without -v, when the binary's stderr is not the go
// command's own (it is a pipe the go command reads), the report is
// written to the go command's stderr, the terminal or log the user reads.
// On Linux that file is reached through the parent process: a duplicate
// of its descriptor by pidfd_getfd(2) when the system allows (the same
// open file, with its offset), or else /proc/<ppid>/fd/2 opened anew —
// except a regular file the go command does not append to, where a
// second offset would have the go command's next line overwrite the
// report. Where neither works (and on other systems), and under -v or
// after a failure, when the go command prints the output anyway, the
// report goes to the binary's stderr.
//
// The go command caches a passing package's result and replays only its
// "ok" line, and it does not see that a program has been installed since
// (paths outside the module are not inputs it checks). A run that skipped
// is therefore made uncacheable: the first skip writes last-skipped.txt
// beside this file (ignored by git), and the go command refuses to cache
// a run that opened a file changed moments before.
package skipreport

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Skip ends t because a program it needs is missing; reason says which
// and how to install it. When CI is set, t fails. Otherwise t is skipped
// and, once it has ended skipped, counted under reason in the report. It
// fails t as well when the package's TestMain does not use Reporting.
// Skip calls only t's Skipf and Fatalf to end it.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if ci := os.Getenv("CI"); ci != "" {
		t.Fatalf("%s (CI=%s: a missing program fails the test rather than skipping it)", reason, ci)
	}
	if !reportInstalled.Load() {
		t.Fatalf("%s; and this package's TestMain does not wrap its M with skipreport.Reporting, "+
			"so the skip would go unreported", reason)
	}
	t.Cleanup(func() {
		if t.Skipped() {
			skipped.add(t.Name(), reason)
		}
	})
	t.Skipf("SKIPPED: %s (set CI to fail instead)", reason)
}

// Any reports whether a test of this binary has been skipped through Skip.
func Any() bool { return skipped.len() > 0 }

// TestingM is what TestMain runs: *testing.M, or a wrapper of it.
type TestingM interface{ Run() int }

// Reporting returns m, whose Run also reports, after the tests, what Skip
// skipped (see the package doc for where).
func Reporting(m TestingM) TestingM { return reporting{m} }

type reporting struct{ m TestingM }

// reportInstalled is set once a Reporting M runs the tests.
var reportInstalled atomic.Bool

func (r reporting) Run() int {
	reportInstalled.Store(true)
	code := r.m.Run()
	lines := skipped.lines(packageDir())
	if len(lines) == 0 {
		return code
	}
	text := strings.Join(lines, "\n") + "\n"
	var out io.Writer = os.Stderr
	if !testing.Verbose() && code == 0 {
		if f := goStderr(); f != nil {
			defer f.Close()
			out = f
		}
	}
	io.WriteString(out, text)
	return code
}

// registry is the tests skipped, by reason.
type registry struct {
	// mu guards byReason: parallel tests end concurrently.
	mu       sync.Mutex
	byReason map[string][]string // test names

	mark   func(test, reason string) // called at the first skip, if set
	marked sync.Once
}

// skipped is this binary's registry.
var skipped = &registry{mark: markUncacheable}

func (r *registry) add(test, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byReason == nil {
		r.byReason = make(map[string][]string)
	}
	r.byReason[reason] = append(r.byReason[reason], test)
	if r.mark != nil {
		r.marked.Do(func() { r.mark(test, reason) })
	}
}

func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byReason)
}

// lines returns the report, one line per reason, sorted by reason.
func (r *registry) lines(pkg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for _, reason := range slices.Sorted(maps.Keys(r.byReason)) {
		n := len(r.byReason[reason])
		noun := "tests"
		if n == 1 {
			noun = "test"
		}
		lines = append(lines, fmt.Sprintf("SKIPPED %d %s in %s: %s", n, noun, pkg, reason))
	}
	return lines
}

// packageDir returns the tested package's directory (the go command runs
// a test binary there) relative to its module's root, as ./redisstore.
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "this package"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return wd
			}
			if rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}

// markUncacheable writes last-skipped.txt beside this source file while
// the tests run (the go command's record of the files a test opens stops
// when they end). The go command takes the file for an input of the run
// and refuses to cache a result whose inputs changed within the last
// seconds. A failure only leaves the result cacheable.
func markUncacheable(test, reason string) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return
	}
	text := fmt.Sprintf("%s: %s skipped: %s\n(written by internal/skipreport so that the go command does not cache this run)\n",
		packageDir(), test, reason)
	_ = os.WriteFile(filepath.Join(filepath.Dir(self), "last-skipped.txt"), []byte(text), 0o644)
}
