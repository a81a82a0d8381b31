package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// TestUnitsLandWhole: a reader polling Redis while units are written only
// ever sees whole units — last_seq at a unit's end — with the checkpoint
// of the latest unit that had one, never one past last_seq.
func TestUnitsLandWhole(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s, c := newStore(t, tg, "a", redisstore.Options{})
		id, r, _ := newSession(t, s, 1, 1000)
		defer r.Close()

		type seen struct {
			last, cpSeq uint64
			cp          string
		}
		var observed []seen
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			meta := "baton:{" + id + "}:meta"
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := c.HMGet(ctx, meta, "last_seq", "cp_seq", "cp").Result()
				if err != nil {
					t.Errorf("poll: %v", err)
					return
				}
				last, _ := strconv.ParseUint(v[0].(string), 10, 64)
				cpSeq, _ := strconv.ParseUint(v[1].(string), 10, 64)
				cp, _ := v[2].(string)
				observed = append(observed, seen{last, cpSeq, cp})
			}
		})

		// Unit i has 1 + i%4 events, and a checkpoint unless i%3 == 2.
		wantCp := map[uint64]uint64{0: 0} // a unit's last seq → the cp_seq Redis must show with it
		cpSeq := uint64(0)
		for i := range 300 {
			appendOnly(t, r, 1+i%4)
			last, _, _ := r.Last(ctx)
			if i%3 != 2 {
				r.Checkpoint(fmt.Appendf(nil, "cp-%d", last))
				cpSeq = last
			}
			wantCp[last] = cpSeq
			r.Commit()
		}
		flush(t, r)
		close(stop)
		wg.Wait()

		for _, o := range observed {
			want, ok := wantCp[o.last]
			switch {
			case !ok:
				t.Fatalf("Redis showed last_seq %d, inside a unit", o.last)
			case o.cpSeq != want:
				t.Fatalf("Redis showed last_seq %d with cp_seq %d, want %d", o.last, o.cpSeq, want)
			case want > 0 && o.cp != fmt.Sprintf("cp-%d", want):
				t.Fatalf("Redis showed cp_seq %d with checkpoint %q", o.cpSeq, o.cp)
			}
		}
		t.Logf("%d snapshots of Redis, all at unit boundaries", len(observed))
	})
}

// appendOnly appends n events to r without committing.
func appendOnly(t testing.TB, r *redisstore.Ring, n int) {
	t.Helper()
	for range n {
		if _, err := r.Append(context.Background(), "id", frame); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFencing: once node B claims the session, node A's next write is
// refused (OnLost with ErrNotOwner) and writes nothing; B writes on from
// where Redis was.
func TestFencing(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		a, _ := newStore(t, tg, "a", redisstore.Options{})
		b, _ := newStore(t, tg, "b", redisstore.Options{})
		id := sessionID(t, 1)
		if err := a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 10}); err != nil {
			t.Fatal(err)
		}
		if err := a.CreateSession(ctx, id, redisstore.SessionMeta{}); !errors.Is(err, redisstore.ErrExists) {
			t.Errorf("creating it again: %v, want ErrExists", err)
		}
		recA := newRecorder()
		ra := a.NewRing(id, 10, recA.callbacks())
		defer ra.Close()
		appendCommit(t, ra, 3)
		flush(t, ra)

		tests := []struct {
			name   string
			id     string
			from   string
			want   bool
			wantIs error
		}{
			{"from the wrong owner", id, "x", false, nil},
			{"a missing session", "nope", "a", false, redisstore.ErrNotFound},
			{"from the owner", id, "a", true, nil},
			{"again", id, "a", false, nil},
		}
		for _, tt := range tests {
			ok, err := b.Claim(ctx, tt.id, tt.from)
			if ok != tt.want || !errors.Is(err, tt.wantIs) || (tt.wantIs == nil && err != nil) {
				t.Errorf("Claim %s: %v, %v; want %v, %v", tt.name, ok, err, tt.want, tt.wantIs)
			}
		}
		if info, _ := a.Lookup(ctx, id); info.Owner != "b" {
			t.Errorf("owner %q after the claim, want b", info.Owner)
		}
		rb, loaded, err := b.OpenRing(ctx, id, redisstore.Callbacks{})
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Close()
		if loaded.LastSeq != 3 {
			t.Fatalf("B opened at seq %d, want 3", loaded.LastSeq)
		}

		appendCommit(t, ra, 1)
		if err := recA.waitLost(t); !errors.Is(err, redisstore.ErrNotOwner) {
			t.Errorf("A's OnLost(%v), want ErrNotOwner", err)
		}
		if info, _ := a.Lookup(ctx, id); info.LastSeq != 3 {
			t.Errorf("A wrote after losing the session: Redis holds seq %d", info.LastSeq)
		}
		if seq, _ := ra.Durable(); seq != 3 {
			t.Errorf("A's Durable = %d, want 3", seq)
		}

		appendCommit(t, rb, 2)
		flush(t, rb)
		o, _, err := a.OpenRing(ctx, id, redisstore.Callbacks{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		sameAnswers(t, rb, o)
	})
}

