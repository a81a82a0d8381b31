package metrics_test

import (
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-run/baton/internal/metricstest"
	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/wsproto"
)

// TestObserverCalls: each Observer call moves the series it should.
func TestObserverCalls(t *testing.T) {
	for _, tt := range []struct {
		name   string
		do     func(m *metrics.Metrics)
		metric string // the family
		series string // its labels as exposed, "" for none
		want   float64
	}{
		{"a connection open", func(m *metrics.Metrics) { m.ConnOpened() }, "baton_connections", "", 1},
		{"a connection opened and closed", func(m *metrics.Metrics) { m.ConnOpened(); m.ConnClosed(orchestrator.EndTooSlow) },
			"baton_connections", "", 0},
		{"how a connection ended", func(m *metrics.Metrics) { m.ConnOpened(); m.ConnClosed(orchestrator.EndTooSlow) },
			"baton_connections_closed_total", `end="too_slow"`, 1},
		{"sessions held", func(m *metrics.Metrics) { m.SessionOpened(false); m.SessionOpened(true); m.SessionClosed() },
			"baton_sessions", "", 1},
		{"a session taken over", func(m *metrics.Metrics) { m.SessionOpened(true) },
			"baton_sessions_opened_total", `origin="taken_over"`, 1},
		{"events by type", func(m *metrics.Metrics) {
			m.Event(wsproto.EventSolverProgress)
			m.Event(wsproto.EventSolverProgress)
		}, "baton_events_total", `event="solver.progress"`, 2},
		{"an event type the list lacks", func(m *metrics.Metrics) { m.Event("solver.new_thing") },
			"baton_events_total", `event="solver.new_thing"`, 1},
		{"a replay", func(m *metrics.Metrics) { m.Resumed(orchestrator.ResumeReplay, 7) }, "baton_resumes_total", `outcome="replay"`, 1},
		{"events replayed", func(m *metrics.Metrics) {
			m.Resumed(orchestrator.ResumeReplay, 7)
			m.Resumed(orchestrator.ResumeReplay, 3)
		}, "baton_resume_replayed_events_total", "", 10},
		{"a rejected resume", func(m *metrics.Metrics) { m.Resumed(orchestrator.ResumeRejected, 0) },
			"baton_resumes_total", `outcome="rejected"`, 1},
		{"an overflow", func(m *metrics.Metrics) { m.SendOverflow() }, "baton_send_queue_overflows_total", "", 1},
		{"a run started", func(m *metrics.Metrics) { m.RunStarted(orchestrator.RunTasks) }, "baton_runs_started_total", `kind="tasks"`, 1},
		{"a run cancelled at shutdown", func(m *metrics.Metrics) { m.RunEnded("cancelled", "server_closed") },
			"baton_runs_ended_total", `outcome="cancelled",reason="server_closed"`, 1},
		{"a run handed over at shutdown", func(m *metrics.Metrics) { m.RunEnded(orchestrator.OutcomeHandedOver, "") },
			"baton_runs_ended_total", `outcome="handed_over",reason=""`, 1},
		{"a task's failure", func(m *metrics.Metrics) { m.Failure(orchestrator.StageTask, "network") },
			"baton_failures_total", `error_type="network",stage="task"`, 1},
		{"a plan retried", func(m *metrics.Metrics) { m.Retry(orchestrator.StagePlan, "rate_limit") },
			"baton_retries_total", `error_type="rate_limit",stage="plan"`, 1},
		{"tokens", func(m *metrics.Metrics) {
			m.ModelCall(orchestrator.CallTurn, orchestrator.ResultOK, time.Second, wsproto.Usage{PromptTokens: 40, CompletionTokens: 2})
		}, "baton_model_tokens_total", `call="turn",kind="prompt"`, 40},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New()
			tt.do(m)
			if got := value(t, m, tt.metric, tt.series); got != tt.want {
				t.Errorf("%s{%s} = %v, want %v", tt.metric, tt.series, got, tt.want)
			}
		})
	}
}

// TestHistograms: stage durations, confirmation waits and model calls are
// observed in seconds.
func TestHistograms(t *testing.T) {
	m := metrics.New()
	m.StageDone(orchestrator.StageSolve, 1500*time.Millisecond)
	m.StageDone(orchestrator.StageSolve, 500*time.Millisecond)
	m.ConfirmWaited(wsproto.ConfirmPlan, 3*time.Second)
	m.ModelCall(orchestrator.CallPlan, "timeout", 2*time.Second, wsproto.Usage{})
	for _, tt := range []struct {
		name, series string
		want         float64
	}{
		{"baton_stage_duration_seconds_count", `stage="solve"`, 2},
		{"baton_stage_duration_seconds_sum", `stage="solve"`, 2},
		{"baton_stage_duration_seconds_bucket", `stage="solve",le="1"`, 1},
		{"baton_confirm_wait_seconds_sum", `kind="plan_confirm"`, 3},
		{"baton_model_call_duration_seconds_count", `call="plan",result="timeout"`, 1},
	} {
		if got := value(t, m, tt.name, tt.series); got != tt.want {
			t.Errorf("%s{%s} = %v, want %v", tt.name, tt.series, got, tt.want)
		}
	}
}

// TestRingFill: ring fill is sampled at each scrape from what WatchRings
// was given.
func TestRingFill(t *testing.T) {
	m := metrics.New()
	if got := value(t, m, "baton_ring_fill_ratio_count", ""); got != 0 {
		t.Errorf("before WatchRings: %v rings sampled", got)
	}
	rings := [][2]int{{0, 10}, {5, 10}, {10, 10}}
	m.WatchRings(func(fn func(held, capacity int)) {
		for _, r := range rings {
			fn(r[0], r[1])
		}
	})
	for _, tt := range []struct {
		name, series string
		want         float64
	}{
		{"baton_ring_fill_ratio_count", "", 3},
		{"baton_ring_fill_ratio_sum", "", 1.5},
		{"baton_ring_fill_ratio_bucket", `le="0.5"`, 2},
		{"baton_ring_fill_ratio_bucket", `le="0.9"`, 2},
		{"baton_rings_full", "", 1},
	} {
		if got := value(t, m, tt.name, tt.series); got != tt.want {
			t.Errorf("%s{%s} = %v, want %v", tt.name, tt.series, got, tt.want)
		}
	}
}

// TestLint: the registry passes Prometheus's own metric lint (names,
// units, help).
func TestLint(t *testing.T) {
	m := metrics.New()
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// value scrapes m's handler and returns the sample of name with exactly
// the labels series (as written in the exposition, sorted), or fails.
func value(t *testing.T, m *metrics.Metrics, name, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	page, err := metricstest.Parse(string(body))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := page.Value(name, series)
	if !ok {
		t.Fatalf("no sample %s{%s} in:\n%s", name, series, page.Lines(name))
	}
	return v
}
