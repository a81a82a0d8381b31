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
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

// faultTimeout bounds the waits of the cluster fault tests: a failure
// found and a replica elected, a node restarted and resynced, or slots
// migrated, each take seconds, and the writer's and the tails' retries
// back off up to two more.
const faultTimeout = time.Minute

// faultSessions is how many sessions write through a cluster's fault.
const faultSessions = 6

// reshardSlots is how many slots a reshard moves: those of a master's
// lowest-numbered reshardSlots (redis-cli's pick).
const reshardSlots = 200

// TestShardFaults: a Redis Cluster's faults while a Store's rings write —
// Options.Replicas 1, so that what they made durable survives a failover
// — and a second Store's Tails follow them. After each the writes resume
// by themselves, no ring is lost, OnDurable told every entry once in
// order, each Tail got every entry once in order (started again after
// what it got when it ended, as a client's resume does), the store holds
// every entry the rings hold, and no durable write was lost (no fence).
func TestShardFaults(t *testing.T) {
	tests := []struct {
		name     string
		replicas int // each master's
		// sessions returns the ids of the sessions that write; nil:
		// faultSessions of them, wherever their slots are.
		sessions func(t *testing.T, c *redistest.Cluster) []string
		// fault strikes c while the sessions write and checks that it
		// struck the first; resumed waits until every session writes
		// again. It returns once c is healthy.
		fault func(t *testing.T, c *redistest.Cluster, ids []string, resumed func(t *testing.T))
	}{
		{name: "a master killed (kill -9): the cluster promotes a replica", replicas: 2,
			fault: func(t *testing.T, c *redistest.Cluster, ids []string, _ func(*testing.T)) {
				slot := c.KeySlot(t, metaKey(ids[0]))
				victim := c.Serving(t, slot)
				victim.Kill(t)
				c.WaitHealthy(t, 3)
				if got := c.ReplicasOf(t, c.Serving(t, slot)); len(got) != 1 {
					t.Fatalf("the promoted master has %d replicas, want the other one of the killed master's", len(got))
				}
			}},
		{name: "a master killed, then restarted empty: it comes back as a replica", replicas: 1,
			fault: func(t *testing.T, c *redistest.Cluster, ids []string, _ func(*testing.T)) {
				slot := c.KeySlot(t, metaKey(ids[0]))
				victim := c.Serving(t, slot)
				victim.Kill(t)
				c.WaitHealthy(t, 3) // its replica promoted, and alone: the writes there wait
				victim.Restart(t)
				c.WaitHealthy(t, 3)
				if got := c.ReplicasOf(t, c.Serving(t, slot)); len(got) != 1 || got[0] != victim {
					t.Fatalf("the promoted master's replicas %v, want the restarted master", got)
				}
			}},
		{name: "a manual failover (CLUSTER FAILOVER)", replicas: 1,
			fault: func(t *testing.T, c *redistest.Cluster, ids []string, _ func(*testing.T)) {
				slot := c.KeySlot(t, metaKey(ids[0]))
				master := c.Serving(t, slot)
				replica := c.ReplicasOf(t, master)[0]
				c.Failover(t, replica)
				if got := c.Serving(t, slot); got != replica {
					t.Fatalf("slot %d served by %s after the failover, want %s", slot, got.Addr(), replica.Addr())
				}
			}},
		{name: "slots resharded (redis-cli --cluster reshard), and back", replicas: 1,
			sessions: func(t *testing.T, c *redistest.Cluster) []string {
				// Half in the slots the reshard moves, half elsewhere.
				moving := c.Slots(t, c.Serving(t, 0))[:reshardSlots]
				var in, out []string
				for n := 0; len(in) < faultSessions/2 || len(out) < faultSessions/2; n++ {
					id := sessionID(t, n)
					if slices.Contains(moving, c.KeySlot(t, metaKey(id))) {
						if len(in) < faultSessions/2 {
							in = append(in, id)
						}
					} else if len(out) < faultSessions/2 {
						out = append(out, id)
					}
				}
				return append(in, out...)
			},
			fault: func(t *testing.T, c *redistest.Cluster, ids []string, resumed func(*testing.T)) {
				from, to := c.Serving(t, 0), c.Serving(t, 16383) // to's slots are all above from's
				moved := ids[:faultSessions/2]
				for _, step := range []struct{ from, to *redistest.Server }{{from, to}, {to, from}} {
					c.Reshard(t, step.from, step.to, reshardSlots)
					for _, id := range moved {
						if got := c.Serving(t, c.KeySlot(t, metaKey(id))); got != step.to {
							t.Fatalf("session %s served by %s after the reshard, want %s", id, got.Addr(), step.to.Addr())
						}
					}
					resumed(t)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testShardFault(t, tt.replicas, tt.sessions, tt.fault)
		})
	}
}

func metaKey(id string) string { return "baton:{" + id + "}:meta" }

// faulted is a session written and tailed through a fault.
type faulted struct {
	id   string
	r    *redisstore.Ring
	rec  *recorder // the ring's callbacks
	tail *follower
}

func testShardFault(t *testing.T, replicas int, sessions func(*testing.T, *redistest.Cluster) []string,
	fault func(*testing.T, *redistest.Cluster, []string, func(*testing.T))) {
	ctx := context.Background()
	began := time.Now()
	c := redistest.StartCluster(t, 3, replicas)
	tg := onCluster(c)
	const capacity = 1 << 16 // none evicted: the store must hold every entry
	a, _ := newStore(t, tg, "a", redisstore.Options{Replicas: 1, TailBlock: 200 * time.Millisecond})
	b, _ := newStore(t, tg, "b", redisstore.Options{TailBlock: 200 * time.Millisecond})
	var ids []string
	if sessions != nil {
		ids = sessions(t, c)
	} else {
		for n := range faultSessions {
			ids = append(ids, sessionID(t, n))
		}
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel() // before follow's cleanups wait for the Tails
	var all []*faulted
	var rings []*redisstore.Ring
	for _, id := range ids {
		if err := a.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: capacity}); err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		f := &faulted{id: id, r: a.NewRing(id, capacity, rec.callbacks()), rec: rec, tail: follow(t, tctx, b, id)}
		defer f.r.Close()
		all = append(all, f)
		rings = append(rings, f.r)
	}
	stop := writeOn(t, rings)
	resumed := func(t *testing.T) {
		t.Helper()
		for _, f := range all {
			last, _, _ := f.r.Last(ctx)
			want := last + 10
			f.rec.waitWithin(t, faultTimeout, fmt.Sprintf("session %s durable up to seq %d", f.id, want), func() bool {
				return len(f.rec.durable) > 0 && f.rec.durable[len(f.rec.durable)-1].Seq >= want
			})
		}
	}
	resumed(t)
	struck := time.Now()
	fault(t, c, ids, resumed)
	healed := time.Now()
	resumed(t)
	stop()
	t.Logf("cluster started in %v; the fault took %v, the writes resumed %v later",
		struck.Sub(began), healed.Sub(struck), time.Since(healed))

	for _, f := range all {
		fctx, cancel := context.WithTimeout(ctx, faultTimeout)
		err := f.r.Flush(fctx)
		cancel()
		if err != nil {
			t.Fatalf("session %s: %v", f.id, err)
		}
		want, err := f.r.Since(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := want[len(want)-1].Seq
		f.rec.mu.Lock()
		lost, durable := f.rec.lost, slices.Clone(f.rec.durable)
		f.rec.mu.Unlock()
		if len(lost) > 0 {
			t.Errorf("session %s: OnLost(%v)", f.id, lost)
		}
		sameEntries(t, fmt.Sprintf("session %s, OnDurable", f.id), durable, want)
		page, err := b.Read(ctx, f.id, 0, 0)
		if err != nil {
			t.Fatalf("session %s: Read: %v", f.id, err)
		}
		sameEntries(t, fmt.Sprintf("session %s, the store", f.id), page.Entries, want)
		f.tail.rec.waitWithin(t, faultTimeout, fmt.Sprintf("session %s tailed up to seq %d", f.id, last), func() bool {
			return len(f.tail.rec.durable) > 0 && f.tail.rec.durable[len(f.tail.rec.durable)-1].Seq >= last
		})
		f.tail.rec.mu.Lock()
		tailed := slices.Clone(f.tail.rec.durable)
		f.tail.rec.mu.Unlock()
		sameEntries(t, fmt.Sprintf("session %s, its Tail", f.id), tailed, want)
		if ends := f.tail.ended(); len(ends) > 0 {
			t.Logf("session %s: its Tail ended %d times and was started again; first: %v", f.id, len(ends), ends[0])
		}
	}
	if n := a.Stats().Fences; n != 0 {
		t.Errorf("%d fences: the cluster lost writes the rings had made durable", n)
	}
}

// sameEntries fails t unless got holds want's entries — seqs and data —
// in order, each once.
func sameEntries(t *testing.T, name string, got, want []buffer.Entry) {
	t.Helper()
	for i, e := range got {
		if i >= len(want) || e.Seq != want[i].Seq || string(e.Data) != string(want[i].Data) {
			t.Fatalf("%s: entry %d is seq %d %q, want seq %d…%d in order, each once", name, i, e.Seq, e.Data, want[0].Seq, want[len(want)-1].Seq)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", name, len(got), len(want))
	}
}

// writeOn appends an event to each ring and commits it, every few
// milliseconds, until stop is called (at the latest when t ends); stop
// waits for the writing goroutine.
func writeOn(t *testing.T, rings []*redisstore.Ring) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond) // the pace of the writes, not a wait
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, r := range rings {
				if _, err := r.Append(context.Background(), "e", frame); err != nil {
					t.Errorf("append: %v", err)
					return
				}
				r.Commit()
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// follower is a Tail of a session kept going through faults.
type follower struct {
	rec *recorder // durable holds what the Tails got

	mu   sync.Mutex // guards ends
	ends []error    // why each Tail ended before ctx was done
}

// follow tails session id on s from its start until ctx is done, on a
// goroutine the test owns. A Tail that ends with an error — a check of
// the session that met the fault, say — is started again after what it
// got, as a client's resume does after the 1012 that the end of its Tail
// closes it with (orchestrator/proxy.go); one that finds the entries it
// needs gone or ahead, or the session gone, is not.
func follow(t *testing.T, ctx context.Context, s *redisstore.Store, id string) *follower {
	fl := &follower{rec: newRecorder()}
	cb := fl.rec.callbacks()
	var wg sync.WaitGroup
	wg.Go(func() {
		var after uint64
		for {
			err := s.Tail(ctx, id, after, func(e []buffer.Entry) error {
				cb.OnDurable(e)
				after = e[len(e)-1].Seq
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			fl.mu.Lock()
			fl.ends = append(fl.ends, err)
			fl.mu.Unlock()
			if errors.Is(err, buffer.ErrGap) || errors.Is(err, buffer.ErrAhead) || errors.Is(err, redisstore.ErrNotFound) {
				t.Errorf("session %s: Tail after seq %d: %v", id, after, err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond): // a client's pause before it resumes, not a wait
			}
		}
	})
	t.Cleanup(wg.Wait)
	return fl
}

// ended returns why the follower's Tails ended so far.
func (fl *follower) ended() []error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return slices.Clone(fl.ends)
}

// TestNodeMessagesFollowTheSlot: a node's messages (Node.Send, Receive)
// go over sharded pub/sub, on the master of its channel's slot. When that
// slot moves to another master (resharded, with messages sent all the
// while) the receiver's subscription is ended there and made again where
// the slot went: messages are delivered again, and every message Send
// reported taken was received, in order, once.
func TestNodeMessagesFollowTheSlot(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 1)
	tg := onCluster(c)
	receiver := join(t, tg, "receiver", time.Minute)
	sender := join(t, tg, "sender", time.Minute)
	got := newMessages()
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := receiver.Receive(rctx, got.add); err != nil {
			t.Errorf("Receive: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	var sent []string // the messages Send reported taken, in order
	n := 0
	send := func() bool {
		n++
		msg := fmt.Sprint("m", n)
		taken, err := sender.Send(ctx, "receiver", []byte(msg))
		if err != nil {
			t.Errorf("Send %s: %v", msg, err) // on the sending goroutine too
			return false
		}
		if taken {
			sent = append(sent, msg)
		}
		return taken
	}
	// delivered sends until a message is taken, and waits until it is received.
	delivered := func(t *testing.T, what string) {
		t.Helper()
		deadline := time.Now().Add(faultTimeout)
		for !send() {
			if time.Now().After(deadline) {
				t.Fatalf("no message taken %v %s", faultTimeout, what)
			}
			time.Sleep(10 * time.Millisecond) // the pace of the retries, which have a deadline
		}
		got.wait(t, sent[len(sent)-1])
	}
	delivered(t, "after Join")

	slot := c.KeySlot(t, "baton:node:{receiver}:msgs")
	first := c.Serving(t, slot)
	for _, to := range slices.DeleteFunc(c.Masters(t), func(m *redistest.Server) bool { return m == first }) {
		// Messages sent while the slot moves, from another goroutine.
		stop := make(chan struct{})
		var sending sync.WaitGroup
		sending.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond): // the pace of the messages, not a wait
				}
				send()
			}
		})
		c.MoveSlot(t, slot, to)
		close(stop)
		sending.Wait()
		if got := c.Serving(t, slot); got != to {
			t.Fatalf("slot %d served by %s after the move, want %s", slot, got.Addr(), to.Addr())
		}
		delivered(t, "after the slot moved to "+to.Addr())
	}
	if received := got.all(); !slices.Equal(received, sent) {
		t.Errorf("received %d messages, sent %d taken; first difference at %d", len(received), len(sent), firstDiff(received, sent))
	}
	t.Logf("%d messages sent, %d taken", n, len(sent))
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// messages collects a node's messages and wakes waiters on each.
type messages struct {
	mu      sync.Mutex // guards got
	got     []string
	changed chan struct{} // a token after each message
}

func newMessages() *messages { return &messages{changed: make(chan struct{}, 1)} }

func (m *messages) add(b []byte) {
	m.mu.Lock()
	m.got = append(m.got, string(b))
	m.mu.Unlock()
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *messages) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got)
}

// wait returns once msg has been received, failing t after waitTimeout.
func (m *messages) wait(t *testing.T, msg string) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for !slices.Contains(m.all(), msg) {
		select {
		case <-m.changed:
		case <-deadline.C:
			t.Fatalf("%s not received after %v", msg, waitTimeout)
		}
	}
}
