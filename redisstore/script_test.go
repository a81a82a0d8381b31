package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
)

// TestAppendScript: the append script's answers to a write sent twice
// (its reply lost), and to writes that do not follow what Redis holds.
func TestAppendScript(t *testing.T) {
	ctx := context.Background()
	s, c := scriptStore(t)

	// makeJob returns the write of n events after the first `after` of a
	// ring's chain (ids prefix-1, prefix-2, …), never committed: the test
	// sends it itself.
	makeJob := func(id, prefix string, after, n int) job {
		r := s.NewRing(id, 4, Callbacks{})
		for i := range after + n {
			r.Append(ctx, fmt.Sprint(prefix, i+1), func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil })
		}
		from := uint64(after)
		fromSum, err := r.Checksum(ctx, from)
		if err != nil {
			t.Fatalf("c(%d) of a ring of 4 holding %d: %v", from, after+n, err)
		}
		all := r.open.events
		r.flight = unit{events: all[len(all)-n:]}
		return job{r: r, from: from, fromSum: fromSum}
	}
	send := func(j job) (int64, error) {
		n, err := appendScript.Run(ctx, c, j.r.keys[:], j.args()...).Int64()
		return n, scriptError(err)
	}

	id := "s"
	if err := s.CreateSession(ctx, id, SessionMeta{Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	if n, err := send(makeJob(id, "e", 0, 3)); n != 3 || err != nil {
		t.Fatalf("first write: %d, %v", n, err)
	}
	tests := []struct {
		name    string
		job     job
		want    int64
		wantErr error
	}{
		{"the same write again", makeJob(id, "e", 0, 3), 3, nil},
		{"a retry that overlaps", makeJob(id, "e", 2, 3), 5, nil},
		{"the next write", makeJob(id, "e", 5, 2), 7, nil},
		{"a write from behind", makeJob(id, "e", 0, 2), 0, ErrConflict},
		{"a write from ahead: the store lost writes", makeJob(id, "e", 8, 1), 0, errBehind},
		{"another chain at the same seq", makeJob(id, "x", 7, 1), 0, ErrConflict},
		{"another chain overlapping", makeJob(id, "x", 6, 2), 0, ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := send(tt.job)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && (err != nil || n != tt.want)) {
				t.Errorf("got %d, %v; want %d, %v", n, err, tt.want, tt.wantErr)
			}
		})
	}
	// Seven events in a ring of four: 4…7 held, after base 3, in an entry
	// per write: 1…3 (trimmed), then the retry's 4 and 5, then 6 and 7.
	msgs, err := c.XRange(ctx, "baton:{s}:events", "-", "+").Result()
	if err != nil || len(msgs) != 2 || msgs[0].ID != "5-0" || msgs[1].ID != "7-0" {
		t.Errorf("the stream holds %v, %v; want the entries 5-0 and 7-0", msgs, err)
	}
	held, err := parseEntries(msgs, 0)
	if err != nil || len(held) != 4 || held[0].Seq != 4 || held[3].Seq != 7 {
		t.Errorf("the stream's events %v, %v; want 4…7", held, err)
	}
	if base, _ := c.HGet(ctx, "baton:{s}:meta", "base_seq").Result(); base != "3" {
		t.Errorf("base_seq %s, want 3", base)
	}
	if err := c.Del(ctx, "baton:{s}:meta").Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	if _, err := send(makeJob(id, "e", 7, 1)); !errors.Is(err, ErrNotFound) {
		t.Errorf("a write to a session gone: %v, want ErrNotFound", err)
	}
}

