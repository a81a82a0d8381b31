package buffer

import (
	"context"
	"fmt"
	"sync"
)

var _ Ring = (*Memory)(nil)

// DefaultCapacity is the ring size of the contract (§3.3).
const DefaultCapacity = 1000

// Memory is an in-process Ring. Its storage grows with use up to the
// capacity, so an idle session costs a few dozen bytes, not a full ring.
// Every method is a few hundred nanoseconds of work under its own mutex
// (docs/performance.md), which is what the session lock it is called under
// can afford. All methods may be called concurrently.
type Memory struct {
	capacity int

	mu      sync.Mutex // guards the fields below
	entries []memEntry // circular, len(entries) ≤ capacity
	head    int        // index of the oldest entry
	n       int        // entries held
	base    uint64     // seq just before the oldest entry held (= last when empty)
	baseSum Checksum   // c(base)
	last    uint64
	lastSum Checksum
}

type memEntry struct {
	Entry
	sum Checksum
}

// NewMemory returns an empty ring of the given capacity; capacity ≤ 0 means
// DefaultCapacity.
func NewMemory(capacity int) *Memory {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	return &Memory{capacity: capacity}
}

// Cap implements Ring.
func (m *Memory) Cap() int { return m.capacity }

var _ Sizer = (*Memory)(nil)

// Len implements Sizer.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// Append implements Ring. encode is called with the ring locked, which is
// what keeps seq order equal to storage order; it must not call back into m.
func (m *Memory) Append(ctx context.Context, id string, encode func(seq uint64) ([]byte, error)) (Entry, error) {
	if err := live(ctx); err != nil {
		return Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seq := m.last + 1
	data, err := encode(seq)
	if err != nil {
		return Entry{}, err
	}
	e := memEntry{Entry: Entry{Seq: seq, Data: data}, sum: m.lastSum.Next(id)}
	if m.n == m.capacity {
		m.popLocked()
	}
	if m.n == len(m.entries) {
		m.growLocked()
	}
	m.entries[(m.head+m.n)%len(m.entries)] = e
	m.n++
	m.last, m.lastSum = seq, e.sum
	return e.Entry, nil
}

// Ack implements Ring.
func (m *Memory) Ack(ctx context.Context, lastSeq uint64) error {
	if err := live(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if lastSeq > m.last {
		return ErrAhead
	}
	for m.n > 0 && m.entries[m.head].Seq <= lastSeq {
		m.popLocked()
	}
	if m.n == 0 && len(m.entries) > 64 {
		// Give back a large backing array once a burst is fully acked.
		m.entries, m.head = nil, 0
	}
	return nil
}

// Since implements Ring.
func (m *Memory) Since(ctx context.Context, lastSeq uint64) ([]Entry, error) {
	if err := live(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case lastSeq > m.last:
		return nil, ErrAhead
	case lastSeq < m.base:
		return nil, ErrGap
	}
	skip := int(lastSeq - m.base)
	out := make([]Entry, m.n-skip)
	for i := range out {
		out[i] = m.entries[(m.head+skip+i)%len(m.entries)].Entry
	}
	return out, nil
}

// Checksum implements Ring.
func (m *Memory) Checksum(ctx context.Context, seq uint64) (string, error) {
	if err := live(ctx); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case seq > m.last:
		return "", ErrAhead
	case seq < m.base:
		return "", ErrGap
	case seq == m.base:
		return m.baseSum.String(), nil
	}
	return m.entries[(m.head+int(seq-m.base)-1)%len(m.entries)].sum.String(), nil
}

// Last implements Ring.
func (m *Memory) Last(ctx context.Context) (uint64, string, error) {
	if err := live(ctx); err != nil {
		return 0, "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.lastSum.String(), nil
}

// live returns the error of a call made with a done context.
func live(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("buffer: %w", err)
	}
	return nil
}

// popLocked drops the oldest entry, moving the chain's base past it.
func (m *Memory) popLocked() {
	e := &m.entries[m.head]
	m.base, m.baseSum = e.Seq, e.sum
	*e = memEntry{}
	m.head = (m.head + 1) % len(m.entries)
	m.n--
}

// growLocked doubles the backing array (at least 8, at most capacity),
// unwrapping it so the oldest entry is at index 0.
func (m *Memory) growLocked() {
	size := max(8, 2*len(m.entries))
	size = min(size, m.capacity)
	grown := make([]memEntry, size)
	for i := 0; i < m.n; i++ {
		grown[i] = m.entries[(m.head+i)%len(m.entries)]
	}
	m.entries, m.head = grown, 0
}
