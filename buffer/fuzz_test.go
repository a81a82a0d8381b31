package buffer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/baton-run/baton/buffer"
)

// ring is the one place the fuzz test calls buffer.Memory: a change of the
// Ring's signatures (a new argument, a new result) is absorbed here.
type ring struct{ m *buffer.Memory }

func (r ring) append(id string, encode func(seq uint64) ([]byte, error)) (buffer.Entry, error) {
	return r.m.Append(context.Background(), id, encode)
}
func (r ring) ack(seq uint64) error { return r.m.Ack(context.Background(), seq) }
func (r ring) since(seq uint64) ([]buffer.Entry, error) {
	return r.m.Since(context.Background(), seq)
}
func (r ring) checksum(seq uint64) (string, error) {
	return r.m.Checksum(context.Background(), seq)
}
func (r ring) last() (uint64, string, error) { return r.m.Last(context.Background()) }

// model is a trivially correct ring: every frame ever appended, the §3.4
// chain over all of them, and the highest ack.
type model struct {
	capacity int
	frames   [][]byte // frames[i] is seq i+1's
	sums     []string // sums[n] is c(n)
	acked    uint64
}

func (m *model) last() uint64 { return uint64(len(m.frames)) }

// base is the seq just before the oldest one held: what acks and eviction
// have dropped.
func (m *model) base() uint64 {
	b := m.acked
	if n := m.last(); n > uint64(m.capacity) {
		b = max(b, n-uint64(m.capacity))
	}
	return b
}

func (m *model) append(id string, data []byte) {
	m.frames = append(m.frames, data)
	m.sums = append(m.sums, buffer.NextChecksum(m.sums[len(m.sums)-1], id))
}

