package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

func TestMain(m *testing.M) {
	verifyParts = checkParts
	goleak.VerifyTestMain(skipreport.Reporting(partsChecked{m}))
}

// partsMismatch is the first checkpoint whose parts did not assemble to
// the whole checkpoint (verifyParts), "" while none.
var partsMismatch struct {
	sync.Mutex
	first string
}

// checkParts is verifyParts in every test: a checkpoint stored in parts
// must assemble to the whole checkpoint, at every transition of every
// test that has a durable ring taking parts.
func checkParts(full, assembled []byte) {
	if bytes.Equal(full, assembled) {
		return
	}
	partsMismatch.Lock()
	defer partsMismatch.Unlock()
	if partsMismatch.first == "" {
		partsMismatch.first = fmt.Sprintf("whole:\n%s\nassembled from parts:\n%s", full, assembled)
	}
}

// partsChecked fails the run when any checkpoint's parts did not match.
type partsChecked struct{ m *testing.M }

func (p partsChecked) Run() int {
	code := p.m.Run()
	partsMismatch.Lock()
	defer partsMismatch.Unlock()
	if partsMismatch.first != "" {
		fmt.Fprintf(os.Stderr, "FAIL: a checkpoint's parts do not assemble to the checkpoint:\n%s\n", partsMismatch.first)
		return 1
	}
	return code
}

func simModels() Models { return Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}} }

func TestOptionsDefaults(t *testing.T) {
	tests := []struct {
		name  string
		opts  *Options
		check func(t *testing.T, o Options)
	}{
		{"nil means defaults", nil, func(t *testing.T, o Options) {
			if o.BufferSize != 1000 || o.SessionTTL != 5*time.Minute || o.ConfirmTimeout != 5*time.Minute ||
				o.MaxParallel != 4 || o.MaxRetries != 3 || o.RetryBase != time.Second || o.MaxTasks != 50 ||
				o.ReadLimit != 65536 || o.PingInterval != 25*time.Second || o.PongTimeout != 10*time.Second ||
				o.WriteTimeout != 10*time.Second || o.SendQueue != 1064 || o.TaskTimeout != 2*time.Minute ||
				o.NewRing == nil || o.Logger == nil || o.RateLimit != 0 || o.RateBurst != 0 || o.MaxConnsPerIP != 0 ||
				o.MaxSessions != 0 || o.MaxFrameBytes != 0 || o.IdleSessionTTL != 10*time.Second ||
				o.MaxSessionsPerSubject != 0 || o.MaxSessionsPerIP != 0 {
				t.Errorf("defaults %+v", o)
			}
		}},
		{"send queue follows the buffer size", &Options{BufferSize: 10}, func(t *testing.T, o Options) {
			if o.SendQueue != 74 {
				t.Errorf("SendQueue %d, want 74", o.SendQueue)
			}
		}},
		{"the rate burst follows the rate", &Options{RateLimit: 5}, func(t *testing.T, o Options) {
			if o.RateBurst != 10 {
				t.Errorf("RateBurst %d, want 10", o.RateBurst)
			}
		}},
		{"the idle TTL is never longer than the TTL", &Options{SessionTTL: time.Second}, func(t *testing.T, o Options) {
			if o.IdleSessionTTL != time.Second {
				t.Errorf("IdleSessionTTL %v, want 1s", o.IdleSessionTTL)
			}
		}},
		{"set values stay", &Options{MaxParallel: 9, PongTimeout: time.Second}, func(t *testing.T, o Options) {
			if o.MaxParallel != 9 || o.WriteTimeout != time.Second {
				t.Errorf("%+v", o)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before Options
			if tt.opts != nil {
				before = *tt.opts
			}
			tt.check(t, tt.opts.withDefaults())
			if tt.opts != nil && (tt.opts.SendQueue != before.SendQueue || tt.opts.Logger != before.Logger) {
				t.Errorf("the caller's Options were modified")
			}
		})
	}
}

func TestNewNeedsModels(t *testing.T) {
	if _, err := New(Models{}, nil); err == nil {
		t.Fatal("New without models succeeded")
	}
}

// TestCloseEndsEverything: sessions with runs in every state are cancelled
// and every goroutine is gone when Close returns (goleak checks the rest).
func TestCloseEndsEverything(t *testing.T) {
	srv, err := New(simModels(), &Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"plan [sim:plan_fail=network*9]", "confirm me"} {
		sess, _, _ := srv.newSession(context.Background(), "")
		if e := sess.startRun(req, nil, false); e != nil {
			t.Fatal(e.Message)
		}
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n := srv.Sessions(); n != 0 {
		t.Errorf("%d sessions after Close", n)
	}
}
