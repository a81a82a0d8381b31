package orchestrator_test

import (
	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/orchestrator"
)

// The benchmarks measure the event path as cmd/baton runs it: with its
// Prometheus metrics observing.
func init() { orchestrator.SetBenchObserver(metrics.New()) }
