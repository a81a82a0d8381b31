package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/buffer/buffertest"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// committing commits after every append and ack, so that the writer runs
// under the contract suite too.
type committing struct{ *redisstore.Ring }

func (c committing) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	e, err := c.Ring.Append(ctx, id, encode)
	c.Commit()
	return e, err
}

func (c committing) Ack(ctx context.Context, lastSeq uint64) error {
	err := c.Ring.Ack(ctx, lastSeq)
	c.Commit()
	return err
}

// TestRingContract runs the buffer.Ring contract against the Redis ring,
// committing as it goes, on a server and on a cluster.
func TestRingContract(t *testing.T) {
	forTargets(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, "a", redisstore.Options{MaxPending: 1 << 20})
		var n atomic.Int64
		buffertest.TestRing(t, func(capacity int) buffer.Ring {
			id := sessionID(t, int(n.Add(1)))
			if err := s.CreateSession(context.Background(), id, redisstore.SessionMeta{Capacity: capacity}); err != nil {
				t.Fatal(err)
			}
			r := s.NewRing(id, capacity, redisstore.Callbacks{})
			t.Cleanup(func() {
				if err := r.Close(); err != nil {
					t.Errorf("close ring %s: %v", id, err)
				}
			})
			return committing{r}
		})
	})
}

// TestDurable: after each Commit, Durable reaches the last seq, and
// OnDurable gets every entry exactly once, in order, even when the
// callback calls the ring.
func TestDurable(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, "a", redisstore.Options{})
		id := sessionID(t, 1)
		if err := s.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 50}); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		r := s.NewRing(id, 50, rec.callbacks())
		defer r.Close()
		rec.during = func() { r.Durable(); r.Last(ctx) } // must not deadlock
		if seq, sum := r.Durable(); seq != 0 || sum != "" {
			t.Fatalf("a new ring: Durable = %d %q", seq, sum)
		}

		const n = 500
		for i := range n {
			appendCommit(t, r, 1)
			if i%50 == 0 {
				r.Ack(ctx, uint64(i))
			}
		}
		rec.waitDurable(t, n)
		last, lastSum, _ := r.Last(ctx)
		if seq, sum := r.Durable(); seq != last || sum != lastSum {
			t.Errorf("Durable = %d %s, want Last %d %s", seq, sum, last, lastSum)
		}
		seqs := rec.seqs()
		for i, seq := range seqs {
			if seq != uint64(i+1) {
				t.Fatalf("OnDurable's seqs: %v…, want 1…%d each once in order", seqs[:i+1], n)
			}
		}
		if len(seqs) != n {
			t.Errorf("OnDurable got %d entries, want %d", len(seqs), n)
		}
		if info, err := s.Lookup(ctx, id); err != nil || info.LastSeq != n || info.Owner != "a" || info.Capacity != 50 {
			t.Errorf("Lookup = %+v, %v", info, err)
		}
	})
}

// TestUncommittedIsNotWritten: appends without a Commit stay in memory.
func TestUncommittedIsNotWritten(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, "a", redisstore.Options{})
		id, r, rec := newSession(t, s, 1, 10)
		appendCommit(t, r, 2)
		r.Append(ctx, "x", frame) // seq 3, never committed
		rec.waitDurable(t, 2)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if info, _ := s.Lookup(ctx, id); info.LastSeq != 2 {
			t.Errorf("Redis holds seq %d, want 2: an uncommitted append was written", info.LastSeq)
		}
		if seq, _ := r.Durable(); seq != 2 {
			t.Errorf("Durable = %d, want 2", seq)
		}
	})
}

