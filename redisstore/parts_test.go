package redisstore

import (
	"context"
	"fmt"
	"maps"
	"testing"
)

// TestCheckpointParts: a checkpoint given in parts is stored as a change
// of its parts — set, removed, or all replaced (reset) — and OpenRing
// reads back exactly the parts the ring last gave, as does the copy the
// ring keeps for a fence; a whole checkpoint (Checkpoint) replaces every
// part, and parts with reset replace it. Units committed one after the
// other before the writer takes them are merged in order.
func TestCheckpointParts(t *testing.T) {
	type change struct {
		parts map[string][]byte
		reset bool
		whole string // Checkpoint(whole) instead, when not ""
		flush bool   // wait for the writer after this unit
	}
	p := func(kv ...string) map[string][]byte {
		m := make(map[string][]byte)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<nil>" {
				m[kv[i]] = nil
			} else {
				m[kv[i]] = []byte(kv[i+1])
			}
		}
		return m
	}
	tests := []struct {
		name      string
		changes   []change
		wantParts map[string][]byte
		wantWhole string
	}{
		{"parts set", []change{{parts: p("head", "h1", "t/0", "a"), reset: true, flush: true}},
			p("head", "h1", "t/0", "a"), ""},
		{"one changed, one removed, one kept", []change{
			{parts: p("head", "h1", "t/0", "a", "t/1", "b"), reset: true, flush: true},
			{parts: p("head", "h2", "t/1", "<nil>"), flush: true},
		}, p("head", "h2", "t/0", "a"), ""},
		{"merged before the writer", []change{
			{parts: p("head", "h1", "t/0", "a", "t/1", "b"), reset: true},
			{parts: p("t/1", "<nil>", "t/2", "c")},
			{parts: p("t/2", "<nil>", "head", "h3")},
		}, p("head", "h3", "t/0", "a"), ""},
		{"reset replaces every part", []change{
			{parts: p("head", "h1", "t/0", "a", "t/1", "b"), reset: true, flush: true},
			{parts: p("head", "h2"), reset: true, flush: true},
		}, p("head", "h2"), ""},
		{"reset after a delta in one unit", []change{
			{parts: p("head", "h1", "t/0", "a"), reset: true, flush: true},
			{parts: p("t/1", "b")},
			{parts: p("head", "h2"), reset: true},
		}, p("head", "h2"), ""},
		{"a whole checkpoint replaces the parts", []change{
			{parts: p("head", "h1", "t/0", "a"), reset: true, flush: true},
			{whole: "state", flush: true},
		}, nil, "state"},
		{"parts replace a whole checkpoint", []change{
			{whole: "state", flush: true},
			{parts: p("head", "h1"), reset: true, flush: true},
		}, p("head", "h1"), ""},
	}
	ctx := context.Background()
	s, _ := scriptStore(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprint("parts-", i)
			if err := s.CreateSession(ctx, id, SessionMeta{Capacity: 16}); err != nil {
				t.Fatal(err)
			}
			r := s.NewRing(id, 16, Callbacks{})
			defer r.Close()
			for k, ch := range tt.changes {
				r.Append(ctx, fmt.Sprint("e", k), func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil })
				if ch.whole != "" {
					r.Checkpoint([]byte(ch.whole))
				} else {
					r.CheckpointParts(ch.parts, ch.reset)
				}
				r.Commit()
				if ch.flush {
					if err := r.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			o, loaded, err := s.OpenRing(ctx, id, Callbacks{})
			if err != nil {
				t.Fatal(err)
			}
			o.Close()
			if !maps.EqualFunc(loaded.CheckpointParts, tt.wantParts, bytesEqual) {
				t.Errorf("stored parts %q, want %q", loaded.CheckpointParts, tt.wantParts)
			}
			if string(loaded.Checkpoint) != tt.wantWhole || (tt.wantWhole == "") != (loaded.Checkpoint == nil) {
				t.Errorf("stored whole checkpoint %q, want %q", loaded.Checkpoint, tt.wantWhole)
			}
			if loaded.CheckpointSeq != uint64(len(tt.changes)) {
				t.Errorf("checkpoint seq %d, want %d", loaded.CheckpointSeq, len(tt.changes))
			}
			// What the ring would write again after a loss (fence).
			want := maps.Clone(tt.wantParts)
			if tt.wantWhole != "" {
				want = map[string][]byte{"": []byte(tt.wantWhole)}
			}
			r.mu.Lock()
			dur := maps.Clone(r.durParts)
			r.mu.Unlock()
			if !maps.EqualFunc(dur, want, bytesEqual) {
				t.Errorf("the ring's durable parts %q, want %q", dur, want)
			}
		})
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
