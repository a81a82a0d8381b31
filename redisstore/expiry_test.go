package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/redisstore"
)

// TestDetachedExpiry: once a session's client has left (Detach), its keys
// expire SessionTTL after that moment, and nothing a node does to the
// session meanwhile — a write, a Touch, a claim by another node — moves
// that, but Present (its client there, refused) moves it to now; Attach
// makes it live TTL past its writes again.
func TestDetachedExpiry(t *testing.T) {
	forTargets(t, func(t *testing.T, tg target) {
		const ttl, sessionTTL = time.Hour, 30 * time.Second
		opt := redisstore.Options{TTL: ttl, SessionTTL: sessionTTL}
		a, rdb := newStore(t, tg, "a", opt)
		b, _ := newStore(t, tg, "b", opt)
		ctx := context.Background()
		id, ring, _ := newSession(t, a, 1, 16)
		defer ring.Close()
		appendCommit(t, ring, 1)
		flush(t, ring)
		meta, events := "baton:{"+id+"}:meta", "baton:{"+id+"}:events"

		// expiresAt is when both keys expire (PEXPIRETIME), which must agree.
		expiresAt := func(t *testing.T) time.Time {
			t.Helper()
			m, e := rdb.PExpireTime(ctx, meta).Val(), rdb.PExpireTime(ctx, events).Val()
			if m != e || m <= 0 {
				t.Fatalf("meta expires at %v, events at %v", m, e)
			}
			return time.UnixMilli(m.Milliseconds())
		}
		if _, _, err := a.Attach(ctx, id, "a/c1", 0); err != nil {
			t.Fatal(err)
		}
		if left := time.Until(expiresAt(t)); left < ttl-time.Minute {
			t.Fatalf("attached: the keys expire in %v, want about %v", left, ttl)
		}
		before := time.Now().Truncate(time.Millisecond)
		if err := a.Detach(ctx, id, "a/c1"); err != nil {
			t.Fatal(err)
		}
		info, err := a.Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Conn != "" || info.Detached.Before(before) || time.Since(info.Detached) > time.Minute {
			t.Fatalf("after Detach: conn %q, detached %v (detach began %v)", info.Conn, info.Detached, before)
		}
		want := info.Detached.Add(sessionTTL)
		for _, step := range []struct {
			name string
			do   func(t *testing.T)
		}{
			{name: "detached", do: func(t *testing.T) {}},
			{name: "a write", do: func(t *testing.T) { appendCommit(t, ring, 2); flush(t, ring) }},
			{name: "a touch", do: func(t *testing.T) {
				if err := a.Touch(ctx, id); err != nil {
					t.Fatal(err)
				}
			}},
			{name: "a claim", do: func(t *testing.T) {
				if won, err := b.Claim(ctx, id, "a"); err != nil || !won {
					t.Fatalf("claim: %v %v", won, err)
				}
			}},
		} {
			t.Run(step.name, func(t *testing.T) {
				step.do(t)
				if got := expiresAt(t); !got.Equal(want) {
					t.Errorf("the keys expire at %v, want %v (detached %v + %v)", got, want, info.Detached, sessionTTL)
				}
			})
		}
		// Its client is there, refused (Present): it left now, as far
		// as its expiry goes.
		before = time.Now().Truncate(time.Millisecond)
		if err := b.Present(ctx, id); err != nil {
			t.Fatal(err)
		}
		info, err = b.Lookup(ctx, id)
		if err != nil || info.Detached.Before(before) || time.Since(info.Detached) > time.Minute {
			t.Fatalf("after Present: detached %v, %v (Present began %v)", info.Detached, err, before)
		}
		if got, want := expiresAt(t), info.Detached.Add(sessionTTL); !got.Equal(want) {
			t.Errorf("after Present: the keys expire at %v, want %v", got, want)
		}
		if _, _, err := b.Attach(ctx, id, "b/c2", 0); err != nil {
			t.Fatal(err)
		}
		if err := b.Present(ctx, id); err != nil { // attached: nothing to move
			t.Fatal(err)
		}
		if info, err := b.Lookup(ctx, id); err != nil || !info.Detached.IsZero() {
			t.Fatalf("after Attach and Present: detached %v, %v; want none", info.Detached, err)
		}
		if left := time.Until(expiresAt(t)); left < ttl-time.Minute {
			t.Errorf("attached again: the keys expire in %v, want about %v", left, ttl)
		}
	})
}
