// Package metrics is Baton's Prometheus metrics: Metrics implements
// orchestrator.Observer with github.com/prometheus/client_golang, on a
// registry of its own that also holds the Go runtime's and the process's
// collectors, and Handler serves it in the exposition format (/metrics).
//
// It knows the orchestrator only through that interface and a sampler of
// ring fill (WatchRings); the orchestrator knows nothing of Prometheus.
// Every name starts with baton_; the README's Operations section lists
// them. Labels take values from small fixed sets only — never a session,
// run or task id — so the number of series stays bounded.
package metrics

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/wsproto"
)

var _ orchestrator.Observer = (*Metrics)(nil)

// Metrics records what an orchestrator.Server observes. Its methods may be
// called concurrently.
type Metrics struct {
	reg *prometheus.Registry

	conns        prometheus.Gauge
	connsOpened  prometheus.Counter
	connsClosed  *prometheus.CounterVec
	sessions     prometheus.Gauge
	sessOpened   *prometheus.CounterVec
	sessNew      prometheus.Counter // sessOpened's children, resolved once
	sessTaken    prometheus.Counter
	sessClosed   prometheus.Counter
	events       *prometheus.CounterVec
	eventOf      map[string]prometheus.Counter // events' children by event name; read-only after New
	resumes      *prometheus.CounterVec
	replayed     prometheus.Counter
	overflows    prometheus.Counter
	runsStarted  *prometheus.CounterVec
	runsEnded    *prometheus.CounterVec
	failures     *prometheus.CounterVec
	retries      *prometheus.CounterVec
	stages       *prometheus.HistogramVec
	confirmWaits *prometheus.HistogramVec
	modelCalls   *prometheus.HistogramVec
	tokens       *prometheus.CounterVec

	rings *ringCollector
}

// serverEvents are the sequenced events a server emits, whose counters
// are made at start: the hot path then finds its counter in a read-only
// map, and every type shows (at 0) before it first happens.
var serverEvents = []string{
	wsproto.EventPlanStart, wsproto.EventPlanStepCompleted, wsproto.EventPlanCompleted, wsproto.EventPlanCancelled,
	wsproto.EventPlanDecision, wsproto.EventPlanUpdated,
	wsproto.EventUserConfirm, wsproto.EventFinalAnswer, wsproto.EventToolCall, wsproto.EventToolResult,
	wsproto.EventTodoUpdated, wsproto.EventTodoItemProgress, wsproto.EventTodoCompleted,
	wsproto.EventSolverStart, wsproto.EventSolverProgress, wsproto.EventSolverCompleted, wsproto.EventSolverCancelled,
	wsproto.EventSolverSkipped, wsproto.EventSolverRestarted,
	wsproto.EventExecutionError, wsproto.EventRecoveryStarted, wsproto.EventRecoverySuccess, wsproto.EventRecoveryFailed,
	wsproto.EventAggregateStart, wsproto.EventAggregateProgress, wsproto.EventAggregateCompleted,
	wsproto.EventPipelineCompleted, wsproto.EventPipelineCancelled,
}

// errorTypes are failure's error types, the values of error_type.
var errorTypes = []string{failure.Validation, failure.Timeout, failure.Network, failure.RateLimit, failure.Internal, failure.Permanent}

// Histogram buckets, in seconds.
var (
	stageBuckets   = []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}
	confirmBuckets = []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	modelBuckets   = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120}
	fillBuckets    = []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1}
)

