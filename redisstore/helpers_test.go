package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

// waitTimeout bounds every wait of these tests.
const waitTimeout = 10 * time.Second

// A target is the Redis a test's stores share: one redis-server, or a
// Redis Cluster of three masters, each with a replica. A test that does
// not depend on one server's identity runs on both (forTargets).
type target struct {
	server  *redistest.Server  // one server, or nil
	cluster *redistest.Cluster // a Redis Cluster, or nil
	// replicas are the server's replicas, if any (replicatedTargets).
	replicas []*redistest.Server
}

// onServer is srv as a target.
func onServer(srv *redistest.Server) target { return target{server: srv} }

// onCluster is c as a target.
func onCluster(c *redistest.Cluster) target { return target{cluster: c} }

// forTargets runs fn as a subtest on each target: a server ("server")
// and a 3-master, 3-replica cluster ("cluster"), each started for the
// subtest — once per top-level test, for all of fn's own subtests.
func forTargets(t *testing.T, fn func(t *testing.T, tg target)) {
	t.Helper()
	for _, tt := range []struct {
		name  string
		start func(t *testing.T) target
	}{
		{"server", func(t *testing.T) target { return onServer(redistest.Start(t)) }},
		{"cluster", func(t *testing.T) target { return onCluster(redistest.StartCluster(t, 3, 1)) }},
	} {
		t.Run(tt.name, func(t *testing.T) { fn(t, tt.start(t)) })
	}
}

// shards are the options of the clients client makes of a cluster, for
// ClusterOptions.Shards: go-redis's defaults, as cmd/baton's; nil on a
// server.
func (tg target) shards() *redis.ClusterOptions {
	if tg.cluster == nil {
		return nil
	}
	addrs := make([]string, len(tg.cluster.Nodes))
	for i, n := range tg.cluster.Nodes {
		addrs[i] = n.Addr()
	}
	return &redis.ClusterOptions{Addrs: addrs}
}

// client returns a new client of tg, closed when t ends: a *redis.Client
// of the server that does not retry (the writer retries), or a
// *redis.ClusterClient of the cluster (shards).
func (tg target) client(t testing.TB) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	if tg.cluster != nil {
		c = redis.NewClusterClient(tg.shards())
	} else {
		c = redis.NewClient(&redis.Options{Addr: tg.server.Addr(), MaxRetries: -1})
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// serving returns the server that holds key: the server, or the master
// serving its slot.
func (tg target) serving(t testing.TB, key string) *redistest.Server {
	t.Helper()
	if tg.cluster == nil {
		return tg.server
	}
	return tg.cluster.Serving(t, tg.cluster.KeySlot(t, key))
}

// masters returns the servers that take writes: the server, or the
// cluster's masters.
func (tg target) masters(t testing.TB) []*redistest.Server {
	t.Helper()
	if tg.cluster == nil {
		return []*redistest.Server{tg.server}
	}
	return tg.cluster.Masters(t)
}

// newStore returns a Store of node on tg, with its own client, closed
// when t ends (the Store first, then its client).
func newStore(t testing.TB, tg target, node string, opt redisstore.Options) (*redisstore.Store, redis.UniversalClient) {
	t.Helper()
	c := tg.client(t)
	opt.Node = node
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := redisstore.New(c, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}

// sessionID returns an id unique to the test.
func sessionID(t testing.TB, n int) string { return fmt.Sprintf("%s-%d", t.Name(), n) }

// recorder collects a ring's callbacks and wakes waiters on each.
type recorder struct {
	mu      sync.Mutex // guards the fields below
	durable []buffer.Entry
	lost    []error
	changed chan struct{} // a token after each callback

	// during, if set, runs inside OnDurable (to call the ring from it).
	during func()
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) callbacks() redisstore.Callbacks {
	return redisstore.Callbacks{
		OnDurable: func(e []buffer.Entry) {
			if r.during != nil {
				r.during()
			}
			r.mu.Lock()
			r.durable = append(r.durable, e...)
			r.mu.Unlock()
			r.poke()
		},
		OnLost: func(err error) {
			r.mu.Lock()
			r.lost = append(r.lost, err)
			r.mu.Unlock()
			r.poke()
		},
	}
}

func (r *recorder) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// wait returns once cond holds (checked under r.mu after each callback),
// failing t after waitTimeout.
func (r *recorder) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	r.waitWithin(t, waitTimeout, what, cond)
}

// waitWithin is wait, failing t after d.
func (r *recorder) waitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waited %v for %s: %d entries durable, lost %v", d, what, len(r.durable), r.lost)
		}
	}
}

// waitDurable waits until the entries up to seq are durable.
func (r *recorder) waitDurable(t testing.TB, seq uint64) {
	t.Helper()
	r.wait(t, fmt.Sprintf("seq %d durable", seq), func() bool {
		return len(r.durable) > 0 && r.durable[len(r.durable)-1].Seq >= seq
	})
}

// waitLost waits for OnLost and returns its error.
func (r *recorder) waitLost(t testing.TB) error {
	t.Helper()
	r.wait(t, "OnLost", func() bool { return len(r.lost) > 0 })
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost[0]
}

// seqs returns the seqs made durable so far.
func (r *recorder) seqs() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]uint64, len(r.durable))
	for i, e := range r.durable {
		out[i] = e.Seq
	}
	return out
}

// flush waits until r's committed units are in Redis.
func flush(t testing.TB, r *redisstore.Ring) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func frame(seq uint64) ([]byte, error) { return fmt.Appendf(nil, `{"seq":%d}`, seq), nil }

// appendCommit appends n events (ids prefix-seq) to r, committing each.
func appendCommit(t testing.TB, r buffer.Durable, n int) {
	t.Helper()
	for range n {
		last, _, _ := r.Last(context.Background())
		if _, err := r.Append(context.Background(), fmt.Sprintf("id-%d", last+1), frame); err != nil {
			t.Fatal(err)
		}
		r.Commit()
	}
}

// sameAnswers fails t unless got answers every Since, Checksum and Last
// call as want does.
func sameAnswers(t testing.TB, want, got buffer.Ring) {
	t.Helper()
	ctx := context.Background()
	wl, ws, _ := want.Last(ctx)
	gl, gs, _ := got.Last(ctx)
	if wl != gl || ws != gs {
		t.Fatalf("Last = %d %s, want %d %s", gl, gs, wl, ws)
	}
	for seq := uint64(0); seq <= wl+1; seq++ {
		we, werr := want.Since(ctx, seq)
		ge, gerr := got.Since(ctx, seq)
		wc, wcerr := want.Checksum(ctx, seq)
		gc, gcerr := got.Checksum(ctx, seq)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || fmt.Sprint(gcerr) != fmt.Sprint(wcerr) || wc != gc ||
			!slices.EqualFunc(we, ge, func(a, b buffer.Entry) bool { return a.Seq == b.Seq && string(a.Data) == string(b.Data) }) {
			t.Fatalf("seq %d: Since %d entries, %v / Checksum %q %v; want %d entries, %v / %q %v",
				seq, len(ge), gerr, gc, gcerr, len(we), werr, wc, wcerr)
		}
	}
}

// newSession creates session n of t in s, with a ring of the given
// capacity, and returns its id, its ring and the recorder of its callbacks.
func newSession(t testing.TB, s *redisstore.Store, n, capacity int) (string, *redisstore.Ring, *recorder) {
	t.Helper()
	id := sessionID(t, n)
	if err := s.CreateSession(context.Background(), id, redisstore.SessionMeta{Capacity: capacity}); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	return id, s.NewRing(id, capacity, rec.callbacks()), rec
}
