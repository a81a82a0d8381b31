package buffer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/baton-run/baton/buffer"
)

// copyOf rebuilds m the way a store would: from its oldest retained seq −
// 1, that seq's checksum, and every entry after it with its checksum.
func copyOf(t *testing.T, m *buffer.Memory) *buffer.Memory {
	t.Helper()
	ctx := context.Background()
	last, _, _ := m.Last(ctx)
	base := last
	for base > 0 {
		if _, err := m.Checksum(ctx, base-1); err != nil {
			break
		}
		base--
	}
	baseSum, _ := m.Checksum(ctx, base)
	entries, err := m.Since(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	chained := make([]buffer.Chained, len(entries))
	for i, e := range entries {
		sum, err := m.Checksum(ctx, e.Seq)
		if err != nil {
			t.Fatal(err)
		}
		chained[i] = buffer.Chained{Entry: e, Sum: sum}
	}
	r, err := buffer.RestoreMemory(m.Cap(), base, baseSum, chained)
	if err != nil {
		t.Fatalf("RestoreMemory: %v", err)
	}
	return r
}

// sameAnswers compares every Since, Checksum and Last answer of two rings.
func sameAnswers(t *testing.T, step int, want, got *buffer.Memory) {
	t.Helper()
	ctx := context.Background()
	wl, ws, _ := want.Last(ctx)
	gl, gs, _ := got.Last(ctx)
	if wl != gl || ws != gs {
		t.Fatalf("step %d: Last = %d %s, want %d %s", step, gl, gs, wl, ws)
	}
	for seq := uint64(0); seq <= wl+1; seq++ {
		we, werr := want.Since(ctx, seq)
		ge, gerr := got.Since(ctx, seq)
		wc, wcerr := want.Checksum(ctx, seq)
		gc, gcerr := got.Checksum(ctx, seq)
		if !errors.Is(gerr, werr) || !errors.Is(gcerr, wcerr) || wc != gc || fmt.Sprint(we) != fmt.Sprint(ge) {
			t.Fatalf("step %d, seq %d: Since %v %v / Checksum %q %v; want %v %v / %q %v",
				step, seq, ge, gerr, gc, gcerr, we, werr, wc, wcerr)
		}
	}
}

// TestRestoreMemory: a ring rebuilt from a copy of another answers the
// same, at every step of random appends and acks, and goes on the same.
func TestRestoreMemory(t *testing.T) {
	ctx := context.Background()
	for _, capacity := range []int{1, 3, 8, 20} {
		t.Run(fmt.Sprint(capacity), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(capacity), 1))
			m := buffer.NewMemory(capacity)
			for step := range 300 {
				if last, _, _ := m.Last(ctx); rng.IntN(4) == 0 && last > 0 {
					if err := m.Ack(ctx, rng.Uint64N(last+1)); err != nil {
						t.Fatal(err)
					}
				} else {
					m.Append(ctx, fmt.Sprint("e", step), func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil })
				}
				r := copyOf(t, m)
				sameAnswers(t, step, m, r)
				// Both go on alike: the copy extends the same chain.
				id := fmt.Sprint("next", step)
				enc := func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil }
				m2 := copyOf(t, m)
				m2.Append(ctx, id, enc)
				r.Append(ctx, id, enc)
				sameAnswers(t, step, m2, r)
			}
		})
	}
}

func TestRestoreMemoryRefuses(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	e := func(seq uint64, s string) buffer.Chained {
		return buffer.Chained{Entry: buffer.Entry{Seq: seq}, Sum: s}
	}
	tests := []struct {
		name     string
		capacity int
		base     uint64
		baseSum  string
		entries  []buffer.Chained
	}{
		{"more entries than capacity", 1, 0, "", []buffer.Chained{e(1, sum), e(2, sum)}},
		{"not after base", 4, 2, sum, []buffer.Chained{e(4, sum)}},
		{"not contiguous", 4, 0, "", []buffer.Chained{e(1, sum), e(3, sum)}},
		{"a sum at seq 0", 4, 0, sum, nil},
		{"no sum past seq 0", 4, 3, "", nil},
		{"a short sum", 4, 0, "", []buffer.Chained{e(1, "abcd")}},
		{"not hex", 4, 0, "", []buffer.Chained{e(1, strings.Repeat("zz", 32))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := buffer.RestoreMemory(tt.capacity, tt.base, tt.baseSum, tt.entries); err == nil {
				t.Errorf("RestoreMemory accepted it")
			}
		})
	}
}
