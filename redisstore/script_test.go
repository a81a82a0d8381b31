package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/redistest"
)

// TestAppendScript: the append script's answers to a write sent twice
// (its reply lost), and to writes that do not follow what Redis holds.
func TestAppendScript(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

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
	// Seven events in a ring of four: 4…7 held, after base 3.
	msgs, err := c.XRange(ctx, "baton:{s}:events", "-", "+").Result()
	if err != nil || len(msgs) != 4 || msgs[0].ID != "4-0" || msgs[3].ID != "7-0" {
		t.Errorf("the stream holds %v, %v; want 4-0…7-0", msgs, err)
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

// TestRotateToken: a token hash is replaced from its current value (which
// becomes the pending previous one) or from the pending previous one
// (which stays), until a commit of the current value drops the previous
// one; a commit of a value no longer current changes nothing. Of many
// rotations from one hash at once, exactly one's new hash is current
// afterwards, and only its commit succeeds.
func TestRotateToken(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	s, err := New(srv.Client(t), Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateSession(ctx, "s", SessionMeta{TokenHash: "t0", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		commit           bool // CommitToken(old) instead of RotateToken(old, next)
		old, next        string
		want             bool
		wantErr          error
		wantTok, wantPre string // the store's token and prev afterwards
	}{
		{name: "from the current hash", old: "t0", next: "t1", want: true, wantTok: "t1", wantPre: "t0"},
		{name: "from the pending previous hash", old: "t0", next: "t2", want: true, wantTok: "t2", wantPre: "t0"},
		{name: "from the hash that one replaced", old: "t1", next: "t3", wantTok: "t2", wantPre: "t0"},
		{name: "a commit of a replaced hash", commit: true, old: "t1", wantTok: "t2", wantPre: "t0"},
		{name: "a commit of the current hash", commit: true, old: "t2", want: true, wantTok: "t2"},
		{name: "from the committed-away hash", old: "t0", next: "t3", wantTok: "t2"},
		{name: "from the new hash", old: "t2", next: "t3", want: true, wantTok: "t3", wantPre: "t2"},
		{name: "a commit, again", commit: true, old: "t3", want: true, wantTok: "t3"},
		{name: "an unknown session", old: "t3", next: "t4", wantErr: ErrNotFound, wantTok: "t3"},
		{name: "a commit of an unknown session", commit: true, old: "t3", wantTok: "t3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "s"
			if strings.Contains(tt.name, "unknown session") {
				id = "none"
			}
			var ok bool
			var err error
			if tt.commit {
				ok, err = s.CommitToken(ctx, id, tt.old)
			} else {
				ok, err = s.RotateToken(ctx, id, tt.old, tt.next)
			}
			if ok != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("got %v, %v; want %v, %v", ok, err, tt.want, tt.wantErr)
			}
			info, err := s.Lookup(ctx, "s")
			if err != nil || info.TokenHash != tt.wantTok || info.PrevTokenHash != tt.wantPre {
				t.Fatalf("token %q, previous %q, %v; want %q, %q", info.TokenHash, info.PrevTokenHash, err, tt.wantTok, tt.wantPre)
			}
		})
	}

	const racers = 8
	errs := make(chan error, racers)
	for i := range racers {
		go func() {
			ok, err := s.RotateToken(ctx, "s", "t3", fmt.Sprint("r", i))
			if err == nil && !ok {
				err = fmt.Errorf("rotation r%d refused", i)
			}
			errs <- err
		}()
	}
	for range racers {
		if err := <-errs; err != nil {
			t.Fatal(err) // each is from the current or the pending previous hash
		}
	}
	info, err := s.Lookup(ctx, "s")
	if err != nil || info.PrevTokenHash != "t3" {
		t.Fatalf("previous %q, %v; want t3", info.PrevTokenHash, err)
	}
	committed := 0
	for i := range racers {
		ok, err := s.CommitToken(ctx, "s", fmt.Sprint("r", i))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			committed++
			if info.TokenHash != fmt.Sprint("r", i) {
				t.Fatalf("committed r%d, but the token is %q", i, info.TokenHash)
			}
		}
	}
	if committed != 1 {
		t.Fatalf("%d of %d rotations from one hash are current, want 1", committed, racers)
	}
	if ok, err := s.RotateToken(ctx, "s", "t3", "late"); ok || err != nil {
		t.Fatalf("a rotation from the committed-away hash: %v, %v", ok, err)
	}
}

// TestFenceScript: the fence moves a session up to its writer's seq and
// checksum only while the store still holds what the writer read and the
// writer is its owner, and ahead of it.
func TestFenceScript(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	s, err := New(c, Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
