package orchestrator

// benchObserver is the Observer the benchmarks run with: Baton's metrics,
// as cmd/baton always has them, set by metrics_bench_test.go (an external
// test file, since package metrics imports this one). Nil observes
// nothing.
var benchObserver Observer

// SetBenchObserver sets benchObserver, for metrics_bench_test.go.
func SetBenchObserver(o Observer) { benchObserver = o }
