package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// TestLapses: a node cut off from Redis is told its lease may have lapsed
// before another node can see it lapse, and once, however long the cut
// lasts; healed, it renews, and a second cut is told again. A node that
// keeps Redis is told nothing.
func TestLapses(t *testing.T) {
	// The node is told a fifth of the TTL before Redis expires its
	// lease; the test checks that with a goroutine's wake-up and a round
	// trip to Redis, which took over 300 ms (a 1.5 s TTL's fifth) on a
	// loaded machine running the race detector.
	const ttl = 3 * time.Second
	ctx := context.Background()
	srv := redistest.Start(t)
	p, err := faultproxy.Start(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	n, err := redisstore.Join(ctx, c, "cut", redisstore.NodeOptions{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(ctx) })
	other := join(t, onServer(srv), "other", ttl)

	// Live, across several renewals: no lapse.
	select {
	case <-n.Lapses():
		t.Fatal("a live node was told its lease lapsed")
	case <-other.Lapses():
		t.Fatal("a live node was told its lease lapsed")
	case <-time.After(ttl):
	}

	for cut := 1; cut <= 2; cut++ {
		p.Partition()
		select {
		case <-n.Lapses():
		case <-time.After(10 * ttl):
			t.Fatalf("cut %d: no lapse told", cut)
		}
		// Told no later than the others see it: the lease is still
		// there (Redis expires it a fifth of the TTL later at least).
		if alive, err := other.Alive(ctx, "cut"); err != nil || !alive {
			t.Errorf("cut %d: the others saw the lease lapse (alive %v, %v) before the node was told", cut, alive, err)
		}
		select {
		case <-n.Lapses():
			t.Fatalf("cut %d: the lapse was told twice", cut)
		case <-time.After(ttl / 2):
		}
		p.Heal()
		// Renewed once healed: the lease's key holds a renewal stamped
		// after the heal, and then a later one, so the first one's reply
		// reached the node. (The key's being there is not enough: a
		// renewal that reached Redis as the cut began, its reply lost,
		// keeps the key for a TTL while the node, having had no success,
		// is rightly not told of the next cut again.)
		healed := time.Now()
		first := waitRenewal(t, ctx, srv, "cut", healed, 30*ttl)
		waitRenewal(t, ctx, srv, "cut", first.Add(time.Nanosecond), 30*ttl)
	}
}

// waitRenewal waits up to within for node's lease key to hold a renewal
// stamped at or after since (the renewal script stores its node's clock,
// RFC 3339), and returns its stamp.
func waitRenewal(t *testing.T, ctx context.Context, srv *redistest.Server, node string, since time.Time, within time.Duration) time.Time {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	deadline := time.Now().Add(within)
	for {
		if v, err := c.Get(ctx, "baton:{nodes}:"+node).Result(); err == nil {
			if at, err := time.Parse(time.RFC3339Nano, v); err == nil && !at.Before(since) {
				return at
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no renewal of %s stamped after %v within %v: the node did not renew its lease once healed", node, since, within)
		}
		time.Sleep(within / 300)
	}
}
