package buffer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrGap means some events after the requested seq are no longer held
// (evicted or pruned by an ack): the caller must resync instead of replay.
var ErrGap = errors.New("buffer: events after last_seq are gone")

// ErrAhead means the requested seq is beyond the latest one appended.
var ErrAhead = errors.New("buffer: last_seq is ahead of the latest seq")

// Entry is one buffered event: its seq and its encoded frame. Data is never
// modified after Append, so callers may share it.
type Entry struct {
	Seq  uint64
	Data []byte
}

// Ring is a session's replay buffer. Implementations are safe for
// concurrent use. Seqs start at 1 and are contiguous. Every method but Cap
// is called with the session's lock held: it answers from memory and never
// waits on I/O, and once ctx is done it changes nothing and returns an error
// wrapping ctx.Err() (see the package doc).
type Ring interface {
	// Append assigns the next seq, has encode produce the frame for it, and
	// stores it, evicting the oldest entry when the ring is full. id is the
	// event's unique id, which extends the checksum chain. encode is called
	// once, and may not call back into the ring; when it fails, nothing is
	// stored and the seq is not used.
	Append(ctx context.Context, id string, encode func(seq uint64) ([]byte, error)) (Entry, error)
	// Ack drops every entry with seq ≤ lastSeq; an ack at or below an
	// earlier one changes nothing. ErrAhead if lastSeq is past the latest
	// seq, in which case nothing is dropped.
	Ack(ctx context.Context, lastSeq uint64) error
	// Since returns the entries with seq > lastSeq in order, ErrGap if any
	// of them is gone, or ErrAhead.
	Since(ctx context.Context, lastSeq uint64) ([]Entry, error)
	// Checksum returns c(seq) for seq from (oldest retained − 1) to the
	// latest, ErrGap below that, ErrAhead above.
	Checksum(ctx context.Context, seq uint64) (string, error)
	// Last returns the latest seq (0 before any append) and its checksum.
	Last(ctx context.Context) (seq uint64, checksum string, err error)
	// Cap returns the ring's capacity in entries.
	Cap() int
}

// Sizer is a Ring that can tell how many entries it holds: the events
// not yet acked nor evicted. Len may be called without the session's lock
// (metrics sample it while the pipeline appends).
type Sizer interface {
	Len() int
}

// NextChecksum extends the chain of §3.4: c(n) = hex(SHA-256(c(n−1) + id(n))),
// with c(0) = "". Clients use it to compute the checksum they resume with.
func NextChecksum(prev, eventID string) string {
	sum := sha256.Sum256([]byte(prev + eventID))
	return hex.EncodeToString(sum[:])
}

// Checksum is a link c(n) of the chain of §3.4 in binary: folding an event
// into it allocates nothing for ids of ordinary length, where NextChecksum
// makes strings. The zero value is c(0) = "".
type Checksum struct {
	b   [sha256.Size]byte
	set bool
}

// String is the checksum as the contract writes it: "" for c(0), else 64
// lower-case hex digits.
func (s Checksum) String() string {
	if !s.set {
		return ""
	}
	return hex.EncodeToString(s.b[:])
}

// Next is the following link of the chain: c(n+1) for the event id.
func (s Checksum) Next(id string) Checksum {
	var buf [2*sha256.Size + 64]byte
	in := buf[:0]
	if s.set {
		in = buf[:2*sha256.Size]
		hex.Encode(in, s.b[:])
	}
	in = append(in, id...)
	return Checksum{b: sha256.Sum256(in), set: true}
}

// ParseChecksum reads a checksum in the contract's form: "" or 64
// lower-case hex digits. Anything else is an error.
func ParseChecksum(s string) (Checksum, error) {
	var out Checksum
	if s == "" {
		return out, nil
	}
	if len(s) != hex.EncodedLen(len(out.b)) {
		return Checksum{}, fmt.Errorf("checksum %q is not %d hex digits", s, hex.EncodedLen(len(out.b)))
	}
	if _, err := hex.Decode(out.b[:], []byte(s)); err != nil {
		return Checksum{}, fmt.Errorf("checksum %q: %w", s, err)
	}
	out.set = true
	if out.String() != s {
		return Checksum{}, fmt.Errorf("checksum %q is not in lower case", s)
	}
	return out, nil
}