// TestConflict: a ring opened before the former owner's last writes (the
// claim came after) is refused with ErrConflict, and Redis keeps the
// former owner's history.
func TestConflict(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		a, _ := newStore(t, tg, "a", redisstore.Options{})
		b, _ := newStore(t, tg, "b", redisstore.Options{})
		id := sessionID(t, 1)
		a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 10})
		ra := a.NewRing(id, 10, redisstore.Callbacks{})
		defer ra.Close()
		appendCommit(t, ra, 2)
		flush(t, ra)

		recB := newRecorder()
		rb, _, err := b.OpenRing(ctx, id, recB.callbacks()) // too early
		if err != nil {
			t.Fatal(err)
		}
		defer rb.Close()
		appendCommit(t, ra, 1)
		flush(t, ra)
		if ok, err := b.Claim(ctx, id, "a"); !ok || err != nil {
			t.Fatalf("Claim: %v, %v", ok, err)
		}
		rb.Append(ctx, "other", frame) // seq 3 again, another event
		rb.Commit()
		if err := recB.waitLost(t); !errors.Is(err, redisstore.ErrConflict) {
			t.Errorf("B's OnLost(%v), want ErrConflict", err)
		}
		page, err := b.Read(ctx, id, 2, 0)
		if _, want, _ := ra.Last(ctx); err != nil || page.LastSum != want {
			t.Errorf("Redis holds %+v, %v; want A's seq 3", page, err)
		}
	})
}

// TestCloseFromOnLost: the owner may free its session, closing the ring,
// from OnLost.
func TestCloseFromOnLost(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	a, _ := newStore(t, onServer(srv), "a", redisstore.Options{})
	b, _ := newStore(t, onServer(srv), "b", redisstore.Options{})
	id := sessionID(t, 1)
	a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 10})
	var r *redisstore.Ring
	closed := make(chan error, 1)
	r = a.NewRing(id, 10, redisstore.Callbacks{OnLost: func(error) { closed <- r.Close() }})
	b.Claim(ctx, id, "a")
	appendCommit(t, r, 1)
	select {
	case err := <-closed:
		if !errors.Is(err, redisstore.ErrNotOwner) {
			t.Errorf("Close from OnLost: %v, want ErrNotOwner", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Close from OnLost did not return")
	}
}

// TestRedisRestartedEmpty: a session gone from Redis ends the ring's
// writing with ErrNotFound.
func TestRedisRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, onServer(srv), "a", redisstore.Options{})
	_, r, rec := newSession(t, s, 1, 10)
	defer r.Close()
	appendCommit(t, r, 3)
	rec.waitDurable(t, 3)

	srv.Restart(t)
	appendCommit(t, r, 1)
	if err := rec.waitLost(t); !errors.Is(err, redisstore.ErrNotFound) {
		t.Errorf("OnLost(%v), want ErrNotFound", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.lost) != 1 {
		t.Errorf("OnLost called %d times", len(rec.lost))
	}
}

