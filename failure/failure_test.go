package failure_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/baton-run/baton/failure"
)

type netTimeout struct{}

func (netTimeout) Error() string   { return "i/o timeout" }
func (netTimeout) Timeout() bool   { return true }
func (netTimeout) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		typ         string
		recoverable bool
		action      string
		retryAfter  time.Duration
	}{
		{"validation", failure.New(failure.Validation, "bad plan"), failure.Validation, true, "retry", 0},
		{"timeout", failure.New(failure.Timeout, "slow"), failure.Timeout, true, "retry", 0},
		{"network", failure.New(failure.Network, "reset"), failure.Network, true, "retry", 0},
		{"rate limit with retry-after", &failure.Error{Type: failure.RateLimit, RetryAfter: 3 * time.Second}, failure.RateLimit, true, "retry", 3 * time.Second},
		{"internal", failure.New(failure.Internal, "bug"), failure.Internal, true, "retry", 0},
		{"permanent", failure.New(failure.Permanent, "no such model"), failure.Permanent, false, "abort", 0},
		{"wrapped typed error", fmt.Errorf("solve: %w", failure.New(failure.Permanent, "x")), failure.Permanent, false, "abort", 0},
		{"unknown type reads as internal", &failure.Error{Type: "cosmic_ray"}, failure.Internal, true, "retry", 0},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), failure.Timeout, true, "retry", 0},
		{"net timeout", &net.OpError{Op: "read", Err: netTimeout{}}, failure.Timeout, true, "retry", 0},
		{"connection refused", &net.OpError{Op: "dial", Err: os.ErrPermission}, failure.Network, true, "retry", 0},
		{"plain error", errors.New("boom"), failure.Internal, true, "retry", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := failure.Classify(tt.err)
			if c.Type != tt.typ || c.Recoverable != tt.recoverable || c.SuggestedAction != tt.action || c.RetryAfter != tt.retryAfter {
				t.Errorf("Classify(%v) = %+v, want %s/%v/%s/%v", tt.err, c, tt.typ, tt.recoverable, tt.action, tt.retryAfter)
			}
		})
	}
}

func TestDelays(t *testing.T) {
	d := failure.Policy{MaxRetries: 5, Base: 100 * time.Millisecond, Max: 400 * time.Millisecond}.Backoff()
	if got := d.Next(failure.Class{Type: failure.Validation}); got != 0 {
		t.Errorf("validation delay %v, want 0", got)
	}
	// Exponential ±50% jitter, capped before jitter: 100, 200, 400, 400 ms.
	for i, base := range []time.Duration{100, 200, 400, 400} {
		base *= time.Millisecond
		got := d.Next(failure.Class{Type: failure.Network})
		if got < base/2 || got > base*3/2 {
			t.Errorf("delay %d = %v, want within ±50%% of %v", i+1, got, base)
		}
	}
}

// TestRetryAfterIsCapped: a model's Retry-After is waited, but never
// longer than the policy's cap (30s by default).
func TestRetryAfterIsCapped(t *testing.T) {
	tests := []struct {
		name       string
		max        time.Duration
		retryAfter time.Duration
		want       time.Duration
	}{
		{"under the cap", 0, 7 * time.Second, 7 * time.Second},
		{"a day, default cap", 0, 24 * time.Hour, 30 * time.Second},
		{"at the cap", time.Minute, time.Minute, time.Minute},
		{"past a set cap", 400 * time.Millisecond, 7 * time.Second, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := failure.Policy{MaxRetries: 3, Max: tt.max}.Backoff()
			if got := d.Next(failure.Class{Type: failure.RateLimit, RetryAfter: tt.retryAfter}); got != tt.want {
				t.Errorf("Retry-After %v: delay %v, want %v", tt.retryAfter, got, tt.want)
			}
		})
	}
}

func TestWaitEndsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := failure.Wait(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
	if err := failure.Wait(context.Background(), 0); err != nil {
		t.Errorf("Wait(0) = %v", err)
	}
}

func TestPublic(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"a message Baton wrote", failure.New(failure.Validation, "unusable plan: task 1 has no title"), "unusable plan: task 1 has no title (validation)"},
		{"an upstream error keeps to the log", &failure.Error{Type: failure.Permanent, Message: "the model endpoint refused the request: 401 unauthorized",
			Err: errors.New("error, status code: 401, message: Incorrect API key provided: sk-test-123")}, "the model endpoint refused the request: 401 unauthorized (permanent)"},
		{"no message: the type's own", &failure.Error{Type: failure.Network, Err: errors.New("dial tcp 10.0.0.7:443: connection refused")}, "the model endpoint could not be reached (network)"},
		{"wrapped", fmt.Errorf("solve: %w", failure.New(failure.RateLimit, "slow down")), "slow down (rate_limit)"},
		{"an unknown type reads as internal, message and all", &failure.Error{Type: "cosmic_ray", Message: "secret detail"}, "an internal error occurred (internal)"},
		{"a raw transport error", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrPermission}, "the model endpoint could not be reached (network)"},
		{"a deadline", fmt.Errorf("call 10.0.0.7: %w", context.DeadlineExceeded), "the model did not answer in time (timeout)"},
		{"a plain error", errors.New("panic at 0xdeadbeef"), "an internal error occurred (internal)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := failure.Public(tt.err); got != tt.want {
				t.Errorf("Public(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
