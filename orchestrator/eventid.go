package orchestrator

import (
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"
)

// newEventID returns a new event id: a UUIDv7 (RFC 9562) of time now,
// laid out as github.com/google/uuid's NewV7 lays it out — 48 bits of Unix
// milliseconds, 12 bits of the millisecond's fraction that keep ids
// increasing within the process (RFC 9562 §6.2, method 3), 62 random bits.
// It is made here because uuid.NewV7 reads its random bits through an
// io.Reader, which puts them on the heap: an allocation per event besides
// the id's string, the only one this costs.
func newEventID(now time.Time) string {
	return eventClock.id(now)
}

// eventClock is the process's: its ids sort in the order they were made.
var eventClock idClock

// idClock makes UUIDv7s that sort in the order it made them. The zero
// value is ready; it may be used concurrently.
type idClock struct {
	// last is the latest id's time: milliseconds << 12 | fraction.
	last atomic.Int64
}

func (c *idClock) id(now time.Time) string {
	var u [16]byte
	rand.Read(u[8:]) // never fails (crypto/rand since Go 1.24)
	v7 := c.tick(now)
	ms := v7 >> 12
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(v7>>8)&0x0f // version 7
	u[7] = byte(v7)
	u[8] = u[8]&0x3f | 0x80 // variant 10

	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}

// tick returns now as milliseconds << 12 | the millisecond's fraction
// in 4096ths (as uuid's getV7Time: nanoseconds >> 8), or one more than
// the latest it returned, whichever is greater, so that ids sort in the
// order they were made even when the clock stands still or steps back.
func (c *idClock) tick(now time.Time) int64 {
	nano := now.UnixNano()
	ms := nano / int64(time.Millisecond)
	t := ms<<12 | (nano-ms*int64(time.Millisecond))>>8
	for {
		last := c.last.Load()
		next := max(t, last+1)
		if c.last.CompareAndSwap(last, next) {
			return next
		}
	}
}
