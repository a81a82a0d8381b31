package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
)

// join makes node id on srv, with its own client, leaving when t ends.
func join(t *testing.T, srv *redistest.Server, id string, ttl time.Duration) *redisstore.Node {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	n, err := redisstore.Join(context.Background(), c, id, redisstore.NodeOptions{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(context.Background()) })
	return n
}

// TestAliveIsTheLease: a node is alive while its lease is, whatever its
// subscription does. Nobody reads the blinking node's subscription here,
// so go-redis does not resubscribe: its channel stays without a
// subscriber for as long as the test looks.
func TestAliveIsTheLease(t *testing.T) {
	for _, tt := range []struct {
		name string
		do   func(t *testing.T, srv *redistest.Server, n *redisstore.Node)
		want bool
	}{
		{name: "live", want: true},
		{name: "subscription killed (CLIENT KILL TYPE pubsub)", want: true,
			do: func(t *testing.T, srv *redistest.Server, n *redisstore.Node) {
				ctx := context.Background()
				if err := srv.Client(t).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
					t.Fatal(err)
				}
				subs, err := srv.Client(t).PubSubNumSub(ctx, "baton:node:{"+n.ID()+"}:msgs").Result()
				if err != nil || subs["baton:node:{"+n.ID()+"}:msgs"] != 0 {
					t.Fatalf("subscribers %v (%v): the kill did not take; the test proves nothing", subs, err)
				}
			}},
		{name: "left", want: false,
			do: func(t *testing.T, _ *redistest.Server, n *redisstore.Node) {
				if err := n.Leave(context.Background()); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			n := join(t, srv, "blinker", time.Minute)
			other := join(t, srv, "observer", time.Minute)
			if tt.do != nil {
				tt.do(t, srv, n)
			}
			alive, err := other.Alive(context.Background(), n.ID())
			if err != nil || alive != tt.want {
				t.Errorf("Alive = %v (%v), want %v", alive, err, tt.want)
			}
		})
	}
}

// TestClaimOfAGoneSession: a dead node's runs set names a session whose
// keys are gone. Claim answers ErrNoSession and forgets the run; the dead
// node, with nothing left, leaves the node list, and Orphans has nothing
// more to offer.
func TestClaimOfAGoneSession(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	// A dead node: listed, with runs, and no lease.
	if err := rdb.SAdd(ctx, "baton:{nodes}", "node_dead").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, "baton:{nodes}:node_dead:runs", "gone", "gone too").Err(); err != nil {
		t.Fatal(err)
	}
	cl, err := redisstore.NewCluster(ctx, srv.Client(t), redisstore.ClusterOptions{Capacity: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Leave(ctx); cl.Close() })

	for i, id := range []string{"gone", "gone too"} {
		orphans, err := cl.Orphans(ctx)
		if err != nil || len(orphans) != 2-i {
			t.Fatalf("orphans %v (%v), want %d", orphans, err, 2-i)
		}
		if won, err := cl.Claim(ctx, id, "node_dead"); won || !errors.Is(err, orchestrator.ErrNoSession) {
			t.Fatalf("Claim(%s) = %v, %v; want ErrNoSession", id, won, err)
		}
		listed, err := rdb.SIsMember(ctx, "baton:{nodes}", "node_dead").Result()
		if err != nil || listed != (i == 0) {
			t.Errorf("after forgetting %q the dead node is listed: %v (%v), want %v", id, listed, err, i == 0)
		}
	}
	if n, err := rdb.Exists(ctx, "baton:{nodes}:node_dead:runs").Result(); err != nil || n != 0 {
		t.Errorf("the dead node's runs set is still there (%d, %v)", n, err)
	}
	if orphans, err := cl.Orphans(ctx); err != nil || len(orphans) != 0 {
		t.Errorf("orphans %v (%v), want none", orphans, err)
	}
}
