package metrics_test

import (
	"testing"

	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/wsproto"
)

// BenchmarkEvent is what counting costs the event path: the Observer call
// orchestrator's emit makes for every event (compare BenchmarkEmit there).
func BenchmarkEvent(b *testing.B) {
	var obs interface{ Event(string) } = metrics.New()
	b.ReportAllocs()
	for b.Loop() {
		obs.Event(wsproto.EventSolverProgress)
	}
}

// BenchmarkEventParallel is BenchmarkEvent from every CPU at once, on one
// event type: the counter's cache line is contended, as under load.
func BenchmarkEventParallel(b *testing.B) {
	var obs interface{ Event(string) } = metrics.New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Event(wsproto.EventSolverProgress)
		}
	})
}
