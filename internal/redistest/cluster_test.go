package redistest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
)

// TestCluster: StartCluster makes a 3-master, 3-replica Redis Cluster that
// serves every slot; keys written through a cluster client spread over
// the three masters; when a master is killed (SIGKILL) the cluster
// promotes its replica by itself, and every key written and replicated
// before is still there.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	if n := len(c.Masters(t)); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := c.Client(t)
	const keys = 300
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex // guards held: ForEachMaster calls fn on each master at once
	held := map[string]int64{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		mu.Lock()
		held[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil || len(held) != 3 {
		t.Fatalf("masters' key counts %v, %v", held, err)
	}
	for addr, n := range held {
		if n == 0 {
			t.Fatalf("master %s holds none of %d keys: %v", addr, keys, held)
		}
	}
	waitReplicated(t, c)

	victim := c.Masters(t)[0]
	victim.Kill(t)
	c.WaitHealthy(t, 3)
	if n := len(c.Masters(t)); n != 3 {
		t.Fatalf("%d masters after the failover, want 3", n)
	}
	// go-redis's cluster client does not learn of a promotion by itself
	// when the old master is gone (its dials fail; no MOVED tells it):
	// with its defaults, reads of the victim's slots failed for over 55 s.
	// A client that reloads the slots finds the promoted replica at once.
	cc.ReloadState(ctx)
	for i := range keys {
		v, err := cc.Get(ctx, fmt.Sprint("k", i)).Int()
		if err != nil || v != i {
			t.Fatalf("k%d after the failover: %d, %v", i, v, err)
		}
	}
}

// TestClusterChanges: what the helpers that change a cluster do, on one
// cluster, each change after the other: a manual failover swaps a master
// and its replica; a reshard moves the lowest slots of a master with
// their keys; a slot moved alone takes its keys along. Every key written
// before is read back through a cluster client afterwards.
func TestClusterChanges(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := c.Client(t)
	const keys = 300
	for i := range keys {
		if err := cc.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot0 := c.KeySlot(t, "k0")
	tests := []struct {
		name string
		// change changes c and checks what it did.
		change func(t *testing.T)
	}{
		{"a manual failover", func(t *testing.T) {
			master := c.Serving(t, slot0)
			replicas := c.ReplicasOf(t, master)
			if len(replicas) != 1 {
				t.Fatalf("%s has %d replicas, want 1", master.Addr(), len(replicas))
			}
			c.Failover(t, replicas[0])
			if got := c.Serving(t, slot0); got != replicas[0] {
				t.Errorf("slot %d served by %s after the failover, want the replica %s", slot0, got.Addr(), replicas[0].Addr())
			}
			if got := c.ReplicasOf(t, replicas[0]); len(got) != 1 || got[0] != master {
				t.Errorf("the promoted replica's replicas: %v, want the old master", got)
			}
		}},
		{"a reshard", func(t *testing.T) {
			from := c.Serving(t, slot0)
			to := otherMaster(t, c, from)
			const n = 100
			moving := c.Slots(t, from)[:n]
			c.Reshard(t, from, to, n)
			for _, slot := range moving {
				if got := c.Serving(t, slot); got != to {
					t.Fatalf("slot %d served by %s after the reshard, want %s", slot, got.Addr(), to.Addr())
				}
			}
			if got := len(c.Slots(t, from)); got != 16384/3+1-n && got != 16384/3-n {
				t.Errorf("%s serves %d slots after giving %d away", from.Addr(), got, n)
			}
		}},
		{"a slot moved", func(t *testing.T) {
			from := c.Serving(t, slot0)
			to := otherMaster(t, c, from)
			c.MoveSlot(t, slot0, to)
			if got := c.Serving(t, slot0); got != to {
				t.Errorf("slot %d served by %s after the move, want %s", slot0, got.Addr(), to.Addr())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.change(t)
			for i := range keys {
				v, err := cc.Get(ctx, fmt.Sprint("k", i)).Int()
				if err != nil || v != i {
					t.Fatalf("k%d: %d, %v", i, v, err)
				}
			}
		})
	}
}

// otherMaster returns a master of c other than m.
func otherMaster(t *testing.T, c *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	for _, o := range c.Masters(t) {
		if o != m {
			return o
		}
	}
	t.Fatalf("no master besides %s", m.Addr())
	return nil
}

// waitReplicated waits until every master's replica has what the master
// has (its offset), so that a failover loses nothing written before.
func waitReplicated(t *testing.T, c *redistest.Cluster) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range c.Masters(t) {
		rc := m.Client(t)
		for {
			info, err := rc.Info(context.Background(), "replication").Result()
			if err == nil && replicaCaughtUp(info) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the replica of %s did not catch up: %s %v", m.Addr(), info, err)
			}
			time.Sleep(10 * time.Millisecond) // polls a condition that stays true once reached
		}
	}
}

// replicaCaughtUp reads INFO replication of a master: its first replica's
// offset is the master's.
func replicaCaughtUp(info string) bool {
	var master, replica string
	for _, line := range splitLines(info) {
		if v, ok := cut(line, "master_repl_offset:"); ok {
			master = v
		}
		if v, ok := cut(line, "slave0:"); ok {
			for _, kv := range splitComma(v) {
				if o, ok := cut(kv, "offset="); ok {
					replica = o
				}
			}
		}
	}
	return master != "" && master == replica
}

func splitLines(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
}
func splitComma(s string) []string        { return strings.Split(s, ",") }
func cut(s, prefix string) (string, bool) { return strings.CutPrefix(s, prefix) }
