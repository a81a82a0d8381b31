package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/redisstore"
)

// TestRead: Read answers from Redis as the ring's Since and Checksum do:
// the entries after `after` (exclusive), c(after), ErrGap below the
// oldest retained seq, ErrAhead past the last.
func TestRead(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		a, _ := newStore(t, tg, "a", redisstore.Options{})
		b, _ := newStore(t, tg, "b", redisstore.Options{}) // any node reads
		id := sessionID(t, 1)
		a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 6})
		r := a.NewRing(id, 6, redisstore.Callbacks{})
		defer r.Close()
		appendCommit(t, r, 10) // holds 5…10 after base 4
		r.Ack(ctx, 5)          // base 5
		r.Commit()
		flush(t, r)

		tests := []struct {
			name    string
			id      string
			after   uint64
			count   int
			want    []uint64
			wantErr error
		}{
			{"below the base", id, 4, 0, nil, buffer.ErrGap},
			{"from the base", id, 5, 0, []uint64{6, 7, 8, 9, 10}, nil},
			{"from the middle", id, 7, 0, []uint64{8, 9, 10}, nil},
			{"a page from the base", id, 5, 2, []uint64{6, 7}, nil},
			{"a page from the middle", id, 6, 3, []uint64{7, 8, 9}, nil},
			{"a page past the end", id, 8, 5, []uint64{9, 10}, nil},
			{"from the last", id, 10, 0, nil, nil},
			{"ahead", id, 11, 0, nil, buffer.ErrAhead},
			{"a missing session", "nope", 0, 0, nil, redisstore.ErrNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				page, err := b.Read(ctx, tt.id, tt.after, tt.count)
				if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
					t.Fatalf("Read: %v, want %v", err, tt.wantErr)
				}
				if err != nil {
					return
				}
				var got []uint64
				for _, e := range page.Entries {
					got = append(got, e.Seq)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("Read(%d, %d) = %v, want %v", tt.after, tt.count, got, tt.want)
				}
				since, _ := r.Since(ctx, tt.after)
				for i, e := range page.Entries {
					if string(e.Data) != string(since[i].Data) {
						t.Errorf("entry %d: %s, the ring has %s", e.Seq, e.Data, since[i].Data)
					}
				}
				sum, _ := r.Checksum(ctx, tt.after)
				last, lastSum, _ := r.Last(ctx)
				if page.AfterSum != sum || page.Last != last || page.LastSum != lastSum {
					t.Errorf("AfterSum %q, Last %d %q; want %q, %d %q", page.AfterSum, page.Last, page.LastSum, sum, last, lastSum)
				}
			})
		}
	})
}

// tail runs Store.Tail in a goroutine the test owns, collecting entries.
type tail struct {
	rec  *recorder // durable holds what fn got
	err  error     // Tail's result, once done is closed
	done chan struct{}
}

func startTail(t *testing.T, ctx context.Context, s *redisstore.Store, id string, after uint64, fn func([]buffer.Entry) error) *tail {
	tl := &tail{rec: newRecorder(), done: make(chan struct{})}
	cb := tl.rec.callbacks()
	ctx, cancel := context.WithCancel(ctx) // a test that failed does not wait for it
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(tl.done)
		tl.err = s.Tail(ctx, id, after, func(e []buffer.Entry) error {
			cb.OnDurable(e)
			if fn != nil {
				return fn(e)
			}
			return nil
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return tl
}

// result waits for Tail to return.
func (tl *tail) result(t *testing.T) error {
	t.Helper()
	select {
	case <-tl.done:
		return tl.err
	case <-time.After(waitTimeout):
		t.Fatalf("Tail did not return within %v", waitTimeout)
		return nil
	}
}

// TestTail: Tail sees the entries appended after it started, in order,
// none twice, and ends with its ctx.
func TestTail(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		opt := redisstore.Options{TailBlock: 100 * time.Millisecond}
		a, _ := newStore(t, tg, "a", opt)
		b, _ := newStore(t, tg, "b", opt)
		id := sessionID(t, 1)
		a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 1000})
		r := a.NewRing(id, 1000, redisstore.Callbacks{})
		defer r.Close()
		appendCommit(t, r, 5)
		flush(t, r)

		tctx, cancel := context.WithCancel(ctx)
		tl := startTail(t, tctx, b, id, 2, nil)
		for range 20 {
			appendCommit(t, r, 30)
		}
		tl.rec.waitDurable(t, 605)
		cancel()
		if err := tl.result(t); !errors.Is(err, context.Canceled) {
			t.Errorf("Tail after cancel: %v, want context.Canceled", err)
		}
		seqs := tl.rec.seqs()
		for i, seq := range seqs {
			if seq != uint64(3+i) {
				t.Fatalf("Tail's seqs %v…, want 3…605 in order, each once", seqs[:i+1])
			}
		}
		if len(seqs) != 603 {
			t.Errorf("Tail got %d entries, want 603", len(seqs))
		}
	})
}

