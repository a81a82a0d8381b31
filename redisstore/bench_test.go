package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/redisstore"
)

var payload = bytes.Repeat([]byte("x"), 300) // about one encoded event

// BenchmarkWriter: appends per second through the writer, a unit (Commit)
// per append, at 1, 100 and 1,000 sessions. Each session's producer lets
// at most `window` of its appends wait unwritten: window 1 waits for each
// event to be durable before the next (latency-bound), window 64 lets a
// session's units pile into one write. An op is one append, durable.
// ring-ns/append is the time spent in Append and Commit, what the session
// lock holds for.
func BenchmarkWriter(b *testing.B) {
	srv := redistest.Start(b)
	for _, sessions := range []int{1, 100, 1000} {
		for _, window := range []int{1, 64} {
			b.Run(fmt.Sprintf("sessions=%d/window=%d", sessions, window), func(b *testing.B) {
				benchWriter(b, srv, redisstore.Options{}, sessions, window)
			})
		}
	}
}

// BenchmarkWriterReplicas: BenchmarkWriter's loads on a master with a
// replica, each write counting once the replica holds it
// (Options.Replicas 1, a WAIT per round trip).
func BenchmarkWriterReplicas(b *testing.B) {
	master, _ := withReplica(b)
	for _, sessions := range []int{1, 100, 1000} {
		for _, window := range []int{1, 64} {
			b.Run(fmt.Sprintf("sessions=%d/window=%d", sessions, window), func(b *testing.B) {
				benchWriter(b, master, redisstore.Options{Replicas: 1}, sessions, window)
			})
		}
	}
}

func benchWriter(b *testing.B, srv *redistest.Server, opt redisstore.Options, sessions, window int) {
	ctx := context.Background()
	s, c := newStore(b, onServer(srv), "bench", opt)
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	type session struct {
		ring    *redisstore.Ring
		mu      sync.Mutex // guards durable
		durable uint64
		woken   chan struct{}
		inRing  time.Duration // only its producer touches it
	}
	all := make([]*session, sessions)
	for i := range all {
		id := fmt.Sprintf("bench-%d", i)
		if err := s.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 1000}); err != nil {
			b.Fatal(err)
		}
		se := &session{woken: make(chan struct{}, 1)}
		se.ring = s.NewRing(id, 1000, redisstore.Callbacks{
			OnDurable: func(e []buffer.Entry) {
				se.mu.Lock()
				se.durable = e[len(e)-1].Seq
				se.mu.Unlock()
				select {
				case se.woken <- struct{}{}:
				default:
				}
			},
			OnLost: func(err error) { b.Errorf("lost: %v", err) },
		})
		all[i] = se
	}
	each := (b.N + sessions - 1) / sessions
	enc := func(uint64) ([]byte, error) { return payload, nil }
	before := s.Stats()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for _, se := range all {
		wg.Go(func() {
			deadline := time.NewTimer(time.Minute)
			defer deadline.Stop()
			for i := range each {
				t0 := time.Now()
				e, err := se.ring.Append(ctx, "0193a8f2-5a1c-7c4e-9d2b-000000000000", enc)
				if err != nil {
					b.Error(err)
					return
				}
				se.ring.Commit()
				se.inRing += time.Since(t0)
				// Wait while window appends wait unwritten (and for the
				// last one to be durable).
				for {
					se.mu.Lock()
					d := se.durable
					se.mu.Unlock()
					if e.Seq-d < uint64(window) && (i < each-1 || d == e.Seq) {
						break
					}
					select {
					case <-se.woken:
					case <-deadline.C:
						b.Errorf("seq %d not durable after a minute (durable %d)", e.Seq, d)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	after := s.Stats()
	total := float64(each * sessions)
	rt := float64(after.RoundTrips - before.RoundTrips)
	b.ReportMetric(total/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(after.Entries-before.Entries)/rt, "entries/rt")
	b.ReportMetric(float64(after.Scripts-before.Scripts)/rt, "sessions/rt")
	var inRing time.Duration
	for _, se := range all {
		inRing += se.inRing
	}
	b.ReportMetric(float64(inRing.Nanoseconds())/total, "ring-ns/append")
	for _, se := range all {
		se.ring.Close()
	}
}

// BenchmarkAppendCommit: what Append and Commit cost the session lock on a
// full 1,000-entry ring while the writer drains it (compare
// buffer.BenchmarkAppend, Memory alone). The producer is far faster than
// the writer: when 500 appends wait, the clock stops until they are
// written.
func BenchmarkAppendCommit(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	s, _ := newStore(b, onServer(srv), "bench", redisstore.Options{})
	if err := s.CreateSession(ctx, "bench", redisstore.SessionMeta{Capacity: 1000}); err != nil {
		b.Fatal(err)
	}
	woken := make(chan struct{}, 1)
	r := s.NewRing("bench", 1000, redisstore.Callbacks{
		OnDurable: func([]buffer.Entry) {
			select {
			case woken <- struct{}{}:
			default:
			}
		},
		OnLost: func(err error) { b.Errorf("lost: %v", err) },
	})
	enc := func(uint64) ([]byte, error) { return payload, nil }
	for range 1000 {
		r.Append(ctx, "0193a8f2-5a1c-7c4e-9d2b-000000000000", enc)
	}
	r.Commit()
	b.ReportAllocs()
	for b.Loop() {
		e, _ := r.Append(ctx, "0193a8f2-5a1c-7c4e-9d2b-000000000000", enc)
		r.Commit()
		if d, _ := r.Durable(); e.Seq-d >= 500 {
			b.StopTimer()
			deadline := time.NewTimer(time.Minute)
			for d+100 < e.Seq {
				select {
				case <-woken:
				case <-deadline.C:
					b.Fatalf("seq %d not durable after a minute", d+100)
				}
				d, _ = r.Durable()
			}
			deadline.Stop()
			b.StartTimer()
		}
	}
	b.StopTimer()
	if err := r.Close(); err != nil {
		b.Error(err)
	}
}

// BenchmarkOpenRing1000: what a server that does not hold a session reads
// to answer a resume replaying a full ring — the meta hash and 1,000
// events of ~300 bytes in one round trip, rebuilt into a ring — and the
// replay read from it. The orchestrator's own part of a resume (token
// check, system.connected, enqueueing the frames) is
// orchestrator.BenchmarkResumeFullRingServer.
func BenchmarkOpenRing1000(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	s, _ := newStore(b, onServer(srv), "owner", redisstore.Options{})
	id := "bench-open"
	if err := s.CreateSession(ctx, id, redisstore.SessionMeta{Capacity: 1000}); err != nil {
		b.Fatal(err)
	}
	r := s.NewRing(id, 1000, redisstore.Callbacks{})
	for i := range 1000 {
		if _, err := r.Append(ctx, fmt.Sprintf("id-%d", i), func(uint64) ([]byte, error) { return payload, nil }); err != nil {
			b.Fatal(err)
		}
		r.Commit()
	}
	flush(b, r)
	other, _ := newStore(b, onServer(srv), "other", redisstore.Options{})
	b.ReportAllocs()
	for b.Loop() {
		ring, _, err := other.OpenRing(ctx, id, redisstore.Callbacks{})
		if err != nil {
			b.Fatal(err)
		}
		if es, err := ring.Since(ctx, 0); err != nil || len(es) != 1000 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
		ring.Close()
	}
}