// New returns Metrics registered on a new registry, with the Go runtime's
// (go_*) and the process's (process_*) collectors.
func New() *Metrics {
	const ns = "baton"
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help})
	}
	histogramVec := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		conns:       gauge("connections", "WebSocket connections open."),
		connsOpened: counter("connections_opened_total", "WebSocket connections accepted."),
		connsClosed: counterVec("connections_closed_total", "WebSocket connections ended, by how they ended.", "end"),
		sessions:    gauge("sessions", "Sessions held by this server."),
		sessOpened: counterVec("sessions_opened_total",
			"Sessions that came to live here: new (every connection starts one) or taken_over from another server.", "origin"),
		sessClosed: counter("sessions_closed_total", "Sessions freed: expired, dropped for the one a connection resumed, lost, or at shutdown."),
		events:     counterVec("events_total", "Sequenced events emitted, by event type.", "event"),
		eventOf:    make(map[string]prometheus.Counter, len(serverEvents)),
		resumes:    counterVec("resumes_total", "Resumes (user.reconnect_with_state), by outcome: replay, resync, rejected, busy (no takeover slot: resume again after retry_after_ms), failed.", "outcome"),
		replayed:   counter("resume_replayed_events_total", "Events replayed to resuming clients."),
		overflows:  counter("send_queue_overflows_total", "Connections closed with 1013 because their send queue overflowed."),
		runsStarted: counterVec("runs_started_total",
			"Runs started (plan: user.message; tasks: user.solve_tasks) or taken over from another server.", "kind"),
		runsEnded: counterVec("runs_ended_total",
			"Runs ended here, by outcome (succeeded, partial, failed, plan_failed, rejected, confirm_timeout, cancelled, handed_over: continued by another server) and, for cancelled, reason.",
			"outcome", "reason"),
		failures: counterVec("failures_total", "Failed executions of planning (stage plan) or of a task (stage task), by error_type.",
			"stage", "error_type"),
		retries: counterVec("retries_total", "Retries of planning or of a task after a failure, by the failure's error_type.",
			"stage", "error_type"),
		stages: histogramVec("stage_duration_seconds", "How long a run's stage took (plan, solve, aggregate), whatever its end.",
			stageBuckets, "stage"),
		confirmWaits: histogramVec("confirm_wait_seconds", "How long a confirmation waited for its answer, expiry or the run's end, by kind.",
			confirmBuckets, "kind"),
		modelCalls: histogramVec("model_call_duration_seconds",
			"Model call latency by call (plan, turn, decide, aggregate) and result (ok, cancelled or the error type).",
			modelBuckets, "call", "result"),
		tokens: counterVec("model_tokens_total", "Tokens the model reported, by call and kind (prompt, completion).", "call", "kind"),
		rings:  newRingCollector(ns, fillBuckets),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.conns, m.connsOpened, m.connsClosed, m.sessions, m.sessOpened, m.sessClosed, m.events, m.resumes, m.replayed,
		m.overflows, m.runsStarted, m.runsEnded, m.failures, m.retries, m.stages, m.confirmWaits, m.modelCalls, m.tokens,
		m.rings)

	// Children made now show at 0 from the start, and the hot paths use
	// them without a lookup by labels.
	for _, e := range serverEvents {
		m.eventOf[e] = m.events.WithLabelValues(e)
	}
	m.sessNew, m.sessTaken = m.sessOpened.WithLabelValues("new"), m.sessOpened.WithLabelValues("taken_over")
	for _, end := range []string{orchestrator.EndClientClosed, orchestrator.EndLost, orchestrator.EndFrameTooLarge,
		orchestrator.EndNoPong, orchestrator.EndWriteFailed, orchestrator.EndTooSlow, orchestrator.EndReplaced, orchestrator.EndTokenExpired,
		orchestrator.EndRestart, orchestrator.EndServerOther} {
		m.connsClosed.WithLabelValues(end)
	}
	for _, o := range []string{orchestrator.ResumeReplay, orchestrator.ResumeResync, orchestrator.ResumeRejected, orchestrator.ResumeFailed} {
		m.resumes.WithLabelValues(o)
	}
	for _, k := range []string{orchestrator.RunPlan, orchestrator.RunTasks, orchestrator.RunChat, orchestrator.RunTakenOver} {
		m.runsStarted.WithLabelValues(k)
	}
	for _, stage := range []string{orchestrator.StagePlan, orchestrator.StageTask} {
		for _, t := range errorTypes {
			m.failures.WithLabelValues(stage, t)
			m.retries.WithLabelValues(stage, t)
		}
	}
	for _, call := range []string{orchestrator.CallPlan, orchestrator.CallTurn, orchestrator.CallDecide, orchestrator.CallAggregate} {
		m.tokens.WithLabelValues(call, "prompt")
		m.tokens.WithLabelValues(call, "completion")
	}
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is where the metrics are registered, for a caller's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// WatchRings has ring fill sampled at each scrape with sample, which calls
// its argument once per session's ring (orchestrator.Server.RingFill).
// Until it is called the ring metrics read 0.
func (m *Metrics) WatchRings(sample func(fn func(held, capacity int))) { m.rings.sample.Store(&sample) }

// ConnOpened implements orchestrator.Observer.
func (m *Metrics) ConnOpened() {
	m.conns.Inc()
	m.connsOpened.Inc()
}

// ConnClosed implements orchestrator.Observer.
func (m *Metrics) ConnClosed(end string) {
	m.conns.Dec()
	m.connsClosed.WithLabelValues(end).Inc()
}

