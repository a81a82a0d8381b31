package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// withReplica starts a master and a replica of it, and waits until the
// replica acknowledges the master's writes (WAIT).
func withReplica(t testing.TB) (master, replica *redistest.Server) {
	t.Helper()
	master, replicas := withReplicas(t, 1)
	return master, replicas[0]
}

// withReplicas starts a master and n replicas of it, and waits until
// every replica acknowledges the master's writes (WAIT).
func withReplicas(t testing.TB, n int) (master *redistest.Server, replicas []*redistest.Server) {
	t.Helper()
	master = redistest.Start(t)
	for range n {
		replicas = append(replicas, redistest.StartConfig(t, redistest.Config{ReplicaOf: master.Addr()}))
	}
	c := master.Client(t)
	eventually(t, "the replicas in sync", func(ctx context.Context) error {
		if err := c.Set(ctx, "sync", "1", 0).Err(); err != nil {
			return err
		}
		if got, err := c.Wait(ctx, n, 100*time.Millisecond).Result(); err != nil || got != int64(n) {
			return fmt.Errorf("WAIT: %d replicas, %v", got, err)
		}
		return nil
	})
	return master, replicas
}

// replicatedTargets start the Redis of a replicas test, on which a
// master's replicas may be stopped: a master with n replicas, or a
// cluster of three masters with n replicas each.
var replicatedTargets = []struct {
	name  string
	start func(t *testing.T, n int) target
}{
	{"server", func(t *testing.T, n int) target {
		master, replicas := withReplicas(t, n)
		return target{server: master, replicas: replicas}
	}},
	{"cluster", func(t *testing.T, n int) target { return onCluster(redistest.StartCluster(t, 3, n)) }},
}

// replicasOf returns the replicas of master, a master of tg.
func (tg target) replicasOf(t testing.TB, master *redistest.Server) []*redistest.Server {
	t.Helper()
	if tg.cluster == nil {
		return tg.replicas
	}
	return tg.cluster.ReplicasOf(t, master)
}

// onReplica returns a connection to replica rs of tg that reads what it
// holds (READONLY on a cluster, where a replica redirects reads to its
// master otherwise), closed when t ends.
func onReplica(t testing.TB, tg target, rs *redistest.Server) redis.Cmdable {
	t.Helper()
	conn := rs.Client(t).Conn()
	t.Cleanup(func() { conn.Close() })
	if tg.cluster != nil {
		if err := conn.ReadOnly(context.Background()).Err(); err != nil {
			t.Fatalf("READONLY on %s: %v", rs.Addr(), err)
		}
	}
	return conn
}

// eventually polls cond until it returns nil, failing t after waitTimeout
// with its last error.
func eventually(t testing.TB, what string, cond func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond(ctx)
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waited %v for %s: %v", waitTimeout, what, err)
		}
	}
}

// TestReplicas: with Options.Replicas a write counts (OnDurable) only
// once every replica online holds it, and at least Replicas of them. One
// replica stopped (SIGSTOP: its link stays up, as a replica that lags),
// the master takes the write and the writer sends it again and again, but
// it never counts — even when another replica holds it, for the sentinels
// might promote the stopped one; continued, the replica catches up and
// the write counts, once. Without Replicas the master's reply counts.
// On a cluster the replicas are those of the session's master (the
// writer's WAIT goes to each master on its own connection: writeShards).
func TestReplicas(t *testing.T) {
	for _, target := range replicatedTargets {
		t.Run(target.name, func(t *testing.T) { testReplicas(t, target.start) })
	}
}

