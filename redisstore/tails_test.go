package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// tailReaders returns, by master of tg, the ids of the connections that
// read for Tails: on a server those blocked in XREAD (tails.go); on a
// cluster those subscribed to sessions' tail wakes (shardtails.go: ssub
// in CLIENT LIST).
func tailReaders(t *testing.T, tg target) map[*redistest.Server][]string {
	t.Helper()
	out := make(map[*redistest.Server][]string)
	for _, m := range tg.masters(t) {
		c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
		list, err := c.ClientList(context.Background()).Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			blocked := f["cmd"] == "xread" && strings.Contains(f["flags"], "b")
			if (tg.cluster == nil && blocked) || (tg.cluster != nil && f["ssub"] != "" && f["ssub"] != "0") {
				out[m] = append(out[m], f["id"])
			}
		}
	}
	return out
}

// waitReaders waits until n connections read for Tails (tailReaders),
// none of them beside another on its master, and returns them.
func waitReaders(t *testing.T, tg target, n int) map[*redistest.Server][]string {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		readers := tailReaders(t, tg)
		total, most := 0, 0
		for _, ids := range readers {
			total, most = total+len(ids), max(most, len(ids))
		}
		if total == n && most <= 1 {
			return readers
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections read for Tails after %v (at most %d on a master), want %d, one per master", total, waitTimeout, most, n)
		}
		time.Sleep(10 * time.Millisecond) // polls Redis's client lists: a condition, with a deadline
	}
}

// servingMasters is how many masters of tg serve the sessions ids.
func servingMasters(t *testing.T, tg target, ids []string) int {
	t.Helper()
	serving := make(map[*redistest.Server]bool)
	for _, id := range ids {
		serving[tg.serving(t, "baton:{"+id+"}:meta")] = true
	}
	return len(serving)
}

// checkSeqs fails t unless tl got exactly the seqs from..to, in order.
func checkSeqs(t *testing.T, name string, tl *tail, from, to uint64) {
	t.Helper()
	seqs := tl.rec.seqs()
	for i, seq := range seqs {
		if seq != from+uint64(i) {
			t.Fatalf("%s: seqs %v…, want %d…%d in order, each once", name, seqs[:i+1], from, to)
		}
	}
	if want := int(to - from + 1); len(seqs) != want {
		t.Errorf("%s: %d entries, want %d", name, len(seqs), want)
	}
}

// TestTailsShareOneConnection: the Tails of a Store, of many sessions and
// several per session, are served by one connection per master — on a
// server one blocked in XREAD, on a cluster one subscribed to the wakes
// of the sessions on each master that serves some — each Tail getting
// its session's entries after its own position, in order, each once.
func TestTailsShareOneConnection(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		opt := redisstore.Options{TailBlock: 200 * time.Millisecond}
		a, _ := newStore(t, tg, "a", opt)
		b, _ := newStore(t, tg, "b", opt)
		const sessions = 20
		tctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type followed struct {
			r     *redisstore.Ring
			tails [2]*tail
		}
		var all []followed
		var ids []string
		for i := range sessions {
			id, r, _ := newSession(t, a, i, 1000)
			defer r.Close()
			appendCommit(t, r, 3)
			flush(t, r)
			all = append(all, followed{r, [2]*tail{startTail(t, tctx, b, id, 0, nil), startTail(t, tctx, b, id, 2, nil)}})
			ids = append(ids, id)
		}
		for _, f := range all {
			for _, tl := range f.tails {
				tl.rec.waitDurable(t, 3)
			}
		}
		masters := servingMasters(t, tg, ids)
		waitReaders(t, tg, masters)
		for range 5 {
			for _, f := range all {
				appendCommit(t, f.r, 10)
			}
		}
		for i, f := range all {
			for j, tl := range f.tails {
				tl.rec.waitDurable(t, 53)
				checkSeqs(t, fmt.Sprintf("session %d, tail %d", i, j), tl, uint64(1+2*j), 53)
			}
		}
		for m, readers := range tailReaders(t, tg) {
			if len(readers) > 1 {
				t.Errorf("%d connections read for Tails on %s, want 1 for every Tail", len(readers), m.Addr())
			}
		}
		cancel()
		for _, f := range all {
			for _, tl := range f.tails {
				if err := tl.result(t); !errors.Is(err, context.Canceled) {
					t.Errorf("Tail after cancel: %v, want context.Canceled", err)
				}
			}
		}
	})
}

