// Package buffertest holds what tests need of buffer.Ring: the contract
// suite every implementation must pass (TestRing), and a Ring that breaks
// replays on purpose (Faulty), the test double of a broken server that
// proves a checker catches one.
package buffertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/baton-run/baton/buffer"
)

// TestRing runs the contract of buffer.Ring against rings made by newRing,
// which gets a capacity ≥ 1 and returns an empty ring. Call it from each
// implementation's tests:
//
//	func TestMemoryContract(t *testing.T) {
//		buffertest.TestRing(t, func(n int) buffer.Ring { return buffer.NewMemory(n) })
//	}
func TestRing(t *testing.T, newRing func(capacity int) buffer.Ring) {
	t.Run("seqs", func(t *testing.T) { testSeqs(t, newRing) })
	t.Run("retention", func(t *testing.T) { testRetention(t, newRing) })
	t.Run("ack", func(t *testing.T) { testAck(t, newRing) })
	t.Run("encode error", func(t *testing.T) { testEncodeError(t, newRing) })
	t.Run("done context", func(t *testing.T) { testDoneContext(t, newRing) })
	t.Run("against a model", func(t *testing.T) { testAgainstModel(t, newRing) })
	t.Run("concurrent", func(t *testing.T) { testConcurrent(t, newRing) })
	if _, ok := newRing(1).(buffer.Sizer); ok {
		t.Run("len", func(t *testing.T) { testLen(t, newRing) })
	}
}

// testLen: a Sizer's Len is what it holds: appends add to it up to the
// capacity, acks take from it.
func testLen(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	r := newRing(4)
	steps := []struct {
		name string
		do   func()
		want int
	}{
		{"empty", func() {}, 0},
		{"three appended", func() { appendN(t, r, 3) }, 3},
		{"two acked", func() { r.Ack(ctx, 2) }, 1},
		{"full after evictions", func() {
			for range 6 {
				r.Append(ctx, "more", frame)
			}
		}, 4},
		{"all acked", func() { r.Ack(ctx, 9) }, 0},
	}
	for _, st := range steps {
		st.do()
		if got := r.(buffer.Sizer).Len(); got != st.want {
			t.Fatalf("%s: Len = %d, want %d", st.name, got, st.want)
		}
	}
}

// chain computes §3.4 independently of the package: sums[n] = c(n).
func chain(ids ...string) []string {
	sums := []string{""}
	for _, id := range ids {
		h := sha256.Sum256([]byte(sums[len(sums)-1] + id))
		sums = append(sums, hex.EncodeToString(h[:]))
	}
	return sums
}

func frame(seq uint64) ([]byte, error) { return fmt.Appendf(nil, `{"seq":%d}`, seq), nil }

// appendN appends n events with ids id-1 … id-n and returns the ids.
func appendN(t testing.TB, r buffer.Ring, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i+1)
		e, err := r.Append(context.Background(), ids[i], frame)
		if err != nil || e.Seq != uint64(i+1) {
			t.Fatalf("append %d: seq %d, %v", i+1, e.Seq, err)
		}
	}
	return ids
}

// testSeqs: seqs start at 1 and follow each other; encode is called once
// with the seq it is for, and the entry holds what it returned.
func testSeqs(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	r := newRing(4)
	if r.Cap() != 4 {
		t.Errorf("Cap = %d, want 4", r.Cap())
	}
	if seq, sum, err := r.Last(ctx); seq != 0 || sum != "" || err != nil {
		t.Errorf("empty ring: Last = %d %q %v, want 0 \"\"", seq, sum, err)
	}
	var ids []string
	for want := uint64(1); want <= 6; want++ {
		var calls []uint64
		id := fmt.Sprintf("ev-%d", want)
		e, err := r.Append(ctx, id, func(seq uint64) ([]byte, error) {
			calls = append(calls, seq)
			return frame(seq)
		})
		ids = append(ids, id)
		data, _ := frame(want)
		if err != nil || e.Seq != want || string(e.Data) != string(data) || len(calls) != 1 || calls[0] != want {
			t.Fatalf("append %d: entry %d %s, %v; encode called with %v", want, e.Seq, e.Data, err, calls)
		}
		if seq, sum, err := r.Last(ctx); seq != want || sum != chain(ids...)[want] || err != nil {
			t.Fatalf("after append %d: Last = %d %q %v", want, seq, sum, err)
		}
	}
}