// FuzzMemory decodes the input as a ring's capacity and a sequence of
// operations — append, append many, a failing append, ack, since, checksum —
// runs them on buffer.Memory and on the model, and compares every answer:
// seqs, frames, checksums, ErrGap and ErrAhead, eviction at capacity.
func FuzzMemory(f *testing.F) {
	f.Add([]byte{3, 0, 'a', 0, 'b', 0, 'c', 0, 'd', 0, 'e', 5, 2, 6, 1, 6, 2, 7, 0, 7, 5})
	f.Add([]byte{0, 3, 40, 5, 30, 6, 29, 6, 30, 3, 5, 5, 0xFF, 6, 0xFF})
	f.Add([]byte{99, 3, 31, 3, 31, 3, 10, 5, 80, 4, 1, 3, 31, 7, 20})
	f.Add([]byte{1, 1, 'x', 4, 0, 1, 'x', 6, 0, 6, 1, 5, 1, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		capacity := int(data[0]) % 100 // 0: NewMemory's default
		r := ring{buffer.NewMemory(capacity)}
		if capacity == 0 {
			capacity = buffer.DefaultCapacity
		}
		if r.m.Cap() != capacity {
			t.Fatalf("Cap() = %d, want %d", r.m.Cap(), capacity)
		}
		m := &model{capacity: capacity, sums: []string{""}}
		next := func() byte { // the next input byte, 0 once they run out
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		data = data[1:]
		var log []string
		for len(data) > 0 {
			op := next() % 8
			switch op {
			case 0, 1, 2:
				id := fmt.Sprintf("ev-%d", next()%16) // ids may repeat: the chain must not care
				log = append(log, "append "+id)
				appendOne(t, r, m, id, log)
			case 3:
				n := 1 + int(next()%32)
				log = append(log, fmt.Sprintf("append %d", n))
				for i := range n {
					appendOne(t, r, m, fmt.Sprintf("bulk-%d-%d", m.last(), i), log)
				}
			case 4:
				log = append(log, "failing append")
				failingAppend(t, r, m, log)
			case 5:
				seq := seqArg(next(), m)
				log = append(log, fmt.Sprintf("ack %d", seq))
				err := r.ack(seq)
				if seq > m.last() {
					if !errors.Is(err, buffer.ErrAhead) {
						t.Fatalf("%v: Ack(%d) past the last seq %d: %v, want ErrAhead", log, seq, m.last(), err)
					}
				} else if err != nil {
					t.Fatalf("%v: Ack(%d): %v", log, seq, err)
				} else {
					m.acked = max(m.acked, seq)
				}
			case 6:
				seq := seqArg(next(), m)
				log = append(log, fmt.Sprintf("since %d", seq))
				checkSince(t, r, m, seq, log)
			case 7:
				seq := seqArg(next(), m)
				log = append(log, fmt.Sprintf("checksum %d", seq))
				checkChecksum(t, r, m, seq, log)
			}
			checkInvariants(t, r, m, log)
		}
	})
}

// seqArg turns a byte into a seq to ack or read from: mostly around what
// the ring holds, sometimes far past it.
func seqArg(b byte, m *model) uint64 {
	if b >= 0xF0 {
		return math.MaxUint64 - uint64(b&0xF)
	}
	return uint64(b) % (m.last() + 3)
}

func frameFor(seq uint64, id string) []byte { return fmt.Appendf(nil, `{"seq":%d,"id":%q}`, seq, id) }

func appendOne(t *testing.T, r ring, m *model, id string, log []string) {
	t.Helper()
	calls := 0
	e, err := r.append(id, func(seq uint64) ([]byte, error) {
		calls++
		if seq != m.last()+1 {
			t.Fatalf("%v: encode asked for seq %d, want %d", log, seq, m.last()+1)
		}
		return frameFor(seq, id), nil
	})
	want := frameFor(m.last()+1, id)
	if err != nil || calls != 1 || e.Seq != m.last()+1 || !bytes.Equal(e.Data, want) {
		t.Fatalf("%v: Append = %d %s, %v after %d encode calls; want seq %d", log, e.Seq, e.Data, err, calls, m.last()+1)
	}
	m.append(id, want)
}

// failingAppend: an encode error is returned as is and changes nothing.
func failingAppend(t *testing.T, r ring, m *model, log []string) {
	t.Helper()
	boom := errors.New("boom")
	e, err := r.append("never", func(uint64) ([]byte, error) { return nil, boom })
	if !errors.Is(err, boom) || e.Seq != 0 || e.Data != nil {
		t.Fatalf("%v: Append with a failing encode = %+v, %v", log, e, err)
	}
}

func checkSince(t *testing.T, r ring, m *model, seq uint64, log []string) {
	t.Helper()
	entries, err := r.since(seq)
	switch {
	case seq > m.last():
		if !errors.Is(err, buffer.ErrAhead) {
			t.Fatalf("%v: Since(%d) past the last seq %d: %v, want ErrAhead", log, seq, m.last(), err)
		}
	case seq < m.base():
		if !errors.Is(err, buffer.ErrGap) {
			t.Fatalf("%v: Since(%d) below the base %d: %v, want ErrGap", log, seq, m.base(), err)
		}
	default:
		if err != nil || uint64(len(entries)) != m.last()-seq {
			t.Fatalf("%v: Since(%d): %d entries, %v; want %d", log, seq, len(entries), err, m.last()-seq)
		}
		for i, e := range entries {
			want := seq + 1 + uint64(i)
			if e.Seq != want || !bytes.Equal(e.Data, m.frames[want-1]) {
				t.Fatalf("%v: Since(%d)[%d] = %d %s, want %d %s", log, seq, i, e.Seq, e.Data, want, m.frames[want-1])
			}
		}
	}
}

func checkChecksum(t *testing.T, r ring, m *model, seq uint64, log []string) {
	t.Helper()
	sum, err := r.checksum(seq)
	switch {
	case seq > m.last():
		if !errors.Is(err, buffer.ErrAhead) {
			t.Fatalf("%v: Checksum(%d) past the last seq %d: %v, want ErrAhead", log, seq, m.last(), err)
		}
	case seq < m.base():
		if !errors.Is(err, buffer.ErrGap) {
			t.Fatalf("%v: Checksum(%d) below the base %d: %v, want ErrGap", log, seq, m.base(), err)
		}
	default:
		if err != nil || sum != m.sums[seq] {
			t.Fatalf("%v: Checksum(%d) = %q, %v; want %q", log, seq, sum, err, m.sums[seq])
		}
	}
}

// checkInvariants compares what the ring holds with the model after every
// operation: the last seq and its checksum, every entry held, and the
// edges on either side.
func checkInvariants(t *testing.T, r ring, m *model, log []string) {
	t.Helper()
	last, sum, err := r.last()
	if err != nil || last != m.last() || sum != m.sums[last] {
		t.Fatalf("%v: Last() = %d %q, %v; want %d %q", log, last, sum, err, m.last(), m.sums[m.last()])
	}
	base := m.base()
	if m.last()-base > uint64(m.capacity) {
		t.Fatalf("%v: the model holds %d entries, more than the capacity %d", log, m.last()-base, m.capacity)
	}
	checkSince(t, r, m, base, log)
	checkChecksum(t, r, m, base, log)
	checkChecksum(t, r, m, m.last(), log)
	checkChecksum(t, r, m, m.last()+1, log)
	if base > 0 {
		checkSince(t, r, m, base-1, log)
		checkChecksum(t, r, m, base-1, log)
	}
}
