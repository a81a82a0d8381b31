package buffer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-run/baton/buffer"
)

// A session's ring: append events, prune what the client acked, and answer
// a resume with a replay or, when events are gone, a resync.
func Example() {
	ctx := context.Background()
	ring := buffer.NewMemory(3)
	for _, id := range []string{"ev-1", "ev-2", "ev-3", "ev-4"} {
		ring.Append(ctx, id, func(seq uint64) ([]byte, error) {
			return fmt.Appendf(nil, `{"seq":%d}`, seq), nil
		})
	}
	ring.Ack(ctx, 2) // the client has applied seq 1 and 2

	for _, lastSeq := range []uint64{2, 1} {
		entries, err := ring.Since(ctx, lastSeq)
		switch {
		case errors.Is(err, buffer.ErrGap):
			fmt.Printf("from %d: resync\n", lastSeq)
		case err == nil:
			fmt.Printf("from %d: replay %d events, first %s\n", lastSeq, len(entries), entries[0].Data)
		}
	}
	// Output:
	// from 2: replay 2 events, first {"seq":3}
	// from 1: resync
}
