package skipreport

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(Reporting(m)) }

// TestLines: the report has one line per reason, sorted, with the count
// of tests skipped for it.
func TestLines(t *testing.T) {
	type skip struct{ test, reason string }
	tests := []struct {
		name  string
		skips []skip
		want  []string
	}{
		{name: "nothing skipped"},
		{name: "one test", skips: []skip{{"TestA", "redis-server not found"}},
			want: []string{"SKIPPED 1 test in ./pkg: redis-server not found"}},
		{name: "reasons apart, sorted", skips: []skip{
			{"TestA", "redis-server not found"}, {"TestB", "node not found"},
			{"TestC/sub", "redis-server not found"}, {"BenchmarkD", "redis-server not found"},
		}, want: []string{
			"SKIPPED 1 test in ./pkg: node not found",
			"SKIPPED 3 tests in ./pkg: redis-server not found",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marks := 0
			r := &registry{mark: func(string, string) { marks++ }}
			for _, s := range tt.skips {
				r.add(s.test, s.reason)
			}
			if got := r.lines("./pkg"); !slices.Equal(got, tt.want) {
				t.Errorf("lines = %q, want %q", got, tt.want)
			}
			if want := min(len(tt.skips), 1); marks != want {
				t.Errorf("the run was marked uncacheable %d times, want %d", marks, want)
			}
		})
	}
}

// fakeT stands in for a test in Skip, to see how Skip ends it; Skipf and
// Fatalf end its goroutine as testing's do.
type fakeT struct {
	testing.TB
	name            string
	skipped, failed string
	cleanups        []func()
}

func (f *fakeT) Helper()          {}
func (f *fakeT) Name() string     { return f.name }
func (f *fakeT) Skipped() bool    { return f.skipped != "" }
func (f *fakeT) Cleanup(c func()) { f.cleanups = append(f.cleanups, c) }

func (f *fakeT) Skipf(format string, args ...any) {
	f.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestSkip: Skip fails under any non-empty CI and without Reporting in
// TestMain; otherwise it skips, and the test counts once it has ended
// skipped.
func TestSkip(t *testing.T) {
	tests := []struct {
		name      string
		ci        string
		reporting bool
		wantSkip  bool
	}{
		{name: "locally", reporting: true, wantSkip: true},
		{name: "CI=true", ci: "true", reporting: true},
		{name: "CI=1", ci: "1", reporting: true},
		{name: "CI=yes, as some CI systems set it", ci: "yes", reporting: true},
		{name: "no Reporting in TestMain", reporting: false},
	}
	const reason = "frobnicator not found: install Debian's frobnicator"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CI", tt.ci)
			saved, was := skipped, reportInstalled.Load()
			skipped = &registry{}
			reportInstalled.Store(tt.reporting)
			defer func() { skipped = saved; reportInstalled.Store(was) }()

			f := &fakeT{TB: t, name: "TestNeedsFrobnicator"}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Skip(f, reason)
				f.failed = "Skip returned"
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Skip did not end the test")
			}
			for _, c := range f.cleanups {
				c()
			}
			got := skipped.lines("./pkg")
			if tt.wantSkip {
				if f.failed != "" || !strings.Contains(f.skipped, reason) {
					t.Errorf("skipped %q, failed %q; want a skip saying %q", f.skipped, f.failed, reason)
				}
				if want := []string{"SKIPPED 1 test in ./pkg: " + reason}; !slices.Equal(got, want) {
					t.Errorf("report = %q, want %q", got, want)
				}
				return
			}
			if f.skipped != "" || !strings.Contains(f.failed, reason) {
				t.Errorf("skipped %q, failed %q; want a failure saying %q", f.skipped, f.failed, reason)
			}
			if len(got) != 0 {
				t.Errorf("a failed test is reported as skipped: %q", got)
			}
		})
	}
}

// TestGoTest runs go test on testdata/skipper, whose tests skip, as a user
// would, and reads what reached the go command's output: without -v the
// go command hides a passing binary's output, and the report must still
// show; in a file, it must not tear the go command's lines.
func TestGoTest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the go command's stderr is reached through /proc: Linux only")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command (go test puts it on PATH): %v", err)
	}
	const (
		report = "SKIPPED 2 tests in ./internal/skipreport/testdata/skipper: the skipper's program is missing\n"
		ok     = "ok  \tgithub.com/baton-run/baton/internal/skipreport/testdata/skipper\t"
	)
	tests := []struct {
		name string
		args []string
		out  string // "pipe", or how the file is opened: "truncate" (sh's >), "append" (>>)
		// wantReport: whether the report must show; a file the go command
		// does not append to may go without it (the parent's descriptor
		// cannot always be shared), but never torn.
		wantReport bool
	}{
		{name: "pipe", out: "pipe", wantReport: true},
		{name: "pipe, -v", args: []string{"-v"}, out: "pipe", wantReport: true},
		{name: "file, appended", out: "append", wantReport: true},
		{name: "file, truncated", out: "truncate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"test", "-count=1"}, tt.args...)
			cmd := exec.Command(goBin, append(args, "./testdata/skipper")...)
			cmd.Env = append(os.Environ(), "CI=")
			var got []byte
			if tt.out == "pipe" {
				got, err = cmd.CombinedOutput()
			} else {
				path := filepath.Join(t.TempDir(), "out.txt")
				flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
				if tt.out == "append" {
					flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
				}
				f, ferr := os.OpenFile(path, flags, 0o644)
				if ferr != nil {
					t.Fatal(ferr)
				}
				cmd.Stdout, cmd.Stderr = f, f
				err = cmd.Run()
				f.Close()
				got, _ = os.ReadFile(path)
			}
			if err != nil {
				t.Fatalf("go test: %v\n%s", err, got)
			}
			out := string(got)
			if tt.wantReport && strings.Count(out, report) != 1 {
				t.Errorf("go test's output holds the report %d times, want once:\n%s", strings.Count(out, report), out)
			}
			rest := strings.Replace(out, report, "", 1)
			if slices.Contains(tt.args, "-v") {
				return
			}
			if !strings.HasPrefix(rest, ok) || strings.Count(rest, "\n") != 1 {
				t.Errorf("go test's output is not the report and the ok line:\n%q", out)
			}
		})
	}
}