func testReplicas(t *testing.T, start func(t *testing.T, n int) target) {
	for _, tt := range []struct {
		name          string
		min, replicas int
	}{
		{name: "the master's reply counts", min: 0, replicas: 1},
		{name: "the replica must hold the write", min: 1, replicas: 1},
		{name: "both replicas must hold the write", min: 1, replicas: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tg := start(t, tt.replicas)
			s, c := newStore(t, tg, "a", redisstore.Options{Replicas: tt.min})
			id := sessionID(t, 1)
			replicas := tg.replicasOf(t, tg.serving(t, "baton:{"+id+"}:meta"))
			if len(replicas) != tt.replicas {
				t.Fatalf("the session's master has %d replicas, want %d", len(replicas), tt.replicas)
			}
			stopped := replicas[len(replicas)-1]
			_, r, rec := newSession(t, s, 1, 100)
			defer r.Close()
			appendCommit(t, r, 1)
			rec.waitDurable(t, 1)

			stopped.Pause(t)
			appendCommit(t, r, 2)
			eventually(t, "the master holding seq 3", func(ctx context.Context) error {
				last, err := c.HGet(ctx, "baton:{"+id+"}:meta", "last_seq").Uint64()
				if err != nil || last != 3 {
					return fmt.Errorf("last_seq %d, %v", last, err)
				}
				return nil
			})
			if tt.min == 0 {
				rec.waitDurable(t, 3)
				stopped.Continue(t)
				return
			}
			// Two more round trips, each ending in a WAIT that timed out:
			// the write still does not count (or it counted already).
			trips := s.Stats().RoundTrips
			eventually(t, "the writer trying twice more", func(context.Context) error {
				if n := s.Stats().RoundTrips; n < trips+2 && !slices.Contains(rec.seqs(), 3) {
					return fmt.Errorf("%d round trips since", n-trips)
				}
				return nil
			})
			if seqs := rec.seqs(); slices.Contains(seqs, 3) {
				t.Fatalf("seq 3 counted durable with a replica stopped: %v", seqs)
			}
			stopped.Continue(t)
			rec.waitDurable(t, 3)
			if seqs := rec.seqs(); !slices.Equal(seqs, []uint64{1, 2, 3}) {
				t.Errorf("durable seqs %v, want 1 2 3 once each", seqs)
			}
			for i, rs := range replicas {
				rc := onReplica(t, tg, rs)
				if last, err := rc.HGet(context.Background(), "baton:{"+id+"}:meta", "last_seq").Uint64(); err != nil || last != 3 {
					t.Errorf("replica %d holds last_seq %d (%v), want 3", i, last, err)
				}
			}
		})
	}
}

// TestReplicaLeavesHeld: a replica detached from the master as Sentinel
// detaches the one it promotes (REPLICAOF NO ONE) is still waited for,
// for Options.ReplicaHold: the master keeps taking writes and its other
// replica acknowledges them, but a promotion has lost them, so none
// counts until the hold has passed since the master last listed both.
func TestReplicaLeavesHeld(t *testing.T) {
	const hold = 2 * time.Second
	ctx := context.Background()
	master, replicas := withReplicas(t, 2)
	s, c := newStore(t, onServer(master), "a", redisstore.Options{Replicas: 1, ReplicaHold: hold})
	id, r, rec := newSession(t, s, 1, 100)
	defer r.Close()
	// This write's round trip lists both replicas, after listed.
	listed := time.Now()
	appendCommit(t, r, 1)
	rec.waitDurable(t, 1)

	if err := replicas[1].Client(t).Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the master listing one replica", func(ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "connected_slaves:1\r\n") {
			return fmt.Errorf("INFO replication: %q, %v", info, err)
		}
		return nil
	})
	appendCommit(t, r, 2)
	eventually(t, "the remaining replica holding seq 3", func(ctx context.Context) error {
		last, err := replicas[0].Client(t).HGet(ctx, "baton:{"+id+"}:meta", "last_seq").Uint64()
		if err != nil || last != 3 {
			return fmt.Errorf("last_seq %d, %v", last, err)
		}
		return nil
	})
	rec.waitDurable(t, 3)
	if took := time.Since(listed); took < hold {
		t.Fatalf("seq 3 counted %v after the master last listed both replicas, before the hold of %v", took, hold)
	}
	if seqs := rec.seqs(); !slices.Equal(seqs, []uint64{1, 2, 3}) {
		t.Errorf("durable seqs %v, want 1 2 3 once each", seqs)
	}
}