// TestOpenRingMirrors: a ring opened from Redis by another node answers
// every Since, Checksum and Last as the writer's ring does, after
// eviction and acks, and goes on from there.
func TestOpenRingMirrors(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		a, _ := newStore(t, tg, "a", redisstore.Options{})
		b, _ := newStore(t, tg, "b", redisstore.Options{})
		tests := []struct {
			name     string
			capacity int
			appends  int
			acks     []uint64 // after all appends
		}{
			{"empty", 4, 0, nil},
			{"under capacity", 4, 3, nil},
			{"exactly full", 4, 4, nil},
			{"evicted", 4, 11, nil},
			{"acked", 8, 6, []uint64{2, 4}},
			{"acked and evicted", 4, 9, []uint64{7}},
			{"acked below the base", 4, 9, []uint64{3}},
			{"everything acked", 4, 5, []uint64{5}},
			{"capacity 1", 1, 3, nil},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id := sessionID(t, i)
				if err := a.CreateSession(ctx, id, redisstore.SessionMeta{TokenHash: "th", Subject: "alice", Capacity: tt.capacity}); err != nil {
					t.Fatal(err)
				}
				rec := newRecorder()
				r := a.NewRing(id, tt.capacity, rec.callbacks())
				defer r.Close()
				appendCommit(t, r, tt.appends)
				for _, ack := range tt.acks {
					if err := r.Ack(ctx, ack); err != nil {
						t.Fatal(err)
					}
				}
				r.Checkpoint([]byte("state"))
				r.Commit()
				flush(t, r)

				o, loaded, err := b.OpenRing(ctx, id, redisstore.Callbacks{})
				if err != nil {
					t.Fatal(err)
				}
				defer o.Close()
				sameAnswers(t, r, o)
				if seq, sum := o.Durable(); seq != uint64(tt.appends) {
					t.Errorf("opened ring: Durable = %d %s, want %d", seq, sum, tt.appends)
				}
				if loaded.Owner != "a" || loaded.TokenHash != "th" || loaded.Subject != "alice" ||
					loaded.Capacity != tt.capacity || string(loaded.Checkpoint) != "state" ||
					loaded.CheckpointSeq != uint64(tt.appends) {
					t.Errorf("Loaded = %+v", loaded)
				}
				// Both go on alike.
				for _, ring := range []buffer.Ring{r, o} {
					ring.Append(ctx, "next", frame)
				}
				sameAnswers(t, r, o)
			})
		}
	})
}

// TestOpenRingAgainstModel: random appends, acks and units on one node,
// then the ring another node opens equals it.
func TestOpenRingAgainstModel(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		a, _ := newStore(t, tg, "a", redisstore.Options{MaxPending: 1 << 20})
		b, _ := newStore(t, tg, "b", redisstore.Options{})
		for _, capacity := range []int{1, 7, 8, 100} {
			t.Run(fmt.Sprint(capacity), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(capacity), 3))
				id := sessionID(t, capacity)
				a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: capacity})
				r := a.NewRing(id, capacity, redisstore.Callbacks{})
				defer r.Close()
				for step := range 2000 {
					last, _, _ := r.Last(ctx)
					switch op := rng.IntN(10); {
					case op < 6:
						r.Append(ctx, fmt.Sprint("e", step), frame)
					case op < 7 && last > 0:
						if err := r.Ack(ctx, rng.Uint64N(last+1)); err != nil {
							t.Fatal(err)
						}
					case op < 8:
						r.Checkpoint(fmt.Appendf(nil, "cp-%d", last))
					default:
						r.Commit()
					}
					if step%500 == 499 {
						r.Commit()
						flush(t, r)
						last, _, _ := r.Last(ctx)
						if seq, _ := r.Durable(); seq != last {
							t.Fatalf("flushed, Durable = %d, want %d", seq, last)
						}
						o, _, err := b.OpenRing(ctx, id, redisstore.Callbacks{})
						if err != nil {
							t.Fatal(err)
						}
						sameAnswers(t, r, o)
						o.Close()
					}
				}
			})
		}
	})
}

// TestBacklog: past MaxPending entries waiting, the ring is lost with
// ErrBacklog (told from the writer), and keeps answering from memory.
func TestBacklog(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, _ := newStore(t, onServer(srv), "a", redisstore.Options{MaxPending: 3})
	id, r, rec := newSession(t, s, 1, 10)
	defer r.Close()
	for range 4 { // never committed: the backlog grows
		r.Append(ctx, "x", frame)
	}
	if err := rec.waitLost(t); !errors.Is(err, redisstore.ErrBacklog) {
		t.Errorf("OnLost(%v), want ErrBacklog", err)
	}
	if last, _, err := r.Last(ctx); last != 4 || err != nil {
		t.Errorf("a lost ring: Last = %d, %v; want 4 from memory", last, err)
	}
	r.Commit()
	if info, _ := s.Lookup(ctx, id); info.LastSeq != 0 {
		t.Errorf("a lost ring wrote: Redis holds seq %d", info.LastSeq)
	}
}
