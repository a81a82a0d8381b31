package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// runEndObserver records RunEnded; the rest of Observer does nothing.
type runEndObserver struct {
	nopObserver
	outcome, reason string
}

func (o *runEndObserver) RunEnded(outcome, reason string) { o.outcome, o.reason = outcome, reason }

// someCluster stands for a Cluster that logEnd only checks is there.
type someCluster struct{ Cluster }

// TestLogEnd: a run that ends silently is logged and counted by why its
// context ended: a server that closes with a Cluster hands its runs over
// (handed_over, no reason); every other cause is a cancellation with its
// reason, the same in the log line and the Observer.
func TestLogEnd(t *testing.T) {
	tests := []struct {
		name            string
		cluster         bool
		cause           error
		meta            any
		outcome, reason string
	}{
		{name: "closed with a cluster", cluster: true, cause: ErrServerClosed, outcome: OutcomeHandedOver},
		{name: "closed without a cluster", cause: ErrServerClosed, outcome: "cancelled", reason: "server_closed"},
		{name: "drained away from an absent user", cause: errUserAbsent, outcome: "cancelled", reason: ReasonUserAbsent},
		{name: "session expired", cause: errSessionExpired, outcome: "cancelled", reason: "session_expired"},
		{name: "session lost with a cluster", cluster: true, cause: errSessionLost, outcome: "cancelled", reason: "session_lost"},
		{name: "cancelled by the user with a cluster", cluster: true, cause: errUserCancel,
			meta: &wsproto.PipelineCancelled{Reason: wsproto.ReasonUserCancel}, outcome: "cancelled", reason: wsproto.ReasonUserCancel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			obs := &runEndObserver{}
			srv := &Server{log: slog.New(slog.NewJSONHandler(&logs, nil)), obs: obs}
			if tt.cluster {
				srv.opts.Cluster = someCluster{}
			}
			r := &run{id: "run_1", sess: &session{id: "sess_1", srv: srv}, started: time.Now()}
			var cancel context.CancelCauseFunc
			r.ctx, cancel = context.WithCancelCause(context.Background())
			cancel(tt.cause)

			r.logEnd(tt.meta)
			r.logEnd(tt.meta) // only the first call logs
			if obs.outcome != tt.outcome || obs.reason != tt.reason {
				t.Errorf("observed %q %q, want %q %q", obs.outcome, obs.reason, tt.outcome, tt.reason)
			}
			var line map[string]any
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if reason, _ := line["reason"].(string); line["msg"] != "run ended" || line["outcome"] != tt.outcome || reason != tt.reason {
				t.Errorf("logged %v, want run ended outcome=%s reason=%q", line, tt.outcome, tt.reason)
			}
		})
	}
}