// TestGiveUp: with Redis down, the ring retries for GiveUpAfter and then
// reports the ring lost; Close does not wait past FlushTimeout.
func TestGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, onServer(srv), "a", redisstore.Options{GiveUpAfter: 300 * time.Millisecond})
	_, r, rec := newSession(t, s, 1, 10)
	appendCommit(t, r, 2)
	rec.waitDurable(t, 2)

	srv.Kill(t)
	start := time.Now()
	appendCommit(t, r, 3)
	err := rec.waitLost(t)
	if errors.Is(err, redisstore.ErrNotOwner) || errors.Is(err, redisstore.ErrNotFound) {
		t.Errorf("OnLost(%v), want a transient error given up on", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("gave up after %v, before GiveUpAfter", took)
	}
	if seq, _ := r.Durable(); seq != 2 {
		t.Errorf("Durable = %d, want 2", seq)
	}
	if err := r.Close(); err == nil {
		t.Errorf("Close of a lost ring: nil error")
	}
}

// TestClose: Close writes what was committed, then nothing; no callback
// begins after it; with Redis down it returns an error after FlushTimeout.
func TestClose(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, _ := newStore(t, onServer(srv), "a", redisstore.Options{FlushTimeout: 300 * time.Millisecond})

	id, r, rec := newSession(t, s, 1, 1000)
	appendCommit(t, r, 200)
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if info, _ := s.Lookup(ctx, id); info.LastSeq != 200 {
		t.Errorf("after Close, Redis holds seq %d, want 200", info.LastSeq)
	}
	r.Append(ctx, "late", frame)
	r.Commit()

	id2 := sessionID(t, 2)
	s.CreateSession(ctx, id2, redisstore.SessionMeta{Capacity: 10})
	r2 := s.NewRing(id2, 10, redisstore.Callbacks{})
	srv.Kill(t)
	appendCommit(t, r2, 1)
	start := time.Now()
	if err := r2.Close(); err == nil {
		t.Errorf("Close with Redis down: nil error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Close took %v with a FlushTimeout of 300ms", took)
	}

	s.Close() // the writer has returned: no callback can still come
	if seqs := rec.seqs(); len(seqs) > 0 && seqs[len(seqs)-1] > 200 {
		t.Errorf("OnDurable told of seq %d, appended after Close", seqs[len(seqs)-1])
	}
}

// TestStoreClose: Store.Close writes what open rings committed; after it
// they write nothing.
func TestStoreClose(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, c := newStore(t, onServer(srv), "a", redisstore.Options{})
	id, r, _ := newSession(t, s, 1, 1000)
	appendCommit(t, r, 100)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	meta := "baton:{" + id + "}:meta"
	if last, _ := c.HGet(ctx, meta, "last_seq").Result(); last != "100" {
		t.Errorf("after Store.Close, Redis holds seq %s, want 100", last)
	}
	appendCommit(t, r, 1)
	if err := r.Close(); !errors.Is(err, redisstore.ErrClosed) {
		t.Errorf("ring Close after Store.Close: %v, want ErrClosed", err)
	}
	if last, _ := c.HGet(ctx, meta, "last_seq").Result(); last != "100" {
		t.Errorf("a ring wrote after Store.Close: Redis holds seq %s", last)
	}
}

// TestTTL: every write sets both keys' TTL.
func TestTTL(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s, c := newStore(t, tg, "a", redisstore.Options{TTL: time.Hour})
		id := sessionID(t, 1)
		s.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 10})
		r := s.NewRing(id, 10, redisstore.Callbacks{})
		defer r.Close()
		appendCommit(t, r, 1)
		flush(t, r)
		for _, key := range []string{"baton:{" + id + "}:meta", "baton:{" + id + "}:events"} {
			ttl, err := c.PTTL(ctx, key).Result()
			if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
				t.Errorf("PTTL %s = %v, %v; want about an hour", key, ttl, err)
			}
		}
		if err := c.Persist(ctx, "baton:{"+id+"}:meta").Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		appendCommit(t, r, 1)
		flush(t, r)
		if ttl, _ := c.PTTL(ctx, "baton:{"+id+"}:meta").Result(); ttl <= 0 {
			t.Errorf("a write did not refresh the meta TTL: %v", ttl)
		}
	})
}
