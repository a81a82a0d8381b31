package redisstore_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// TestLostWrites: Redis acknowledges seqs 4 and 5 of a session, then a
// Sentinel failover promotes a replica that never received them
// (asynchronous replication: the replica was stopped while they were
// written). The ring's next write finds the store behind what it made
// durable and fences the lost seqs off instead of giving the session up:
// the store takes up at seq 5 with the ring's checksum, as if 4 and 5
// had been evicted, so a client that holds them goes on, one behind them
// resyncs, and no seq is ever given to two events.
func TestLostWrites(t *testing.T) {
	ctx := context.Background()
	f := redistest.StartFailover(t, 1)
	opt, err := redis.ParseFailoverURL(f.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewFailoverClient(opt)
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	id, r, rec := newSession(t, s, 1, 10)
	defer r.Close()
	appendCommit(t, r, 3)
	rec.waitDurable(t, 3)
	master := f.Master.Client(t)
	if n, err := master.Wait(ctx, 1, waitTimeout).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}

	f.Cut(t) // the replica misses what follows
	appendCommit(t, r, 2)
	rec.waitDurable(t, 5) // acknowledged by the master
	f.Master.Kill(t)
	f.Replica.Continue(t)
	f.WaitMaster(t, f.Replica)
	if page, err := s.Read(ctx, id, 3, 0); err != nil || page.Last != 3 {
		t.Fatalf("the new master holds %+v, %v; want seq 3 (4 and 5 lost)", page, err)
	}

	appendCommit(t, r, 1)
	rec.waitDurable(t, 6)
	rec.mu.Lock()
	lost := rec.lost
	rec.mu.Unlock()
	if len(lost) > 0 {
		t.Fatalf("OnLost(%v): the ring gave the session up", lost)
	}
	if n := s.Stats().Fences; n != 1 {
		t.Errorf("Stats().Fences = %d, want 1", n)
	}
	// The store holds seq 6 after 5, with the ring's chain; 4 and 5 are
	// gone, as evicted ones are.
	page, err := s.Read(ctx, id, 5, 0)
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Seq != 6 {
		t.Fatalf("Read after 5: %+v, %v; want seq 6", page, err)
	}
	if want, _ := r.Checksum(ctx, 5); page.AfterSum != want {
		t.Errorf("c(5) in the store %q, the ring's %q", page.AfterSum, want)
	}
	if _, want, _ := r.Last(ctx); page.LastSum != want {
		t.Errorf("c(6) in the store %q, the ring's %q", page.LastSum, want)
	}
	if _, err := s.Read(ctx, id, 3, 0); !errors.Is(err, buffer.ErrGap) {
		t.Errorf("Read after 3: %v, want ErrGap (4 and 5 are gone)", err)
	}
	// Another node opening the session sees what the ring has from 5 on.
	o, _, err := s.OpenRing(ctx, id, redisstore.Callbacks{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if last, sum, _ := o.Last(ctx); last != 6 {
		t.Errorf("opened: last %d %s, want 6", last, sum)
	}
	if n, err := c.HGet(ctx, "baton:{"+id+"}:meta", "lost_writes").Int(); err != nil || n != 2 {
		t.Errorf("meta's lost_writes %d, %v; want 2", n, err)
	}
}