// TestTailsJoinLeave: a Tail that joins a session others follow gets what
// follows its own position, behind or ahead of theirs; one that leaves
// ends alone; after the last has left, a new Tail starts the reader
// again.
func TestTailsJoinLeave(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		opt := redisstore.Options{TailBlock: 200 * time.Millisecond}
		a, _ := newStore(t, tg, "a", opt)
		b, _ := newStore(t, tg, "b", opt)
		tests := []struct {
			name string
			// run follows the session with Tails of ctx, cancelled when it
			// returns.
			run func(t *testing.T, ctx context.Context, id string, r *redisstore.Ring)
		}{
			{"join behind the others", func(t *testing.T, ctx context.Context, id string, r *redisstore.Ring) {
				first := startTail(t, ctx, b, id, 0, nil)
				appendCommit(t, r, 40)
				first.rec.waitDurable(t, 40)
				late := startTail(t, ctx, b, id, 5, nil)
				appendCommit(t, r, 10)
				late.rec.waitDurable(t, 50)
				first.rec.waitDurable(t, 50)
				checkSeqs(t, "late", late, 6, 50)
				checkSeqs(t, "first", first, 1, 50)
			}},
			{"join ahead of a paused one", func(t *testing.T, ctx context.Context, id string, r *redisstore.Ring) {
				// The slow Tail's fn holds seq 1 while more than its mailbox
				// holds arrives: it is paused, the fast one is not held up,
				// and the slow one reads on from where it was paused.
				release := make(chan struct{})
				slow := startTail(t, ctx, b, id, 0, func([]buffer.Entry) error {
					select {
					case <-release:
					case <-ctx.Done(): // the test failed: end
					}
					return nil
				})
				appendCommit(t, r, 1)
				slow.rec.waitDurable(t, 1)
				const n = 1 + 1100
				appendCommit(t, r, n-1)
				flush(t, r) // else the fast Tail may start ahead of Redis (ErrAhead)
				fast := startTail(t, ctx, b, id, 20, nil)
				fast.rec.waitDurable(t, n)
				close(release)
				slow.rec.waitDurable(t, n)
				checkSeqs(t, "fast", fast, 21, n)
				checkSeqs(t, "slow", slow, 1, n)
			}},
			{"one leaves, the other goes on", func(t *testing.T, ctx context.Context, id string, r *redisstore.Ring) {
				lctx, leave := context.WithCancel(ctx)
				leaving := startTail(t, lctx, b, id, 0, nil)
				staying := startTail(t, ctx, b, id, 0, nil)
				appendCommit(t, r, 10)
				leaving.rec.waitDurable(t, 10)
				leave()
				if err := leaving.result(t); !errors.Is(err, context.Canceled) {
					t.Errorf("the Tail that left: %v, want context.Canceled", err)
				}
				appendCommit(t, r, 10)
				staying.rec.waitDurable(t, 20)
				checkSeqs(t, "staying", staying, 1, 20)
			}},
			{"the last leaves, a new one reads again", func(t *testing.T, ctx context.Context, id string, r *redisstore.Ring) {
				lctx, leave := context.WithCancel(ctx)
				first := startTail(t, lctx, b, id, 0, nil)
				appendCommit(t, r, 5)
				first.rec.waitDurable(t, 5)
				leave()
				first.result(t)
				waitReaders(t, tg, 0) // the reader ended with its last Tail
				appendCommit(t, r, 5)
				next := startTail(t, ctx, b, id, 3, nil)
				next.rec.waitDurable(t, 10)
				checkSeqs(t, "next", next, 4, 10)
			}},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id, r, _ := newSession(t, a, i, 2000)
				defer r.Close()
				ctx, cancel := context.WithCancel(ctx)
				defer cancel() // before startTail's cleanups wait for the Tails
				tt.run(t, ctx, id, r)
			})
		}
	})
}

// TestTailsReaderKilled: the readers' connections killed (CLIENT KILL)
// again and again while entries flow lose nothing and repeat nothing:
// every Tail gets every entry once, in order. On a server that is the
// shared reader's, blocked in XREAD; on a cluster each master's reader's
// subscription to the wakes, whose loss only delays entries until the
// reader's next poll.
func TestTailsReaderKilled(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		opt := redisstore.Options{TailBlock: 200 * time.Millisecond}
		a, _ := newStore(t, tg, "a", opt)
		b, _ := newStore(t, tg, "b", opt)
		const sessions, rounds, per = 10, 5, 20
		tctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var rings []*redisstore.Ring
		var tails []*tail
		var ids []string
		for i := range sessions {
			id, r, _ := newSession(t, a, i, 1000)
			defer r.Close()
			rings = append(rings, r)
			tails = append(tails, startTail(t, tctx, b, id, 0, nil))
			ids = append(ids, id)
		}
		masters := servingMasters(t, tg, ids)
		for round := range rounds {
			readers := waitReaders(t, tg, masters)
			for _, r := range rings {
				appendCommit(t, r, per/2)
			}
			for m, conns := range readers {
				if err := m.Client(t).Do(ctx, "CLIENT", "KILL", "ID", conns[0]).Err(); err != nil {
					t.Fatalf("round %d: CLIENT KILL on %s: %v", round, m.Addr(), err)
				}
			}
			for _, r := range rings {
				appendCommit(t, r, per/2)
			}
		}
		for i, tl := range tails {
			tl.rec.waitDurable(t, rounds*per)
			checkSeqs(t, fmt.Sprintf("session %d", i), tl, 1, rounds*per)
		}
	})
}