// TestFenceScript: the fence moves a session up to its writer's seq and
// checksum only while the store still holds what the writer read and the
// writer is its owner, and ahead of it.
func TestFenceScript(t *testing.T) {
	ctx := context.Background()
	s, c := scriptStore(t)
	id := "s"
	if err := s.CreateSession(ctx, id, SessionMeta{Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	r := s.NewRing(id, 4, Callbacks{})
	for i := range 3 {
		r.Append(ctx, fmt.Sprint("e", i+1), func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil })
	}
	r.flight = unit{events: r.open.events}
	if _, err := appendScript.Run(ctx, c, r.keys[:], job{r: r}.args()...).Result(); err != nil {
		t.Fatal(err)
	}
	c2, _ := r.Checksum(ctx, 2)
	c3, _ := r.Checksum(ctx, 3)
	// A part the writer's checkpoint no longer has: the fence removes it.
	if err := c.HSet(ctx, "baton:{s}:meta", "cp:stale", "x").Err(); err != nil {
		t.Fatal(err)
	}
	fence := func(node string, seen uint64, seenSum string, to uint64, toSum string) (int64, error) {
		n, err := fenceScript.Run(ctx, c, r.keys[:], node, 0, seen, seenSum, to, toSum, "1", to, "cp", "cp", "cp:a", "A").Int64()
		return n, scriptError(err)
	}
	for _, tt := range []struct {
		name     string
		node     string
		seen     uint64
		seenSum  string
		to       uint64
		wantErr  error
		wantLost int64
	}{
		{"another owner", "b", 3, c3, 5, ErrNotOwner, 0},
		{"the store moved since it was read", "a", 2, c2, 5, ErrConflict, 0},
		{"another chain", "a", 3, c2, 5, ErrConflict, 0},
		{"not ahead", "a", 3, c3, 3, ErrConflict, 0},
		{"the writer ahead", "a", 3, c3, 5, nil, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := fence(tt.node, tt.seen, tt.seenSum, tt.to, "sum5")
			if !errors.Is(err, tt.wantErr) || n != tt.wantLost {
				t.Errorf("got %d, %v; want %d, %v", n, err, tt.wantLost, tt.wantErr)
			}
		})
	}
	m, err := c.HGetAll(ctx, "baton:{s}:meta").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"last_seq": "5", "last_sum": "sum5", "base_seq": "5", "base_sum": "sum5",
		"cp": "cp", "cp:a": "A", "cp:stale": "", "cp_seq": "5", "lost_writes": "2"} {
		if m[k] != want {
			t.Errorf("meta %s = %q, want %q", k, m[k], want)
		}
	}
	if n, err := c.Exists(ctx, "baton:{s}:events").Result(); err != nil || n != 0 {
		t.Errorf("the stream is still there (%d, %v): it must hold nothing up to the new base", n, err)
	}
}

// TestAppendAfterEarlierEntries: a stream written by an earlier version, an
// entry per event (fields d and c), takes the append script's entries
// after it; the trim finds base_sum in the earlier layout, and the session
// reads back whole across both.
func TestAppendAfterEarlierEntries(t *testing.T) {
	ctx := context.Background()
	s, c := scriptStore(t)
	id := "o"
	if err := s.CreateSession(ctx, id, SessionMeta{Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	k := keysOf(id)
	sum := ""
	sums := []string{""}
	for seq := 1; seq <= 3; seq++ {
		sum = buffer.NextChecksum(sum, fmt.Sprint("e", seq))
		sums = append(sums, sum)
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: k[1], ID: fmt.Sprint(seq, "-0"), Values: []any{"d", fmt.Sprint(seq), "c", sum}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.HSet(ctx, k[0], "last_seq", 3, "last_sum", sum).Err(); err != nil {
		t.Fatal(err)
	}
	r := s.NewRing(id, 4, Callbacks{})
	for seq := 1; seq <= 5; seq++ {
		r.Append(ctx, fmt.Sprint("e", seq), func(seq uint64) ([]byte, error) { return fmt.Appendf(nil, "%d", seq), nil })
	}
	all := r.open.events
	r.flight = unit{events: all[len(all)-2:]}
	j := job{r: r, from: 3, fromSum: sums[3]}
	if n, err := appendScript.Run(ctx, c, r.keys[:], j.args()...).Int64(); n != 5 || err != nil {
		t.Fatalf("the write of 4 and 5: %d, %v", n, err)
	}
	meta, err := c.HMGet(ctx, k[0], "base_seq", "base_sum").Result()
	if err != nil || meta[0] != "1" || meta[1] != sums[1] {
		t.Errorf("base %v, %v; want 1 and c(1)", meta, err)
	}
	opened, _, err := s.OpenRing(ctx, id, Callbacks{})
	if err != nil {
		t.Fatalf("open the session: %v", err)
	}
	defer opened.Close()
	got, err := opened.Since(ctx, 1)
	if err != nil || len(got) != 4 || string(got[0].Data) != "2" || string(got[3].Data) != "5" {
		t.Errorf("the session holds %v, %v; want 2…5", got, err)
	}
}

// scriptStore is node a's store on a redis-server of its own, for tests
// that run the scripts themselves, and a client of that server.
func scriptStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	s, err := New(c, Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, c
}
