package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
)

// join makes node id on tg, with its own client, leaving when t ends.
func join(t *testing.T, tg target, id string, ttl time.Duration) *redisstore.Node {
	t.Helper()
	n, err := redisstore.Join(context.Background(), tg.client(t), id, redisstore.NodeOptions{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(context.Background()) })
	return n
}

// TestAliveIsTheLease: a node is alive while its lease is, whatever its
// subscription does, on a server and on a cluster (where the
// subscription is sharded, on the master of its channel's slot). Nobody
// reads the blinking node's subscription here, so go-redis does not
// resubscribe: its channel stays without a subscriber for as long as the
// test looks.
func TestAliveIsTheLease(t *testing.T) {
	forTargets(t, func(t *testing.T, tg target) {
		for _, tt := range []struct {
			name string
			do   func(t *testing.T, n *redisstore.Node)
			want bool
		}{
			{name: "live", want: true},
			{name: "subscription killed (CLIENT KILL TYPE pubsub)", want: true,
				do: func(t *testing.T, n *redisstore.Node) {
					ctx := context.Background()
					ch := "baton:node:{" + n.ID() + "}:msgs"
					c := tg.serving(t, ch).Client(t)
					if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
						t.Fatal(err)
					}
					numSub := c.PubSubNumSub
					if tg.cluster != nil {
						numSub = c.PubSubShardNumSub
					}
					subs, err := numSub(ctx, ch).Result()
					if err != nil || subs[ch] != 0 {
						t.Fatalf("subscribers %v (%v): the kill did not take; the test proves nothing", subs, err)
					}
				}},
			{name: "left", want: false,
				do: func(t *testing.T, n *redisstore.Node) {
					if err := n.Leave(context.Background()); err != nil {
						t.Fatal(err)
					}
				}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				n := join(t, tg, "blinker", time.Minute)
				other := join(t, tg, "observer", time.Minute)
				if tt.do != nil {
					tt.do(t, n)
				}
				alive, err := other.Alive(context.Background(), n.ID())
				if err != nil || alive != tt.want {
					t.Errorf("Alive = %v (%v), want %v", alive, err, tt.want)
				}
			})
		}
	})
}

// TestClaimOfAGoneSession: a dead node's runs set names a session whose
// keys are gone. Claim answers ErrNoSession and forgets the run; the dead
// node, with nothing left, leaves the node list, and Orphans has nothing
// more to offer.
func TestClaimOfAGoneSession(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		rdb := tg.client(t)
		// A dead node: listed, with runs, and no lease.
		if err := rdb.SAdd(ctx, "baton:{nodes}", "node_dead").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.SAdd(ctx, "baton:{nodes}:node_dead:runs", "gone", "gone too").Err(); err != nil {
			t.Fatal(err)
		}
		cl, err := redisstore.NewCluster(ctx, tg.client(t), redisstore.ClusterOptions{Capacity: 16, Shards: tg.shards()})
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
	})
}
