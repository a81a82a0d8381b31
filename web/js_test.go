package web

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
		skipreport.Skip(t, "node not found: install Node ≥ 20 (Debian's nodejs) to test web/static/baton-client.js")
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

// TestJS runs the client's unit tests with Node's test runner — exactly
// `node --test --experimental-websocket web/test/` from the repository's
// root — and passes their output through.
func TestJS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := nodeCommand(ctx, t, nil, "--test", "--experimental-websocket", "web/test/")
	cmd.Dir = ".." // the repository's root
	cmd.Stdout = t.Output()
	cmd.Stderr = t.Output()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node --test web/test/: %v (ctx: %v)", err, ctx.Err())
	}
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
