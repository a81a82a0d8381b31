package redisstore_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// TestGiveUpStalled: with Redis stalled (SIGSTOP), a write takes the
// client's whole read timeout to fail; GiveUpAfter counts from when that
// write was sent, so a ring whose patience is shorter than the read
// timeout is given up at the first failure, not at the second (it used to
// take two read timeouts and more: --redis-give-up 1s gave a session up
// after 20 s).
func TestGiveUpStalled(t *testing.T) {
	const readTimeout = time.Second
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: readTimeout})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Node: "a", GiveUpAfter: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, r, rec := newSession(t, s, 1, 10)
	appendCommit(t, r, 2)
	rec.waitDurable(t, 2)

	srv.Pause(t)
	start := time.Now()
	appendCommit(t, r, 1)
	rec.waitLost(t)
	took := time.Since(start)
	srv.Continue(t)
	// One read timeout, and a margin for a loaded machine well short of
	// the second read timeout a second write would take.
	if took > readTimeout*18/10 {
		t.Errorf("gave up after %v; want about one read timeout (%v)", took, readTimeout)
	}
	if seq, _ := r.Durable(); seq != 2 {
		t.Errorf("Durable = %d, want 2", seq)
	}
}
