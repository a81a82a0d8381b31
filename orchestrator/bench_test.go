package orchestrator

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// BenchmarkEmit measures the per-event path the pipeline pays: event id,
// encoding, ring append with checksum, state fold, and the enqueue for an
// attached connection. The queue is drained as a writer would, outside the
// timer's interest.
func BenchmarkEmit(b *testing.B) {
	srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}},
		&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(b.Context())
	sess, _, _ := srv.newSession(context.Background())
	c := &conn{srv: srv, limit: 1 << 20, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	c.attach(sess)
	sess.conn = c
	meta := &wsproto.SolverProgress{RunID: "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", TaskID: "t2",
		Attempt: 1, Progress: 0.66, Message: "Working through it"}

	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sess.emit(wsproto.EventSolverProgress, "", "Working through it", meta)
		if i%512 == 511 {
			c.mu.Lock()
			clear(c.queue)
			c.queue = c.queue[:0]
			c.mu.Unlock()
		}
	}
}
