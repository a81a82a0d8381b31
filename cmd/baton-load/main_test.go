package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/buffer/buffertest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/solver"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

// baton starts an in-process Baton with the simulated model.
func baton(t *testing.T) string { return batonWith(t, orchestrator.Options{}) }

// batonWith is baton with options (retry base and logger are set here).
func batonWith(t *testing.T, opts orchestrator.Options) string {
	t.Helper()
	d := time.Millisecond
	opts.RetryBase = 5 * time.Millisecond
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	orch, err := orchestrator.New(orchestrator.Models{
		Planner: &planner.Sim{Delay: d}, Solver: &solver.Sim{Delay: d}, Aggregator: &aggregator.Sim{Delay: d},
	}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(orch)
	t.Cleanup(func() {
		srv.Close()
		orch.Close(context.Background())
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// load runs the tool with args (and -json -quiet), for two minutes at
// most, and returns its report: none when it failed before one (no
// session could connect).
func load(t *testing.T, args ...string) (Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	err := run(ctx, append(args, "-json", "-quiet"), &out, &errOut)
	if err != nil && out.Len() == 0 {
		return Report{}, err
	}
	var rep Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("report: %v (run: %v)\n%s\n%s", jerr, err, out.String(), errOut.String())
	}
	return rep, err
}

// TestLoadWithDrops is the short correctness load run of the README's test
// command: dozens of sessions, every kind of run, random connection kills.
// The tool itself asserts no event was lost, duplicated or reordered.
func TestLoadWithDrops(t *testing.T) {
	url := baton(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"-url", url, "-sessions", "30", "-runs", "4", "-ramp", "200ms",
		"-drop-rate", "120", "-ack-every", "7", "-json", "-quiet"}, &out, &errOut)
	var rep Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("report: %v\n%s\n%s", jerr, out.String(), errOut.String())
	}
	if err != nil || rep.ViolationsNum != 0 {
		t.Fatalf("run: %v; violations %v", err, rep.Violations)
	}
	if rep.Runs != 30*4 || rep.Events == 0 || rep.Drops == 0 || rep.Resumes == 0 || rep.ServerErrors != 0 {
		t.Errorf("report %+v: want 120 runs, events, drops and resumes, and no server error", rep)
	}
	t.Logf("%d runs, %d events, %d drops, %d resumes, %d resyncs, %d answers and %d starts re-sent and already had, p99 %.2fms",
		rep.Runs, rep.Events, rep.Drops, rep.Resumes, rep.Resyncs, rep.ResentAnswers, rep.ResentStarts, rep.LatencyP99MS)
}

// TestLoadAdaptive: adaptive runs only — questions and plan adjustments
// the tool answers itself — with drops, and not one violation.
func TestLoadAdaptive(t *testing.T) {
	url := baton(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"-url", url, "-sessions", "12", "-runs", "4", "-ramp", "100ms", "-mix", "adaptive=1",
		"-drop-rate", "240", "-ack-every", "5", "-json", "-quiet", "-seed", "3"}, &out, &errOut)
	var rep Report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("report: %v\n%s\n%s", jerr, out.String(), errOut.String())
	}
	if err != nil || rep.ViolationsNum != 0 {
		t.Fatalf("run: %v; violations %v", err, rep.Violations)
	}
	if rep.Runs != 12*4 || rep.Drops == 0 || rep.Resumes == 0 || rep.ServerErrors != 0 {
		t.Errorf("report %+v: want 48 runs, drops and resumes, and no server error", rep)
	}
}

