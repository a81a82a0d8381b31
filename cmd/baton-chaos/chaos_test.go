package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) {
	// The test binary started by a node as the counting tool's server.
	if len(os.Args) > 1 && os.Args[1] == mcpCommand {
		if err := serveCounter(context.Background(), os.Args[2:]); err != nil {
			os.Stderr.WriteString("mcp-count: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(skipreport.Reporting(m))
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// batonBinary builds cmd/baton once per test binary, with -race when the
// test runs with it: the cluster's takeovers then run under the race
// detector too.
func batonBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath, buildErr = buildBaton(context.Background(), dir, raceEnabled)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// TestChaos is a short chaos run with a fixed seed whose schedule makes
// every fault: nothing may be lost, done twice or stranded.
func TestChaos(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipreport.Skip(t, "redis-server not found: install Debian's redis-server (7.0 or later) to run the chaos test")
	}
	const seed, duration = 6, 25 * time.Second
	args := []string{"--baton", batonBinary(t), "--seed", strconv.Itoa(seed), "--duration", duration.String(),
		"--settle", "90s", "--nodes", "3", "--clients", "4", "--fault-every", "700ms", "--drop-rate", "12", "--json", "--quiet"}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	err := run(ctx, args, &stdout, &stderr)
	var rep report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("run: %v; report: %v\n%s\n%s", err, jerr, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Errorf("run: %v", err)
	}
	if rep.Dir != "" {
		defer func() {
			if !t.Failed() {
				os.RemoveAll(rep.Dir)
			}
		}()
		for _, name := range []string{"node-a.log", "node-b.log", "node-c.log"} {
			t.Logf("%s: %s", name, filepath.Join(rep.Dir, name))
		}
	}
	// The schedule of this seed makes every fault; the run must have.
	for _, k := range kinds {
		if rep.Faults[k] == 0 {
			t.Errorf("no %s made; faults %v", k, rep.Faults)
		}
	}
	if len(rep.FaultErrors) > 0 {
		t.Errorf("faults not made or healed: %q", rep.FaultErrors)
	}
	if rep.RunsStarted == 0 || rep.Resumes == 0 || rep.Tools.Calls == 0 {
		t.Errorf("runs started %d, resumes %d, tool calls %d: the run did not exercise the cluster", rep.RunsStarted, rep.Resumes, rep.Tools.Calls)
	}
	if why := rep.failed(); why != "" {
		t.Errorf("%s\nstranded %q\nviolations %q", why, rep.Stranded, rep.Examples)
	}
	if rep.RunsEnded+rep.RunsRejected != rep.RunsStarted {
		t.Errorf("runs started %d, ended %d, lost with a rejected session %d", rep.RunsStarted, rep.RunsEnded, rep.RunsRejected)
	}
	t.Logf("report: %s", stdout.String())
}
