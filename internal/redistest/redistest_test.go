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

// TestAppendOnlyRestart: with an append-only file, a write answered
// before a SIGKILL is there after Restart.
func TestAppendOnlyRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := redistest.StartConfig(t, redistest.Config{AppendOnly: true})
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Restart(t)
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET after Restart: %q, %v; want the value written before", v, err)
	}
}

// TestFailover: go-redis's failover client, given the setup's URL,
// writes to the master, and after a failover to the replica, which has
// what it wrote.
func TestFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := redistest.StartFailover(t, 2)
	opt, err := redis.ParseFailoverURL(f.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%s): %v", f.URL(), err)
	}
	if len(opt.SentinelAddrs) != 2 || opt.MasterName != redistest.MasterName {
		t.Errorf("URL %s parsed as sentinels %v, master %q", f.URL(), opt.SentinelAddrs, opt.MasterName)
	}
	c := redis.NewFailoverClient(opt)
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if addr, err := f.MasterAddr(ctx); err != nil || addr != f.Master.Addr() {
		t.Fatalf("master %s (%v), want %s", addr, err, f.Master.Addr())
	}
	// WAIT: the replica has the write before it is promoted.
	if n, err := c.Wait(ctx, 1, 5000).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	f.Failover(t)
	if addr, err := f.MasterAddr(ctx); err != nil || addr != f.Replica.Addr() {
		t.Fatalf("master after the failover %s (%v), want %s", addr, err, f.Replica.Addr())
	}
	// The client follows the master: a write succeeds (the old master,
	// now a replica, would refuse it as READONLY).
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.Set(ctx, "k2", "v2", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SET after the failover: %v", err)
		}
		<-tick.C
	}
	if v, err := f.Replica.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET on the new master: %q, %v", v, err)
	}
}
