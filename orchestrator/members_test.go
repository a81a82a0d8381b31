package orchestrator

import (
	"context"
	"testing"

	"github.com/baton-run/baton/wsproto"
)

// TestPruneToLowestAck: the ring drops only what every member of the
// session acked; an ack past the latest seq changes nothing; a member
// leaving, or an ack from a follower on another server the session did
// not know, moves the prune point.
func TestPruneToLowestAck(t *testing.T) {
	type ack struct {
		ref string
		seq uint64
	}
	tests := []struct {
		name    string
		members []string // refs attached before the acks
		acks    []ack
		leave   string // a member that leaves after the acks
		code    string // the last ack's error code, "" for none
		pruned  uint64 // what the ring dropped: events ≤ it are gone
	}{
		{"one member", []string{"a"}, []ack{{"a", 5}}, "", "", 5},
		{"the lowest of two", []string{"a", "b"}, []ack{{"a", 8}, {"b", 3}}, "", "", 3},
		{"one that never acked holds everything", []string{"a", "b"}, []ack{{"a", 8}}, "", "", 0},
		{"a lower ack later is a no-op", []string{"a"}, []ack{{"a", 6}, {"a", 2}}, "", "", 6},
		{"the slow one drops: its hold stays for its resume", []string{"a", "b"}, []ack{{"a", 8}, {"b", 3}}, "b", "", 3},
		{"one that never acked drops: nothing held", []string{"a", "b"}, []ack{{"a", 8}}, "b", "", 8},
		{"an ack past the end changes nothing", []string{"a"}, []ack{{"a", 4}, {"a", 11}}, "", wsproto.CodeInvalidAck, 4},
		{"a follower on another server joins by its ack", []string{"a"}, []ack{{"B/x", 2}, {"a", 9}}, "", "", 2},
		{"a follower on another server drops", []string{"a", "B/x"}, []ack{{"a", 9}, {"B/x", 2}}, "B/x", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := New(simModels(), &Options{Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			for range 10 {
				sess.emit(wsproto.EventPlanStart, "", "", &wsproto.PlanStart{RunID: "run_1"})
			}
			sess.mu.Lock()
			for _, ref := range tt.members {
				sess.members = append(sess.members, &member{ref: ref})
			}
			sess.mu.Unlock()
			var e *wsproto.Error
			for _, a := range tt.acks {
				e = sess.ack(a.ref, a.seq)
			}
			if got := code(e); got != tt.code {
				t.Fatalf("the last ack answered %q, want %q", got, tt.code)
			}
			if tt.leave != "" {
				sess.detach(tt.leave)
			}
			ctx := context.Background()
			if _, err := sess.ring.Since(ctx, tt.pruned); err != nil {
				t.Errorf("the events after %d are gone: %v", tt.pruned, err)
			}
			if tt.pruned > 0 {
				if _, err := sess.ring.Since(ctx, tt.pruned-1); err == nil {
					t.Errorf("event %d is still held; want the ring pruned to %d", tt.pruned, tt.pruned)
				}
			}
		})
	}
}

func code(e *wsproto.Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}

// TestFollowLimit: a session refuses a member beyond MaxFollowers; 0 is
// no limit.
func TestFollowLimit(t *testing.T) {
	tests := []struct {
		max, members int
		refused      bool
	}{
		{0, 100, false},
		{2, 1, false},
		{2, 2, true},
		{1, 1, true},
	}
	for _, tt := range tests {
		srv, err := New(simModels(), &Options{Logger: quiet(), MaxFollowers: tt.max})
		if err != nil {
			t.Fatal(err)
		}
		sess, _, _ := srv.newSession(context.Background(), "")
		sess.mu.Lock()
		for range tt.members {
			sess.members = append(sess.members, &member{})
		}
		e := sess.followLimitLocked()
		sess.mu.Unlock()
		if (e != nil) != tt.refused || (e != nil && e.Code != wsproto.CodeFollowLimit) {
			t.Errorf("max %d with %d attached: %+v, want refused %v", tt.max, tt.members, e, tt.refused)
		}
		srv.Close(context.Background())
	}
}
