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
	s := newTokenStore(t)
	tests := []struct {
		name             string
		commit           bool // CommitToken(old) instead of RotateToken(old, next)
		old, next        string
		want             uint64 // the rotation's number (1 for a commit that ended one)
		wantErr          error
		wantTok, wantPre string // the store's token and prev afterwards
	}{
		{name: "from the current hash", old: "t0", next: "t1", want: 1, wantTok: "t1", wantPre: "t0"},
		{name: "from the pending previous hash", old: "t0", next: "t2", want: 2, wantTok: "t2", wantPre: "t0"},
		{name: "from the hash that one replaced", old: "t1", next: "t3", wantTok: "t2", wantPre: "t0"},
		{name: "a commit of a replaced hash", commit: true, old: "t1", wantTok: "t2", wantPre: "t0"},
		{name: "a commit of the current hash", commit: true, old: "t2", want: 1, wantTok: "t2"},
		{name: "from the committed-away hash", old: "t0", next: "t3", wantTok: "t2"},
		{name: "from the new hash", old: "t2", next: "t3", want: 3, wantTok: "t3", wantPre: "t2"},
		{name: "a commit, again", commit: true, old: "t3", want: 1, wantTok: "t3"},
		{name: "an unknown session", old: "t3", next: "t4", wantErr: ErrNotFound, wantTok: "t3"},
		{name: "a commit of an unknown session", commit: true, old: "t3", wantTok: "t3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "s"
			if strings.Contains(tt.name, "unknown session") {
				id = "none"
			}
			var got uint64
			var err error
			if tt.commit {
				var ok bool
				ok, err = s.CommitToken(ctx, id, tt.old)
				if ok {
					got = 1
				}
			} else {
				got, err = s.RotateToken(ctx, id, tt.old, tt.next)
			}
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, tt.want, tt.wantErr)
			}
			info, err := s.Lookup(ctx, "s")
			if err != nil || info.TokenHash != tt.wantTok || info.PrevTokenHash != tt.wantPre {
				t.Fatalf("token %q, previous %q, %v; want %q, %q", info.TokenHash, info.PrevTokenHash, err, tt.wantTok, tt.wantPre)
			}
		})
	}

	// Racing rotations from one hash each get a number of their own, and
	// the one with the highest holds the token: its commit alone succeeds.
	const racers = 8
	type rotated struct {
		n   uint64
		err error
	}
	nums := make(chan rotated, racers)
	for i := range racers {
		go func() {
			n, err := s.RotateToken(ctx, "s", "t3", fmt.Sprint("r", i))
			if err == nil && n == 0 {
				err = fmt.Errorf("rotation r%d refused", i)
			}
			nums <- rotated{n, err}
		}()
	}
	seen := map[uint64]bool{}
	var highest uint64
	for range racers {
		r := <-nums
		if r.err != nil {
			t.Fatal(r.err) // each is from the current or the pending previous hash
		}
		if seen[r.n] {
			t.Fatalf("rotation number %d issued twice", r.n)
		}
		seen[r.n], highest = true, max(highest, r.n)
	}
	if highest != 3+racers {
		t.Fatalf("highest rotation number %d, want %d", highest, 3+racers)
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
	if n, err := s.RotateToken(ctx, "s", "t3", "late"); n != 0 || err != nil {
		t.Fatalf("a rotation from the committed-away hash: %v, %v", n, err)
	}
}

// newTokenStore is a store on a fresh redis-server holding one session,
// "s", whose token hash is "t0".
func newTokenStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(redistest.Start(t).Client(t), Options{Node: "a", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateSession(context.Background(), "s", SessionMeta{TokenHash: "t0", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAttachOrder: the store records the connection holding the highest
// token rotation, refuses one holding a lower one, and records one that
// holds none only while no connection is recorded.
func TestAttachOrder(t *testing.T) {
	ctx := context.Background()
	s := newTokenStore(t)
	steps := []struct {
		name     string
		detach   bool // Detach(conn) instead of Attach
		conn     string
		rot      uint64
		wantOK   bool
		wantPrev string
		wantConn string // the connection recorded afterwards
		wantRot  uint64
	}{
		{name: "a new session's connection", conn: "a/c0", wantOK: true, wantConn: "a/c0"},
		{name: "a follower beside it", conn: "b/f1", wantOK: true, wantPrev: "a/c0", wantConn: "a/c0"},
		{name: "rotation 2", conn: "b/c2", rot: 2, wantOK: true, wantPrev: "a/c0", wantConn: "b/c2", wantRot: 2},
		{name: "rotation 1, after 2", conn: "a/c1", rot: 1, wantConn: "b/c2", wantRot: 2},
		{name: "a follower after 2", conn: "a/f2", wantOK: true, wantPrev: "b/c2", wantConn: "b/c2", wantRot: 2},
		{name: "rotation 3", conn: "a/c3", rot: 3, wantOK: true, wantPrev: "b/c2", wantConn: "a/c3", wantRot: 3},
		{name: "rotation 3 left", detach: true, conn: "a/c3", wantRot: 3},
		{name: "a follower kept on record", conn: "a/f2", wantOK: true, wantConn: "a/f2", wantRot: 3},
		{name: "rotation 2 again", conn: "b/c2", rot: 2, wantConn: "a/f2", wantRot: 3},
	}
	for _, st := range steps {
		if st.detach {
			if err := s.Detach(ctx, "s", st.conn); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		} else {
			prev, ok, err := s.Attach(ctx, "s", st.conn, st.rot)
			if err != nil || ok != st.wantOK || prev != st.wantPrev {
				t.Fatalf("%s: %q, %v, %v; want %q, %v", st.name, prev, ok, err, st.wantPrev, st.wantOK)
			}
		}
		info, err := s.Lookup(ctx, "s")
		if err != nil || info.Conn != st.wantConn || info.ConnRot != st.wantRot {
			t.Fatalf("%s: recorded %q (rotation %d), %v; want %q (%d)", st.name, info.Conn, info.ConnRot, err, st.wantConn, st.wantRot)
		}
	}
	if _, _, err := s.Attach(ctx, "none", "a/c9", 9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("attach to an unknown session: %v", err)
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
