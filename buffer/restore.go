package buffer

import (
	"fmt"
)

// Chained is an entry with its checksum c(Seq), hex as NextChecksum gives
// it: what a store keeps of each entry so that a ring can be rebuilt from it.
type Chained struct {
	Entry
	Sum string
}

// RestoreMemory rebuilds a ring that another server filled, from what a
// store kept of it: base is the seq just before the oldest entry held and
// baseSum its checksum c(base) ("" when base is 0); entries follow base
// with contiguous seqs, each with its checksum. The ring answers Since,
// Checksum and Last exactly as the one it was copied from did for
// everything retained, and appends after the last entry (or after base
// when there is none). It keeps entries' Data without copying.
//
// It fails when entries are not contiguous from base+1, are more than
// capacity (≤ 0 means DefaultCapacity), or a checksum is not one.
func RestoreMemory(capacity int, base uint64, baseSum string, entries []Chained) (*Memory, error) {
	m := NewMemory(capacity)
	if len(entries) > m.capacity {
		return nil, fmt.Errorf("buffer: restore %d entries into a ring of %d", len(entries), m.capacity)
	}
	bs, err := parseSum(base, baseSum)
	if err != nil {
		return nil, fmt.Errorf("buffer: restore base: %w", err)
	}
	m.base, m.baseSum = base, bs
	m.last, m.lastSum = base, bs
	if len(entries) == 0 {
		return m, nil
	}
	m.entries = make([]memEntry, min(max(8, len(entries)), m.capacity))
	for i, e := range entries {
		if want := base + 1 + uint64(i); e.Seq != want {
			return nil, fmt.Errorf("buffer: restore: entry %d has seq %d, want %d", i, e.Seq, want)
		}
		s, err := parseSum(e.Seq, e.Sum)
		if err != nil {
			return nil, fmt.Errorf("buffer: restore seq %d: %w", e.Seq, err)
		}
		m.entries[i] = memEntry{Entry: e.Entry, sum: s}
	}
	m.n = len(entries)
	last := m.entries[m.n-1]
	m.last, m.lastSum = last.Seq, last.sum
	return m, nil
}

// parseSum reads c(seq) back: "" for seq 0, 64 hex digits for any other.
func parseSum(seq uint64, s string) (Checksum, error) {
	if seq == 0 {
		if s != "" {
			return Checksum{}, fmt.Errorf("c(0) is %q, want \"\"", s)
		}
		return Checksum{}, nil
	}
	if s == "" {
		return Checksum{}, fmt.Errorf("c(%d) is empty", seq)
	}
	return ParseChecksum(s)
}
