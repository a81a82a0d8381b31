package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

// TestServer: a started server answers; Restart brings it back empty on
// the same address; Kill stops it.
func TestServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t)
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL = %s, want %s", s.URL(), want)
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1 // after Kill, fail at once rather than retry
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	// Paused, a command waits; continued, it is answered. The server is
	// paused again before the restart, which must continue it to kill it.
	s.Pause(t)
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	err = c.Get(short, "k").Err()
	stop()
	var timeout interface{ Timeout() bool }
	if !errors.Is(err, context.DeadlineExceeded) && (!errors.As(err, &timeout) || !timeout.Timeout()) {
		t.Errorf("GET while paused: %v, want it to wait past its deadline", err)
	}
	s.Continue(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET after Continue: %q, %v", v, err)
	}
	s.Pause(t)

	s.Restart(t)
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Errorf("GET after Restart: %v, want redis.Nil (an empty server)", err)
	}

	s.Kill(t)
	if err := c.Ping(ctx).Err(); err == nil {
		t.Errorf("PING after Kill succeeded")
	}
}

// recorder stands in for the test in Start, to see how it ends without
// redis-server; Skipf and Fatalf end its goroutine as testing's do.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingServer: without redis-server, Start skips loudly, or fails
// when CI is set.
func TestMissingServer(t *testing.T) {
	tests := []struct {
		name     string
		ci       string
		wantSkip bool
	}{
		{"locally", "", true},
		{"in CI", "true", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			t.Setenv("CI", tt.ci)
			r := &recorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				redistest.Start(r)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not return")
			}
			got := r.failed
			if tt.wantSkip {
				got = r.skipped
			}
			if !strings.Contains(got, "install Debian's redis-server") {
				t.Errorf("skipped %q, failed %q; want the install hint in the %s", r.skipped, r.failed,
					map[bool]string{true: "skip", false: "failure"}[tt.wantSkip])
			}
		})
	}
}
