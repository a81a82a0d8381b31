package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/redisstore"
)

// TestRotateToken: a token hash is replaced from its current value (which
// becomes the pending previous one) or from the pending previous one
// (which stays), until a commit of the current value drops the previous
// one; a commit of a value no longer current changes nothing. Of many
// rotations from one hash at once, exactly one's new hash is current
// afterwards, and only its commit succeeds. A rotation from the pending
// previous hash by a resume that arrived more than the skew before the
// one that made the current hash is refused (ErrSuperseded).
func TestRotateToken(t *testing.T) {
	ctx := context.Background()
	base := time.UnixMilli(1_800_000_000_000)
	forTargets(t, func(t *testing.T, tg target) {
		s := newTokenStore(t, tg)
		tests := []struct {
			name             string
			commit           bool // CommitToken(old) instead of RotateToken(old, next)
			old, next        string
			at               time.Duration // when the resume arrived, after base
			want             uint64        // the rotation's number (1 for a commit that ended one)
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
			{name: "from the new hash, later", old: "t3", next: "t4", at: 20 * time.Second, want: 4, wantTok: "t4", wantPre: "t3"},
			{name: "from the pending previous hash, by a resume that arrived 2 s before", old: "t3", next: "t5", at: 18 * time.Second,
				wantErr: redisstore.ErrSuperseded, wantTok: "t4", wantPre: "t3"},
			{name: "from the pending previous hash, by a resume within the skew", old: "t3", next: "t5", at: 19500 * time.Millisecond,
				want: 5, wantTok: "t5", wantPre: "t3"},
			{name: "from it again, within the skew of the latest arrival", old: "t3", next: "t6", at: 19200 * time.Millisecond,
				want: 6, wantTok: "t6", wantPre: "t3"},
			{name: "from it again, beyond the skew of the latest arrival", old: "t3", next: "t7", at: 18900 * time.Millisecond,
				wantErr: redisstore.ErrSuperseded, wantTok: "t6", wantPre: "t3"},
			{name: "an unknown session", old: "t3", next: "t4", wantErr: redisstore.ErrNotFound, wantTok: "t6", wantPre: "t3"},
			{name: "a commit of an unknown session", commit: true, old: "t3", wantTok: "t6", wantPre: "t3"},
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
					got, err = s.RotateToken(ctx, id, tt.old, tt.next, base.Add(tt.at), time.Second)
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
				n, err := s.RotateToken(ctx, "s", "t3", fmt.Sprint("r", i), base.Add(20*time.Second), time.Second)
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
		if highest != 6+racers {
			t.Fatalf("highest rotation number %d, want %d", highest, 6+racers)
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
		if n, err := s.RotateToken(ctx, "s", "t3", "late", base.Add(30*time.Second), time.Second); n != 0 || err != nil {
			t.Fatalf("a rotation from the committed-away hash: %v, %v", n, err)
		}
	})
}

// newTokenStore is a store on tg holding one session, "s", whose token
// hash is "t0".
func newTokenStore(t *testing.T, tg target) *redisstore.Store {
	t.Helper()
	s, _ := newStore(t, tg, "a", redisstore.Options{})
	if err := s.CreateSession(context.Background(), "s", redisstore.SessionMeta{TokenHash: "t0", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAttachOrder: the store records the connection holding the highest
// token rotation, refuses one holding a lower one, and records one that
// holds none only while no connection is recorded.
func TestAttachOrder(t *testing.T) {
	ctx := context.Background()
	forTargets(t, func(t *testing.T, tg target) {
		s := newTokenStore(t, tg)
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
		if _, _, err := s.Attach(ctx, "none", "a/c9", 9); !errors.Is(err, redisstore.ErrNotFound) {
			t.Fatalf("attach to an unknown session: %v", err)
		}
	})
}