// testRetention: after appends (evicting past the capacity) and an ack,
// exactly the seqs from the oldest retained one on are replayable and have
// their checksum; below is ErrGap, above ErrAhead.
func testRetention(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	tests := []struct {
		name     string
		capacity int
		appends  int
		ack      uint64
		oldest   uint64 // the lowest seq whose checksum and replay are still known
	}{
		{"empty", 4, 0, 0, 0},
		{"under capacity", 4, 3, 0, 0},
		{"exactly full", 4, 4, 0, 0},
		{"one evicted", 4, 5, 0, 1},
		{"many evicted", 4, 11, 0, 7},
		{"acked", 8, 6, 4, 4},
		{"acked and evicted", 4, 9, 7, 7},
		{"everything acked", 4, 4, 4, 4},
		{"capacity 1", 1, 3, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRing(tt.capacity)
			sums := chain(appendN(t, r, tt.appends)...)
			if err := r.Ack(ctx, tt.ack); err != nil {
				t.Fatal(err)
			}
			last := uint64(tt.appends)
			if seq, sum, _ := r.Last(ctx); seq != last || sum != sums[last] {
				t.Errorf("Last = %d %q, want %d %q", seq, sum, last, sums[last])
			}
			for seq := uint64(0); seq <= last+1; seq++ {
				sum, cerr := r.Checksum(ctx, seq)
				entries, serr := r.Since(ctx, seq)
				switch {
				case seq > last:
					if !errors.Is(cerr, buffer.ErrAhead) || !errors.Is(serr, buffer.ErrAhead) {
						t.Errorf("seq %d past the end: %v, %v", seq, cerr, serr)
					}
				case seq < tt.oldest:
					if !errors.Is(cerr, buffer.ErrGap) || !errors.Is(serr, buffer.ErrGap) {
						t.Errorf("seq %d below the oldest: %v, %v", seq, cerr, serr)
					}
				default:
					if cerr != nil || sum != sums[seq] {
						t.Errorf("Checksum(%d) = %q, %v; want %q", seq, sum, cerr, sums[seq])
					}
					if serr != nil || uint64(len(entries)) != last-seq {
						t.Fatalf("Since(%d): %d entries, %v", seq, len(entries), serr)
					}
					for i, e := range entries {
						want, _ := frame(seq + 1 + uint64(i))
						if e.Seq != seq+1+uint64(i) || string(e.Data) != string(want) {
							t.Errorf("Since(%d)[%d] = %d %s", seq, i, e.Seq, e.Data)
						}
					}
				}
			}
		})
	}
}

// testAck: an ack past the end is refused and prunes nothing; a smaller
// ack than an earlier one changes nothing.
func testAck(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	r := newRing(10)
	appendN(t, r, 6)
	if err := r.Ack(ctx, 7); !errors.Is(err, buffer.ErrAhead) {
		t.Fatalf("ack past the end: %v, want ErrAhead", err)
	}
	if e, err := r.Since(ctx, 0); err != nil || len(e) != 6 {
		t.Fatalf("a refused ack pruned: %d entries, %v", len(e), err)
	}
	for _, ack := range []uint64{4, 2} { // the second is smaller: a no-op
		if err := r.Ack(ctx, ack); err != nil {
			t.Fatalf("Ack(%d): %v", ack, err)
		}
	}
	if _, err := r.Since(ctx, 3); !errors.Is(err, buffer.ErrGap) {
		t.Errorf("Since(3) after ack 4: %v, want ErrGap", err)
	}
	if e, err := r.Since(ctx, 4); err != nil || len(e) != 2 || e[0].Seq != 5 {
		t.Errorf("Since(4) after ack 4: %v, %v", e, err)
	}
	if err := r.Ack(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if e, err := r.Since(ctx, 6); err != nil || len(e) != 0 {
		t.Errorf("Since(latest) after acking everything: %v, %v; want none", e, err)
	}
	if e, err := r.Append(ctx, "id-7", frame); err != nil || e.Seq != 7 {
		t.Errorf("append after acking everything: seq %d, %v; want 7", e.Seq, err)
	}
}

// testEncodeError: a failed encode stores nothing and uses no seq.
func testEncodeError(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	r := newRing(4)
	ids := appendN(t, r, 2)
	boom := errors.New("boom")
	if _, err := r.Append(ctx, "x", func(uint64) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Append: %v, want the encode error", err)
	}
	if seq, sum, _ := r.Last(ctx); seq != 2 || sum != chain(ids...)[2] {
		t.Errorf("after a failed append: Last = %d %s", seq, sum)
	}
	if e, err := r.Append(ctx, "id-3", frame); err != nil || e.Seq != 3 {
		t.Errorf("the append after a failed one: seq %d, %v; want 3", e.Seq, err)
	}
}

// testDoneContext: a call whose ctx is done changes nothing and says why.
func testDoneContext(t *testing.T, newRing func(int) buffer.Ring) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func(r buffer.Ring) error
	}{
		{"Append", func(r buffer.Ring) error {
			_, err := r.Append(done, "late", func(uint64) ([]byte, error) {
				t.Error("encode was called with a done context")
				return nil, nil
			})
			return err
		}},
		{"Ack", func(r buffer.Ring) error { return r.Ack(done, 2) }},
		{"Since", func(r buffer.Ring) error { _, err := r.Since(done, 1); return err }},
		{"Checksum", func(r buffer.Ring) error { _, err := r.Checksum(done, 1); return err }},
		{"Last", func(r buffer.Ring) error { _, _, err := r.Last(done); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRing(4)
			sums := chain(appendN(t, r, 3)...)
			if err := tt.call(r); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a done context: %v, want context.Canceled", tt.name, err)
			}
			if seq, sum, err := r.Last(ctx); seq != 3 || sum != sums[3] || err != nil {
				t.Errorf("after %s: Last = %d %q %v, want 3 and c(3)", tt.name, seq, sum, err)
			}
			if e, err := r.Since(ctx, 0); err != nil || len(e) != 3 {
				t.Errorf("after %s: Since(0) = %d entries, %v; want all 3", tt.name, len(e), err)
			}
		})
	}
}

