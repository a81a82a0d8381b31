package web

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/skipreport"
)

var update = flag.Bool("update", false, "rewrite testdata/checksum-chain.json")

// nodeBin returns the node binary. Without it the JavaScript tests are
// skipped and reported (internal/skipreport) — unless CI is set, where
// they fail.
func nodeBin(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipreport.Skip(t, "node not found: install Node ≥ 20 (Debian's nodejs) to test web/static/baton-client.mjs")
	}
	return node
}

// nodeCommand is node with args, run in this package's directory, killed
// when ctx ends, with env added to the test's environment.
func nodeCommand(ctx context.Context, t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, nodeBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second // a child that keeps the pipes open must not hang Wait
	return cmd
}

// TestJS runs the client's unit tests with Node's test runner — as
// `node --test --experimental-websocket --test-reporter=tap web/test/*.test.mjs`
// from the repository's root — and passes their output through. Node's
// runner exits 0 when it found no test at all (a renamed directory, a
// glob Node reads differently), and Node 20 counts a file that defines
// no test as one passing test named by its path; so the test also reads
// the TAP output and fails unless tests ran and every file had its own.
func TestJS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join("test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no web/test/*.test.mjs to run (%v)", err)
	}
	args := []string{"--test", "--experimental-websocket", "--test-reporter=tap"}
	for _, f := range files {
		args = append(args, filepath.ToSlash(filepath.Join("web", f)))
	}
	cmd := nodeCommand(ctx, t, nil, args...)
	cmd.Dir = ".." // the repository's root
	var out strings.Builder
	cmd.Stdout = io.MultiWriter(t.Output(), &out)
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test web/test/: %v (ctx: %v)", err, ctx.Err())
	}
	sum, err := parseNodeSummary(out.String())
	if err != nil {
		t.Fatalf("node --test web/test/: %v", err)
	}
	if len(sum.emptyFiles) > 0 {
		t.Fatalf("node --test ran no test in %s", strings.Join(sum.emptyFiles, ", "))
	}
	if sum.tests == 0 || sum.pass != sum.tests-sum.skipped-sum.todo {
		t.Fatalf("node --test web/test/ exited 0 but ran %d tests (%d passed, %d skipped, %d todo): want some, all passed",
			sum.tests, sum.pass, sum.skipped, sum.todo)
	}
}

// nodeSummary is the totals node --test prints last, and the files that
// ran no test.
type nodeSummary struct {
	tests, pass, skipped, todo int
	emptyFiles                 []string
}

// parseNodeSummary reads node --test's output: the totals, the TAP
// reporter's "# tests 63" lines or the spec reporter's "ℹ tests 63"; and
// the top-level TAP tests named by a file's path, which is how Node 20
// reports a file that defines no test.
func parseNodeSummary(out string) (nodeSummary, error) {
	var sum nodeSummary
	fields := map[string]*int{"tests": &sum.tests, "pass": &sum.pass, "skipped": &sum.skipped, "todo": &sum.todo}
	seen := make(map[string]bool)
	for line := range strings.Lines(out) {
		if name, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "# Subtest: "); ok && strings.HasSuffix(name, ".mjs") {
			sum.emptyFiles = append(sum.emptyFiles, name)
		}
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "# ")
		if !ok {
			rest, ok = strings.CutPrefix(line, "ℹ ")
		}
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(rest, " ")
		if p := fields[name]; ok && p != nil {
			n, err := strconv.Atoi(value)
			if err != nil {
				return nodeSummary{}, fmt.Errorf("a summary line that does not parse: %q", line)
			}
			*p, seen[name] = n, true
		}
	}
	if !seen["tests"] || !seen["pass"] {
		return nodeSummary{}, errors.New("no summary (\"# tests N\" and \"# pass N\") in its output")
	}
	return sum, nil
}