// TestLeaseReplicas: with NodeOptions.Replicas a renewal holds the lease
// only once a replica has it. With the replica live the node is told no
// lapse across several renewals. The replica stopped, the master still
// takes every renewal (the others see the node alive), but the node is
// told its lease may have lapsed: a failover now could lose the renewals.
// On a cluster the replica is that of the master of the node keys' slot.
func TestLeaseReplicas(t *testing.T) {
	for _, target := range replicatedTargets {
		t.Run(target.name, func(t *testing.T) { testLeaseReplicas(t, target.start(t, 1)) })
	}
}

func testLeaseReplicas(t *testing.T, tg target) {
	const ttl = 3 * time.Second // as TestLapses: a fifth of it for a loaded machine's wake-up
	ctx := context.Background()
	replica := tg.replicasOf(t, tg.serving(t, "baton:{nodes}"))[0]
	c := tg.client(t)
	n, err := redisstore.Join(ctx, c, "replicated", redisstore.NodeOptions{LeaseTTL: ttl, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Leave(ctx) })
	other := join(t, tg, "other", ttl)

	select {
	case <-n.Lapses():
		t.Fatal("told a lapse with the replica live")
	case <-time.After(ttl):
	}
	replica.Pause(t)
	select {
	case <-n.Lapses():
	case <-time.After(10 * ttl):
		t.Fatal("no lapse told with the replica stopped")
	}
	if alive, err := other.Alive(ctx, "replicated"); err != nil || !alive {
		t.Errorf("the master lost the lease (alive %v, %v); only its replica stopped", alive, err)
	}
}

// TestJoinWaitsForReplica: a node joining while no replica holds its
// writes (the replica stopped, as during a resync) waits for one rather
// than fail: the master takes its renewals meanwhile, and Join returns
// once the replica is back. A ctx that ends first fails it with
// ErrUnreplicated. On a cluster the replica is that of the master of the
// node keys' slot.
func TestJoinWaitsForReplica(t *testing.T) {
	for _, target := range replicatedTargets {
		t.Run(target.name, func(t *testing.T) { testJoinWaitsForReplica(t, target.start(t, 1)) })
	}
}

func testJoinWaitsForReplica(t *testing.T, tg target) {
	ctx := context.Background()
	replica := tg.replicasOf(t, tg.serving(t, "baton:{nodes}"))[0]
	c := tg.client(t)
	// A cluster client learns the slots from a node it picks: not from
	// the stopped one, on whose answer it would wait past the short ctx.
	if err := c.Exists(ctx, "baton:{nodes}").Err(); err != nil {
		t.Fatal(err)
	}
	replica.Pause(t)

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := redisstore.Join(short, c, "early", redisstore.NodeOptions{Replicas: 1}); !errors.Is(err, redisstore.ErrUnreplicated) {
		t.Fatalf("Join with the replica stopped and a short ctx: %v, want ErrUnreplicated", err)
	}

	joined := make(chan error, 1)
	var n *redisstore.Node
	go func() {
		jctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		var err error
		n, err = redisstore.Join(jctx, c, "waiting", redisstore.NodeOptions{Replicas: 1})
		joined <- err
	}()
	eventually(t, "the master holding the joining node's lease", func(ctx context.Context) error {
		if n, err := c.Exists(ctx, "baton:{nodes}:waiting").Result(); err != nil || n != 1 {
			return fmt.Errorf("exists %d, %v", n, err)
		}
		return nil
	})
	select {
	case err := <-joined:
		t.Fatalf("Join returned (%v) with no replica holding its renewal", err)
	default:
	}
	replica.Continue(t)
	select {
	case err := <-joined:
		if err != nil {
			t.Fatal(err)
		}
		n.Leave(ctx)
	case <-time.After(waitTimeout):
		t.Fatal("Join did not return once the replica was back")
	}
}
