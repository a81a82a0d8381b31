package buffer_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/baton-run/baton/buffer"
)

var payload = bytes.Repeat([]byte("x"), 300) // about one encoded event

// BenchmarkAppend: steady state of a full 1,000-entry ring (each append
// evicts), checksum included.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	r := buffer.NewMemory(1000)
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("0193a8f2-5a1c-7c4e-9d2b-%012d", i)
	}
	enc := func(uint64) ([]byte, error) { return payload, nil }
	for i := range 1000 {
		r.Append(ctx, ids[i%1024], enc)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Append(ctx, ids[i%1024], enc)
	}
}

// BenchmarkAck: ack one more event each time, on a ring kept full.
func BenchmarkAck(b *testing.B) {
	ctx := context.Background()
	r := buffer.NewMemory(1000)
	enc := func(uint64) ([]byte, error) { return payload, nil }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e, _ := r.Append(ctx, "id", enc)
		r.Ack(ctx, e.Seq)
	}
}

// BenchmarkSince1000: the read behind a full-ring replay.
func BenchmarkSince1000(b *testing.B) {
	ctx := context.Background()
	r := buffer.NewMemory(1000)
	enc := func(uint64) ([]byte, error) { return payload, nil }
	for range 1000 {
		r.Append(ctx, "id", enc)
	}
	b.ReportAllocs()
	for b.Loop() {
		if e, err := r.Since(ctx, 0); err != nil || len(e) != 1000 {
			b.Fatal(len(e), err)
		}
	}
}