// SessionOpened implements orchestrator.Observer.
func (m *Metrics) SessionOpened(takenOver bool) {
	m.sessions.Inc()
	if takenOver {
		m.sessTaken.Inc()
		return
	}
	m.sessNew.Inc()
}

// SessionClosed implements orchestrator.Observer.
func (m *Metrics) SessionClosed() {
	m.sessions.Dec()
	m.sessClosed.Inc()
}

// Event implements orchestrator.Observer. It is on the path of every
// event: one read-only map lookup and one atomic add.
func (m *Metrics) Event(event string) {
	if c, ok := m.eventOf[event]; ok {
		c.Inc()
		return
	}
	m.events.WithLabelValues(event).Inc() // a type added since; slower, still counted
}

// Resumed implements orchestrator.Observer.
func (m *Metrics) Resumed(outcome string, replayed int) {
	m.resumes.WithLabelValues(outcome).Inc()
	m.replayed.Add(float64(replayed))
}

// SendOverflow implements orchestrator.Observer.
func (m *Metrics) SendOverflow() { m.overflows.Inc() }

// RunStarted implements orchestrator.Observer.
func (m *Metrics) RunStarted(kind string) { m.runsStarted.WithLabelValues(kind).Inc() }

// RunEnded implements orchestrator.Observer.
func (m *Metrics) RunEnded(outcome, reason string) {
	m.runsEnded.WithLabelValues(outcome, reason).Inc()
}

// Failure implements orchestrator.Observer.
func (m *Metrics) Failure(stage, errorType string) {
	m.failures.WithLabelValues(stage, errorType).Inc()
}

// Retry implements orchestrator.Observer.
func (m *Metrics) Retry(stage, errorType string) { m.retries.WithLabelValues(stage, errorType).Inc() }

// StageDone implements orchestrator.Observer.
func (m *Metrics) StageDone(stage string, d time.Duration) {
	m.stages.WithLabelValues(stage).Observe(d.Seconds())
}

// ConfirmWaited implements orchestrator.Observer.
func (m *Metrics) ConfirmWaited(kind string, d time.Duration) {
	m.confirmWaits.WithLabelValues(kind).Observe(d.Seconds())
}

// ModelCall implements orchestrator.Observer.
func (m *Metrics) ModelCall(call, result string, d time.Duration, usage wsproto.Usage) {
	m.modelCalls.WithLabelValues(call, result).Observe(d.Seconds())
	if usage.PromptTokens > 0 {
		m.tokens.WithLabelValues(call, "prompt").Add(float64(usage.PromptTokens))
	}
	if usage.CompletionTokens > 0 {
		m.tokens.WithLabelValues(call, "completion").Add(float64(usage.CompletionTokens))
	}
}

// ringCollector samples ring fill at each scrape: a histogram of each
// ring's held/capacity, and how many rings are full (the next event evicts
// one the client has not acked, and a client that far behind resyncs).
type ringCollector struct {
	fill, full *prometheus.Desc
	buckets    []float64
	sample     atomic.Pointer[func(fn func(held, capacity int))]
}

func newRingCollector(ns string, buckets []float64) *ringCollector {
	return &ringCollector{
		fill: prometheus.NewDesc(ns+"_ring_fill_ratio",
			"Events each session's ring holds (not acked, not evicted) over its capacity, sampled at scrape.", nil, nil),
		full:    prometheus.NewDesc(ns+"_rings_full", "Sessions whose ring is full, sampled at scrape.", nil, nil),
		buckets: buckets,
	}
}

func (c *ringCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.fill
	ch <- c.full
}

func (c *ringCollector) Collect(ch chan<- prometheus.Metric) {
	counts := make([]uint64, len(c.buckets))
	var n, full uint64
	var sum float64
	if sample := c.sample.Load(); sample != nil {
		(*sample)(func(held, capacity int) {
			if capacity <= 0 {
				return
			}
			r := float64(held) / float64(capacity)
			n++
			sum += r
			if held >= capacity {
				full++
			}
			for i, b := range c.buckets {
				if r <= b {
					counts[i]++
				}
			}
		})
	}
	cumulative := make(map[float64]uint64, len(c.buckets))
	for i, b := range c.buckets {
		cumulative[b] = counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.fill, n, sum, cumulative)
	ch <- prometheus.MustNewConstMetric(c.full, prometheus.GaugeValue, float64(full))
}
