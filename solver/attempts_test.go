package solver

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/wsproto"
)

// TestMaxAttemptsCountsExecutions: a task that always fails runs exactly
// MaxAttempts times in all (below 1, once), and each Retrying names the
// execution that comes next out of the same MaxAttempts.
func TestMaxAttemptsCountsExecutions(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		executions  int
	}{
		{name: "zero means no retry", maxAttempts: 0, executions: 1},
		{name: "one means no retry", maxAttempts: 1, executions: 1},
		{name: "two", maxAttempts: 2, executions: 2},
		{name: "three", maxAttempts: 3, executions: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			policy := failure.Policy{MaxAttempts: tt.maxAttempts, Base: time.Microsecond, Max: time.Microsecond}
			tasks := []wsproto.Task{failing("a", failure.Network, 99)}
			rep := New(tasks, fakeModel{}, rec, Options{Retry: policy}).Execute(t.Context())
			if rep.Tasks[0].Status != wsproto.TaskFailed {
				t.Errorf("status %s, want failed", rep.Tasks[0].Status)
			}
			var want []string
			for n := 1; n <= tt.executions; n++ {
				if n > 1 {
					want = append(want, fmt.Sprintf("retry a %d/%d", n, tt.executions))
				}
				want = append(want, fmt.Sprintf("start a %d", n), fmt.Sprintf("fail a %d network", n))
			}
			want = append(want, fmt.Sprintf("gaveup a %d", tt.executions))
			if got := rec.events(); !slices.Equal(got, want) {
				t.Errorf("events\n got %q\nwant %q", got, want)
			}
		})
	}
}
