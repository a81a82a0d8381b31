package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// TestHeld: a node whose renewals fail (RenewHook) holds its lease no
// more once it is told of the lapse, and the others then find it dead in
// Redis; once its renewals succeed again it holds the lease anew.
func TestHeld(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	var cut atomic.Bool
	n, err := redisstore.Join(ctx, c, "cut", redisstore.NodeOptions{LeaseTTL: ttl, RenewHook: func(context.Context) error {
		if cut.Load() {
			return errors.New("cut")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(ctx) })
	other := join(t, onServer(srv), "other", ttl)
	if !n.Held() {
		t.Fatal("a node that just joined does not hold its lease")
	}

	cut.Store(true)
	select {
	case <-n.Lapses():
	case <-time.After(10 * ttl):
		t.Fatal("no lapse told")
	}
	if n.Held() {
		t.Error("the node holds its lease after it was told of the lapse")
	}
	eventually(t, "the others find the node dead", func(ctx context.Context) error {
		if alive, err := other.Alive(ctx, "cut"); err != nil || alive {
			return fmt.Errorf("alive %v, %v", alive, err)
		}
		return nil
	})

	cut.Store(false)
	eventually(t, "the node holds its lease again", func(context.Context) error {
		if !n.Held() {
			return errors.New("not held")
		}
		return nil
	})
	if alive, err := other.Alive(ctx, "cut"); err != nil || !alive {
		t.Errorf("the node holds its lease and the others find it dead (%v, %v)", alive, err)
	}
}