// testAgainstModel interleaves appends, acks and reads at random on rings
// of several capacities and compares every answer with a plain model.
func testAgainstModel(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	for _, capacity := range []int{1, 7, 8, 9, 1000} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 7))
			r := newRing(capacity)
			var ids []string
			sums := []string{""}
			oldest := uint64(0) // lowest seq with a known checksum
			for step := range 3000 {
				last := uint64(len(ids))
				switch op := rng.IntN(10); {
				case op < 6:
					id := fmt.Sprintf("e%d", step)
					if _, err := r.Append(ctx, id, frame); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
					sums = append(sums, buffer.NextChecksum(sums[len(sums)-1], id))
					if n := uint64(len(ids)); n-oldest > uint64(capacity) {
						oldest = n - uint64(capacity)
					}
				case op < 7 && last > 0:
					a := rng.Uint64N(last + 1)
					if err := r.Ack(ctx, a); err != nil {
						t.Fatalf("step %d: Ack(%d) of %d: %v", step, a, last, err)
					}
					oldest = max(oldest, a)
				default:
					seq := rng.Uint64N(last + 2)
					entries, err := r.Since(ctx, seq)
					sum, cerr := r.Checksum(ctx, seq)
					switch {
					case seq > last:
						if !errors.Is(err, buffer.ErrAhead) || !errors.Is(cerr, buffer.ErrAhead) {
							t.Fatalf("step %d: Since(%d) past %d: %v %v", step, seq, last, err, cerr)
						}
					case seq < oldest:
						if !errors.Is(err, buffer.ErrGap) || !errors.Is(cerr, buffer.ErrGap) {
							t.Fatalf("step %d: Since(%d) below %d: %v %v", step, seq, oldest, err, cerr)
						}
					default:
						if err != nil || uint64(len(entries)) != last-seq || cerr != nil || sum != sums[seq] {
							t.Fatalf("step %d: Since(%d) = %d entries, %v; checksum ok %v, %v",
								step, seq, len(entries), err, sum == sums[seq], cerr)
						}
					}
				}
			}
		})
	}
}

// testConcurrent: appends from several goroutines race with reads, acks
// and checksums (run it under -race). Seqs stay contiguous, every answer
// is consistent, and the chain follows seq order.
func testConcurrent(t *testing.T, newRing func(int) buffer.Ring) {
	ctx := context.Background()
	const writers, each = 2, 1000
	r := newRing(writers * each) // keeps everything: the chain is checked at the end
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := r.Append(ctx, id, func(uint64) ([]byte, error) { return []byte(id), nil }); err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		})
	}
	for g := range 3 {
		wg.Go(func() {
			for i := range writers * each {
				last, _, err := r.Last(ctx)
				if err != nil {
					t.Errorf("Last: %v", err)
					return
				}
				switch g {
				case 0:
					if entries, err := r.Since(ctx, last/2); err == nil {
						for k, e := range entries {
							if e.Seq != last/2+1+uint64(k) {
								t.Errorf("Since(%d) entry %d has seq %d", last/2, k, e.Seq)
								return
							}
						}
					}
				case 1:
					if i%10 == 0 {
						if err := r.Ack(ctx, last/4); err != nil {
							t.Errorf("Ack(%d) with latest ≥ %d: %v", last/4, last, err)
							return
						}
					}
				case 2:
					if _, err := r.Checksum(ctx, last); err != nil && !errors.Is(err, buffer.ErrGap) {
						t.Errorf("Checksum(last=%d): %v", last, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	last, sum, err := r.Last(ctx)
	if err != nil || last != writers*each {
		t.Fatalf("Last = %d, %v; want %d", last, err, writers*each)
	}
	// The chain must follow seq order: recompute it from what is still
	// held, starting at the checksum of the oldest retained seq − 1.
	entries, err := r.Since(ctx, last-uint64(r.Cap())/2)
	if err != nil {
		t.Fatalf("Since: %v", err)
	}
	c, err := r.Checksum(ctx, entries[0].Seq-1)
	if err != nil {
		t.Fatalf("Checksum: %v", err)
	}
	for _, e := range entries {
		c = buffer.NextChecksum(c, string(e.Data))
	}
	if c != sum {
		t.Errorf("the chain does not follow seq order: recomputed %s, Last says %s", c, sum)
	}
}
