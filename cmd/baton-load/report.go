package main

import (
	"fmt"
	"io"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/client"
)

// Report is the outcome of a load run.
type Report struct {
	Sessions     int     `json:"sessions"`
	Runs         int     `json:"runs"`
	Events       int     `json:"events"`
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// OfferedPerSec is -pace: the rate the load offered, when paced.
	OfferedPerSec float64 `json:"offered_events_per_sec,omitempty"`
	LatencyP50MS  float64 `json:"latency_p50_ms"`
	LatencyP95MS  float64 `json:"latency_p95_ms"`
	LatencyP99MS  float64 `json:"latency_p99_ms"`
	LatencyMaxMS  float64 `json:"latency_max_ms"`
	Drops         int     `json:"drops"`
	Resumes       int     `json:"resumes"`
	Resyncs       int     `json:"resyncs"`
	Duplicates    int     `json:"duplicates_dropped"`
	// ServerErrors counts the system.error frames the sessions got, but
	// for the replies to what the tool sent again after a drop and the
	// server already had: those are ResentAnswers (step_id_mismatch) and
	// ResentStarts (busy).
	ServerErrors  int `json:"server_errors"`
	ResentAnswers int `json:"resent_answers"`
	ResentStarts  int `json:"resent_starts"`
	// ConnectFailures counts the sessions that could not connect at all;
	// the tool then exits 1 saying so.
	ConnectFailures int `json:"connect_failures"`
	// ClientCPUPerEvent is the tool's own CPU time (user and system, of the
	// whole process: an in-process server counts too) per event received.
	ClientCPUPerEvent float64 `json:"client_cpu_us_per_event"`
	// ServerCPUPerEvent and ServerWritesPerEvent are the -debug-addr
	// servers' CPU time and write syscalls during the load per event
	// received; left out without -debug-addr (the writes also off Linux).
	ServerCPUPerEvent    float64  `json:"server_cpu_us_per_event,omitempty"`
	ServerWritesPerEvent float64  `json:"server_write_syscalls_per_event,omitempty"`
	Violations           []string `json:"violations"`
	ViolationsNum        int      `json:"violation_count"`
}

type sessionResult struct {
	runs         int
	drops        int
	stats        client.Stats
	resentStarts int // busy replies to run starts the tool sent again
	violations   []string
	connectErr   error // why the session could not connect; nil when it did
}

func report(cfg config, results []sessionResult, lat *histogram, took time.Duration) Report {
	rep := Report{Sessions: cfg.sessions, Seconds: took.Seconds(), OfferedPerSec: cfg.pace, Violations: []string{}}
	for _, r := range results {
		rep.Runs += r.runs
		rep.Events += r.stats.Events
		rep.Drops += r.drops
		rep.Resumes += r.stats.Resumes
		rep.Resyncs += r.stats.Resyncs
		rep.Duplicates += r.stats.Duplicates
		rep.ServerErrors += r.stats.Errors - r.resentStarts
		rep.ResentAnswers += r.stats.ResentAnswers
		rep.ResentStarts += r.resentStarts
		if r.connectErr != nil {
			rep.ConnectFailures++
		}
		rep.Violations = append(rep.Violations, r.violations...)
	}
	rep.ViolationsNum = len(rep.Violations)
	if len(rep.Violations) > 20 {
		rep.Violations = rep.Violations[:20]
	}
	rep.EventsPerSec = float64(rep.Events) / took.Seconds()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rep.LatencyP50MS, rep.LatencyP95MS, rep.LatencyP99MS = ms(lat.quantile(0.50)), ms(lat.quantile(0.95)), ms(lat.quantile(0.99))
	rep.LatencyMaxMS = ms(time.Duration(lat.max.Load()))
	return rep
}

func printReport(w io.Writer, r Report) {
	fmt.Fprintf(w, "sessions %d  runs %d  events %d  in %.1fs  → %.0f events/s", r.Sessions, r.Runs, r.Events, r.Seconds, r.EventsPerSec)
	if r.OfferedPerSec > 0 {
		fmt.Fprintf(w, " (offered %.0f)", r.OfferedPerSec)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "delivery latency (live events, server timestamp → receipt): p50 %.2fms  p95 %.2fms  p99 %.2fms  max %.2fms\n",
		r.LatencyP50MS, r.LatencyP95MS, r.LatencyP99MS, r.LatencyMaxMS)
	fmt.Fprintf(w, "CPU per event: client %.1fµs", r.ClientCPUPerEvent)
	if r.ServerCPUPerEvent > 0 {
		fmt.Fprintf(w, "  server %.1fµs, %.2f write syscalls", r.ServerCPUPerEvent, r.ServerWritesPerEvent)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "drops %d  resumes %d  resyncs %d  duplicates dropped %d  server errors %d  (re-sent and already had: answers %d, starts %d)\n",
		r.Drops, r.Resumes, r.Resyncs, r.Duplicates, r.ServerErrors, r.ResentAnswers, r.ResentStarts)
	if r.ConnectFailures > 0 {
		fmt.Fprintf(w, "sessions that could not connect %d\n", r.ConnectFailures)
	}
	fmt.Fprintf(w, "violations %d\n", r.ViolationsNum)
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}

// subBits sets the histogram's precision: 2^subBits buckets per power of
// two, so a quantile is read within 1/2^subBits (1.6%) of the samples'.
const subBits = 6

// histogram counts latencies (in nanoseconds) in log-linear buckets
// rather than keeping every sample: recording one is an atomic add, the
// same for every session's reader goroutine, and its size does not grow
// with the load. Values below 2^(subBits+1) ns have a bucket each.
type histogram struct {
	counts [(64 - subBits) << subBits]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucket(uint64(v))].Add(1)
	h.n.Add(1)
	for m := h.max.Load(); v > m && !h.max.CompareAndSwap(m, v); m = h.max.Load() {
	}
}

// bucket is v's index: v itself below 2^(subBits+1); above, the power of
// two and the subBits bits below the top one.
func bucket(v uint64) int {
	if v < 1<<(subBits+1) {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return shift<<subBits + int(v>>shift)
}

// lowest is the least value of bucket i; the bucket holds up to the next
// one's lowest.
func lowest(i int) uint64 {
	if i < 1<<(subBits+1) {
		return uint64(i)
	}
	shift := i>>subBits - 1
	return uint64(i-shift<<subBits) << shift
}

// quantile is the value at quantile q of what was recorded (the sample at
// rank floor(q·n), as a sorted list of them gives it), to the bucket's
// middle and at most the largest recorded; 0 when nothing was.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := min(uint64(q*float64(n)), n-1) // 0-based
	var seen uint64
	for i := range h.counts {
		if seen += h.counts[i].Load(); seen > rank {
			lo, hi := lowest(i), lowest(i+1)
			return time.Duration(min(lo+(hi-lo)/2, uint64(h.max.Load())))
		}
	}
	return time.Duration(h.max.Load())
}
