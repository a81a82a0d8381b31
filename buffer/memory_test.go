package buffer_test

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

// chain computes §3.4 independently of the package.
func chain(ids ...string) []string {
	sums := []string{""}
	for _, id := range ids {
		h := sha256.Sum256([]byte(sums[len(sums)-1] + id))
		sums = append(sums, hex.EncodeToString(h[:]))
	}
	return sums
}

func next(prev, id string) string {
	h := sha256.Sum256([]byte(prev + id))
	return hex.EncodeToString(h[:])
}

func frame(seq uint64) ([]byte, error) { return []byte(fmt.Sprintf(`{"seq":%d}`, seq)), nil }

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

func TestMemory(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		capacity int
		appends  int
		ack      uint64
		// oldest is the lowest seq whose checksum and replay are still known.
		oldest uint64
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
			r := buffer.NewMemory(tt.capacity)
			ids := appendN(t, r, tt.appends)
			sums := chain(ids...)
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

func TestAck(t *testing.T) {
	ctx := context.Background()
	r := buffer.NewMemory(10)
	appendN(t, r, 6)
	if err := r.Ack(ctx, 7); !errors.Is(err, buffer.ErrAhead) {
		t.Fatalf("ack past the end: %v", err)
	}
	if _, err := r.Since(ctx, 0); err != nil {
		t.Fatalf("a refused ack pruned: %v", err)
	}
	r.Ack(ctx, 4)
	r.Ack(ctx, 2) // smaller: no-op
	if _, err := r.Since(ctx, 3); !errors.Is(err, buffer.ErrGap) {
		t.Errorf("Since(3) after ack 4: %v", err)
	}
	if e, err := r.Since(ctx, 4); err != nil || len(e) != 2 {
		t.Errorf("Since(4) after ack 4: %d, %v", len(e), err)
	}
}

func TestAppendEncodeErrorChangesNothing(t *testing.T) {
	ctx := context.Background()
	r := buffer.NewMemory(4)
	appendN(t, r, 2)
	boom := errors.New("boom")
	if _, err := r.Append(ctx, "x", func(uint64) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Append: %v", err)
	}
	if seq, sum, _ := r.Last(ctx); seq != 2 || sum != chain("id-1", "id-2")[2] {
		t.Errorf("after a failed append: %d %s", seq, sum)
	}
}

// TestAgainstModel interleaves appends, acks and reads at random on rings of
// several capacities and compares every answer with a plain slice model.
func TestAgainstModel(t *testing.T) {
	ctx := context.Background()
	for _, capacity := range []int{1, 7, 8, 9, 1000} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 7))
			r := buffer.NewMemory(capacity)
			var ids []string
			sums := []string{""}
			oldest := uint64(0) // lowest seq with known checksum
			for step := range 5000 {
				last := uint64(len(ids))
				switch op := rng.IntN(10); {
				case op < 6:
					id := fmt.Sprintf("e%d", step)
					if _, err := r.Append(ctx, id, frame); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
					sums = append(sums, next(sums[len(sums)-1], id))
					if n := uint64(len(ids)); n-oldest > uint64(capacity) {
						oldest = n - uint64(capacity)
					}
				case op < 7 && last > 0:
					a := rng.Uint64N(last + 1)
					r.Ack(ctx, a)
					oldest = max(oldest, a)
				default:
					seq := rng.Uint64N(last + 2)
					entries, err := r.Since(ctx, seq)
					sum, cerr := r.Checksum(ctx, seq)
					switch {
					case seq > last:
						if !errors.Is(err, buffer.ErrAhead) {
							t.Fatalf("step %d: Since(%d) past %d: %v", step, seq, last, err)
						}
					case seq < oldest:
						if !errors.Is(err, buffer.ErrGap) || !errors.Is(cerr, buffer.ErrGap) {
							t.Fatalf("step %d: Since(%d) below %d: %v %v", step, seq, oldest, err, cerr)
						}
					default:
						if err != nil || uint64(len(entries)) != last-seq || cerr != nil || sum != sums[seq] {
							t.Fatalf("step %d: Since(%d) = %d entries, %v; checksum ok %v", step, seq, len(entries), err, sum == sums[seq])
						}
					}
				}
			}
		})
	}
}

// TestConcurrent: appends race with reads, acks and checksums under -race;
// every answer must be internally consistent.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	r := buffer.NewMemory(64)
	const n = 5000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			r.Append(ctx, fmt.Sprint(i), frame)
		}
	}()
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				last, _, _ := r.Last(ctx)
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
						r.Ack(ctx, last/2)
					}
				case 2:
					if _, err := r.Checksum(ctx, last); err != nil && !errors.Is(err, buffer.ErrGap) {
						t.Errorf("Checksum(last=%d): %v", last, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if last, _, _ := r.Last(ctx); last != n {
		t.Errorf("last %d, want %d", last, n)
	}
}

func TestNextChecksum(t *testing.T) {
	if got, want := buffer.NextChecksum(chain("a")[1], "b"), chain("a", "b")[2]; got != want {
		t.Errorf("NextChecksum = %s, want %s", got, want)
	}
}
