package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/metricstest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// want is a value a series of /metrics must reach: at least min, or
// exactly min when exact.
type want struct {
	name, series string
	min          float64
	exact        bool
}

// metricsReach scrapes base's /metrics until every w holds (each a
// condition that stays true once the server has done what the test
// waited for), and returns the last page; it fails after 10 s.
func metricsReach(t *testing.T, base string, ws ...want) metricstest.Page {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		page := metricstest.Scrape(t, base+"/metrics")
		var miss []string
		for _, w := range ws {
			v, ok := page.Sum(w.name, w.series)
			if !ok || v < w.min || (w.exact && v != w.min) {
				miss = append(miss, fmt.Sprintf("%s{%s} = %v (present %v), want %v", w.name, w.series, v, ok, w.min))
			}
		}
		if len(miss) == 0 {
			return page
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics did not reach what the test did:\n%s", joinLines(miss))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func joinLines(lines []string) string {
	b, _ := json.MarshalIndent(lines, "", "  ")
	return string(b)
}

// TestMetrics: /metrics exposes every family, and each moves as a run
// goes: a planned run whose edited plan has a task that fails once
// (network) and is retried, then a replay, a resync and a rejected resume
// of its session.
func TestMetrics(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--buffer-size", "16", "--retry-base", "1ms")

	page := metricstest.Scrape(t, base+"/metrics")
	for _, family := range []string{
		"baton_connections", "baton_connections_opened_total", "baton_connections_closed_total",
		"baton_sessions", "baton_sessions_opened_total", "baton_sessions_closed_total",
		"baton_events_total", "baton_resumes_total", "baton_resume_replayed_events_total",
		"baton_send_queue_overflows_total", "baton_ring_fill_ratio", "baton_rings_full",
		"baton_runs_started_total", "baton_failures_total", "baton_retries_total", "baton_model_tokens_total",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !page.Has(family) {
			t.Errorf("/metrics lacks %s before any run", family)
		}
	}

	c, hello := connect(t, base)
	_, confirm := runToConfirm(t, c, "Plan a small garden")
	c.respond(confirm.StepID, map[string]any{"confirmed": true, "tasks": []wsproto.Task{
		{ID: "a", Title: "Flaky", Description: "[sim:fail=network*1]", DependsOn: []string{}},
		{ID: "b", Title: "Steady", DependsOn: []string{"a"}},
	}})
	frames := c.until(wsproto.EventFinalAnswer)
	latest := frames[len(frames)-1].Seq
	if latest <= 16 {
		t.Fatalf("the run has %d events; the resync below needs more than the ring's 16", latest)
	}

	replay := resume(t, base, hello, latest-1, "")
	if m := meta[wsproto.Connected](t, replay.expect(wsproto.EventConnected)); m.Resync || m.Replayed == nil || *m.Replayed != 1 {
		t.Fatalf("resume from %d: %+v, want a replay of 1", latest-1, m)
	}
	resync := resume(t, base, hello, 0, "")
	if m := meta[wsproto.Connected](t, resync.expect(wsproto.EventConnected)); !m.Resync {
		t.Fatalf("resume from 0: %+v, want a resync", m)
	}
	rejected := resume(t, base, wsproto.Connected{SessionID: hello.SessionID, ResumeToken: "wrong"}, 0, "")
	rejected.expectError(wsproto.CodeResumeRejected)

	page = metricsReach(t, base,
		want{"baton_events_total", `event="agent.final_answer"`, 1, true},
		want{"baton_events_total", `event="solver.start"`, 3, true}, // a twice, b once
		want{"baton_events_total", "", float64(latest), true},
		want{"baton_runs_started_total", `kind="plan"`, 1, true},
		want{"baton_runs_ended_total", `outcome="succeeded",reason=""`, 1, true},
		want{"baton_failures_total", `stage="task",error_type="network"`, 1, true},
		want{"baton_retries_total", `stage="task",error_type="network"`, 1, true},
		want{"baton_stage_duration_seconds_count", `stage="plan"`, 1, true},
		want{"baton_stage_duration_seconds_count", `stage="solve"`, 1, true},
		want{"baton_stage_duration_seconds_count", `stage="aggregate"`, 1, true},
		want{"baton_confirm_wait_seconds_count", `kind="plan_confirm"`, 1, true},
		want{"baton_model_call_duration_seconds_count", `call="plan",result="ok"`, 1, true},
		want{"baton_model_call_duration_seconds_count", `call="turn",result="network"`, 1, true},
		want{"baton_model_call_duration_seconds_count", `call="turn",result="ok"`, 2, false},
		want{"baton_model_call_duration_seconds_count", `call="aggregate",result="ok"`, 1, true},
		want{"baton_resumes_total", `outcome="replay"`, 1, true},
		want{"baton_resumes_total", `outcome="resync"`, 1, true},
		want{"baton_resumes_total", `outcome="rejected"`, 1, true},
		want{"baton_resume_replayed_events_total", "", 1, true},
		// c, then the replaying connection, were replaced (4000).
		want{"baton_connections_closed_total", `end="replaced"`, 2, true},
		want{"baton_connections", "", 2, true}, // resync and rejected
		want{"baton_connections_opened_total", "", 4, true},
		// The run's session, full of unacked events, and rejected's fresh one.
		want{"baton_sessions", "", 2, true},
		want{"baton_ring_fill_ratio_count", "", 2, true},
		want{"baton_rings_full", "", 1, true},
		want{"baton_send_queue_overflows_total", "", 0, true},
	)
	if h := healthz(t, base); h.Sessions != 2 || h.Connections != 2 {
		t.Errorf("/healthz %+v disagrees with /metrics", h)
	}
	if t.Failed() {
		t.Log(page.Lines("baton_"))
	}
}

// TestReadyz: ready while serving; with the Redis store, not ready while
// Redis does not answer, and ready again when it does. (Not ready while
// draining: drain_test.go.)
func TestReadyz(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		base := startServer(t)
		if code, body := readyz(t, base); code != http.StatusOK || body["status"] != "ready" {
			t.Errorf("/readyz %d %v, want 200 ready", code, body)
		}
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rds := redistest.Start(t)
		n := startNode(t, "A", "127.0.0.1:0", rds.URL())
		base := "http://" + n.addr
		if code, body := readyz(t, base); code != http.StatusOK {
			t.Fatalf("/readyz %d %v with Redis up, want 200", code, body)
		}
		rds.Kill(t)
		eventually(t, "/readyz 503 with Redis down", func() bool {
			code, body := readyz(t, base)
			return code == http.StatusServiceUnavailable && body["reason"] == "redis unreachable"
		})
		if h := healthz(t, base); h.Status != "ok" {
			t.Errorf("/healthz %+v with Redis down: liveness must not depend on Redis", h)
		}
		rds.Restart(t)
		eventually(t, "/readyz 200 with Redis back", func() bool {
			code, _ := readyz(t, base)
			return code == http.StatusOK
		})
	})
}

// readyz GETs /readyz and decodes its body.
func readyz(t *testing.T, base string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	return resp.StatusCode, body
}