// checksumFixture is testdata/checksum-chain.json: a §3.4 chain computed by
// the server's code, which web/test/checksum.test.mjs checks the client's
// against.
type checksumFixture struct {
	Comment string `json:"comment"`
	Chain   []struct {
		EventID  string `json:"event_id"`
		Checksum string `json:"checksum"`
	} `json:"chain"`
}

// TestChecksumFixture keeps testdata/checksum-chain.json true to
// buffer.NextChecksum (go test -run ChecksumFixture -update rewrites it).
func TestChecksumFixture(t *testing.T) {
	ids := []string{
		"0190f5a2-7b3c-7d4e-8f10-112233445566",
		"0190f5a2-7b3c-7d4e-8f10-112233445567",
		"01a2037e-0000-7000-8000-000000000000",
		"", // an empty id still changes the chain
		"événement-é",
		"日本語のイベント",
		"emoji-🎉-and-𝄞",
		strings.Repeat("x", 200), // a message longer than one SHA-256 block
	}
	for i := range 24 {
		ids = append(ids, fmt.Sprintf("0191%04x-1c2d-7e3f-9a4b-%012x", i, i*7919))
	}
	var want checksumFixture
	want.Comment = "c(n) = hex(sha256(c(n-1) + event_id(n))), c(0) = \"\", by buffer.NextChecksum; checked by TestChecksumFixture"
	sum := ""
	for _, id := range ids {
		sum = buffer.NextChecksum(sum, id)
		want.Chain = append(want.Chain, struct {
			EventID  string `json:"event_id"`
			Checksum string `json:"checksum"`
		}{id, sum})
	}
	path := filepath.Join("testdata", "checksum-chain.json")
	if *update {
		b, err := json.MarshalIndent(want, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got checksumFixture
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Chain) != len(want.Chain) {
		t.Fatalf("%s has %d links, want %d (go test -run ChecksumFixture -update)", path, len(got.Chain), len(want.Chain))
	}
	for i := range want.Chain {
		if got.Chain[i] != want.Chain[i] {
			t.Errorf("%s link %d = %+v, want %+v (go test -run ChecksumFixture -update)", path, i, got.Chain[i], want.Chain[i])
		}
	}
}

// TestParseNodeSummary: TestJS finds node's totals in either reporter's
// output and refuses output without them.
func TestParseNodeSummary(t *testing.T) {
	const tap = "TAP version 13\nok 1 - a\n  ---\n  duration_ms: 1\n  ...\n1..63\n# tests 63\n# suites 0\n# pass 61\n# fail 0\n# cancelled 0\n# skipped 1\n# todo 1\n# duration_ms 8029.2\n"
	tests := []struct {
		name    string
		out     string
		want    nodeSummary
		wantErr string
	}{
		{name: "tap", out: tap, want: nodeSummary{tests: 63, pass: 61, skipped: 1, todo: 1}},
		{name: "tap, no tests", out: "TAP version 13\n1..0\n# tests 0\n# suites 0\n# pass 0\n# fail 0\n", want: nodeSummary{}},
		{name: "tap, a file without tests", out: "TAP version 13\n# Subtest: /r/web/test/empty.test.mjs\nok 1 - /r/web/test/empty.test.mjs\n" +
			"# Subtest: a test\n    # Subtest: a nested test in x.mjs\nok 2 - a test\n1..2\n# tests 3\n# pass 3\n",
			want: nodeSummary{tests: 3, pass: 3, emptyFiles: []string{"/r/web/test/empty.test.mjs"}}},
		{name: "spec", out: "✔ a (1.2ms)\nℹ tests 5\nℹ suites 0\nℹ pass 5\nℹ fail 0\nℹ duration_ms 40\n", want: nodeSummary{tests: 5, pass: 5}},
		{name: "no summary", out: "TAP version 13\nok 1 - a\n", wantErr: "no summary"},
		{name: "empty", out: "", wantErr: "no summary"},
		{name: "a count that does not parse", out: "# tests many\n# pass 1\n", wantErr: "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNodeSummary(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseNodeSummary = %+v, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("parseNodeSummary = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