// TestTailEnds: the ways Tail ends besides its ctx.
func TestTailEnds(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s, c := newStore(t, tg, "a", redisstore.Options{TailBlock: 100 * time.Millisecond})
		newSession := func(t *testing.T, capacity, n int) (string, *redisstore.Ring) {
			id := sessionID(t, 1)
			s.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: capacity})
			r := s.NewRing(id, capacity, redisstore.Callbacks{})
			t.Cleanup(func() { r.Close() })
			appendCommit(t, r, n)
			flush(t, r)
			return id, r
		}
		boom := errors.New("boom")
		tests := []struct {
			name string
			// run starts a Tail and makes it end; it returns what it must end with.
			run func(t *testing.T) (*tail, error)
		}{
			{"ahead", func(t *testing.T) (*tail, error) {
				id, _ := newSession(t, 10, 3)
				return startTail(t, ctx, s, id, 4, nil), buffer.ErrAhead
			}},
			{"below the base", func(t *testing.T) (*tail, error) {
				id, _ := newSession(t, 4, 10)
				return startTail(t, ctx, s, id, 5, nil), buffer.ErrGap
			}},
			{"a missing session", func(t *testing.T) (*tail, error) {
				return startTail(t, ctx, s, "nope", 0, nil), redisstore.ErrNotFound
			}},
			{"fn fails", func(t *testing.T) (*tail, error) {
				id, _ := newSession(t, 10, 3)
				return startTail(t, ctx, s, id, 0, func([]buffer.Entry) error { return boom }), boom
			}},
			{"the session leaves Redis", func(t *testing.T) (*tail, error) {
				id, _ := newSession(t, 10, 3)
				tl := startTail(t, ctx, s, id, 0, nil)
				tl.rec.waitDurable(t, 3)
				c.Del(ctx, "baton:{"+id+"}:meta", "baton:{"+id+"}:events")
				return tl, redisstore.ErrNotFound
			}},
			{"fn falls behind the ring", func(t *testing.T) (*tail, error) {
				id, r := newSession(t, 4, 1)
				release := make(chan struct{})
				tl := startTail(t, ctx, s, id, 0, func([]buffer.Entry) error { <-release; return nil })
				tl.rec.waitDurable(t, 1) // fn holds seq 1: the rest must wait
				// One write of 300 events: two entries, 2…257 and 258…301.
				// The first is trimmed whole; the second, past the base (297)
				// and holding 258 on, stays, and is no use to fn.
				for seq := 2; seq <= 301; seq++ {
					if _, err := r.Append(ctx, fmt.Sprintf("id-%d", seq), frame); err != nil {
						t.Fatal(err)
					}
				}
				r.Commit() // one unit, so one write
				flush(t, r)
				close(release)
				return tl, buffer.ErrGap
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tl, want := tt.run(t)
				if err := tl.result(t); !errors.Is(err, want) {
					t.Errorf("Tail ended with %v, want %v", err, want)
				}
			})
		}
	})
}