// TestLoadReportsViolations: the tool must fail when something is wrong.
func TestLoadReportsViolations(t *testing.T) {
	url := baton(t)
	var out bytes.Buffer
	err := run(t.Context(), []string{"-url", url, "-sessions", "2", "-runs", "1", "-mix", "plan=1",
		"-json", "-quiet", "-run-timeout", "10s"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("a healthy run failed: %v %s", err, out.String())
	}
	// A directive that makes planning fail for good: the runs end in
	// plan.cancelled, which the tool must count as violations.
	workloads["broken"] = func(*rand.Rand) workload { return workload{request: "x [sim:plan_fail=permanent*1]"} }
	defer delete(workloads, "broken")
	out.Reset()
	err = run(t.Context(), []string{"-url", url, "-sessions", "2", "-runs", "1", "-mix", "broken=1", "-json", "-quiet"}, &out, io.Discard)
	var rep Report
	json.Unmarshal(out.Bytes(), &rep)
	if err == nil || rep.ViolationsNum != 2 || !strings.Contains(rep.Violations[0], "without a final answer") {
		t.Fatalf("run: %v, report %+v; want two violations", err, rep)
	}
}

// TestLoadWithResyncs: a ring far smaller than what a session produces
// while its connection is down, so most resumes are resyncs, some spanning
// a run's start or end (the snapshot is then all the tool learns of it).
// Not one violation.
func TestLoadWithResyncs(t *testing.T) {
	url := batonWith(t, orchestrator.Options{BufferSize: 12})
	rep, err := load(t, "-url", url, "-sessions", "16", "-runs", "4", "-ramp", "100ms",
		"-drop-rate", "300", "-ack-every", "4", "-seed", "5")
	if err != nil || rep.ViolationsNum != 0 {
		t.Fatalf("run: %v; violations %v", err, rep.Violations)
	}
	if rep.Runs != 16*4 || rep.Resyncs == 0 || rep.Resumes == rep.Resyncs || rep.Duplicates != 0 || rep.ServerErrors != 0 {
		t.Errorf("report %+v: want 64 runs, resyncs and replays, no duplicate and no server error", rep)
	}
	t.Logf("%d runs, %d events, %d drops, %d resumes, %d resyncs", rep.Runs, rep.Events, rep.Drops, rep.Resumes, rep.Resyncs)
}

// TestLoadCatchesABrokenServer: a server that breaks a single replay in the
// whole load — one event again, one left out, two swapped, one labelled
// with another session's id — fails the tool.
// The break is a Ring (buffertest.Faulty) given to a real orchestrator, and
// the load goes through the tool's own run.
func TestLoadCatchesABrokenServer(t *testing.T) {
	tests := []struct {
		fault buffertest.Fault
		want  string // in a violation
	}{
		{buffertest.Duplicate, "duplicate: event seq"},
		{buffertest.Drop, "gap: event seq"},
		{buffertest.Reorder, "gap: event seq"},
		{buffertest.Foreign, "foreign frame: "},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel() // each mostly waits: for drops, and for starts sent between connections
			faults := &buffertest.Faults{Fault: tt.fault, Limit: 1}
			url := batonWith(t, orchestrator.Options{
				NewRing: func(n int) buffer.Ring { return buffertest.Faulty(buffer.NewMemory(n), faults) }})
			// Task lists only: an event lost with a question would hold the
			// run until the question expired.
			rep, err := load(t, "-url", url, "-sessions", "12", "-runs", "4", "-ramp", "50ms", "-mix", "tasks=2,flaky=1",
				"-drop-rate", "300", "-ack-every", "7", "-run-timeout", "10s")
			if faults.Broken() != 1 {
				t.Fatalf("the fault was applied %d times, want once (drops %d, resumes %d): raise the drop rate",
					faults.Broken(), rep.Drops, rep.Resumes)
			}
			if !errors.Is(err, errViolations) || !strings.Contains(strings.Join(rep.Violations, "\n"), tt.want) {
				t.Fatalf("run: %v; violations %q: want %q among them", err, rep.Violations, tt.want)
			}
			t.Logf("drops %d, resumes %d; caught: %q", rep.Drops, rep.Resumes, rep.Violations)
		})
	}
}

// TestLoadAcrossTwoNodes: two Batons share a real Redis (--store redis) —
// one server, or a 3-master Redis Cluster with a replica each; sessions
// start on either, and every drop resumes on the other one, which serves
// it from the store and forwards its commands to the owner. Not one
// event may be lost, repeated or reordered.
func TestLoadAcrossTwoNodes(t *testing.T) {
	// Each start returns a way to make a node's client of a Redis it
	// started, and the node's options for it.
	type nodeClient func() (redis.UniversalClient, redisstore.ClusterOptions)
	for _, tt := range []struct {
		name  string
		start func(t *testing.T) nodeClient
	}{
		{"one server", func(t *testing.T) nodeClient {
			rds := redistest.Start(t)
			return func() (redis.UniversalClient, redisstore.ClusterOptions) {
				return rds.Client(t), redisstore.ClusterOptions{}
			}
		}},
		{"a cluster", func(t *testing.T) nodeClient {
			rc := redistest.StartCluster(t, 3, 1)
			return func() (redis.UniversalClient, redisstore.ClusterOptions) {
				cc := rc.Client(t)
				return cc, redisstore.ClusterOptions{Shards: cc.Options(), Replicas: 1}
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := tt.start(t)
			var urls []string
			for range 2 {
				rdb, opt := client()
				opt.Capacity = buffer.DefaultCapacity
				cl, err := redisstore.NewCluster(t.Context(), rdb, opt)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() }) // after the server's Close (cleanups run last first)
				urls = append(urls, batonWith(t, orchestrator.Options{Cluster: cl}))
			}
			rep, err := load(t, "-url", urls[0], "-url", urls[1], "-resume-elsewhere", "-sessions", "20", "-runs", "3",
				"-ramp", "200ms", "-drop-rate", "120", "-ack-every", "7")
			if err != nil || rep.ViolationsNum != 0 {
				t.Fatalf("run: %v; violations %v", err, rep.Violations)
			}
			if rep.Runs != 20*3 || rep.Drops == 0 || rep.Resumes == 0 {
				t.Errorf("report %+v: want 60 runs, drops and resumes", rep)
			}
			t.Logf("%d runs, %d events, %d drops, %d resumes, %d resyncs, p99 %.2fms",
				rep.Runs, rep.Events, rep.Drops, rep.Resumes, rep.Resyncs, rep.LatencyP99MS)
		})
	}
}

// TestLoadCannotConnect: with nothing listening at the URL the tool says
// it could not connect and exits 1; that is no violation.
func TestLoadCannotConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String() + "/ws"
	ln.Close() // nothing listens there from now on
	tests := []struct {
		name string
		args []string
	}{
		{name: "runs", args: []string{"-sessions", "3", "-runs", "1", "-ramp", "0"}},
		{name: "idle", args: []string{"-idle", "2", "-hold", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), append([]string{"-url", dead, "-json", "-quiet"}, tt.args...), &out, &errOut)
			if err == nil || !strings.HasPrefix(err.Error(), "could not connect") || !strings.Contains(err.Error(), dead) ||
				errors.Is(err, errViolations) {
				t.Errorf("run = %v, want a could-not-connect error naming %s and no violation", err, dead)
			}
			if out.Len() != 0 {
				t.Errorf("a report of a load that never connected:\n%s", out.String())
			}
		})
	}
}
