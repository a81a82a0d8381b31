package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestClusterTTLSurvivesTakeover: a session's --session-ttl runs from when
// its client left, also once the node that held it died and another took
// it over. The client leaves A, A is killed, and the client comes back
// on B: within the TTL (counted from its leaving) the session resumes;
// past it the resume is rejected, and its keys are gone from Redis.
func TestClusterTTLSurvivesTakeover(t *testing.T) {
	const ttl = 8 * time.Second // past the 3s lease: B takes over, not proxies
	for _, tc := range []struct {
		name    string
		away    time.Duration // how long after leaving the client comes back, at least
		resumes bool
	}{
		{name: "within the TTL", away: 0, resumes: true},
		{name: "past the TTL", away: ttl + 500*time.Millisecond, resumes: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rds := redistest.Start(t)
			ttlArgs := []string{"--session-ttl", ttl.String()}
			a := startNode(t, "A", "127.0.0.1:0", rds.URL(), ttlArgs...)
			b := startNode(t, "B", "127.0.0.1:0", rds.URL(), ttlArgs...)
			ctx := context.Background()
			rdb := rds.Client(t)

			c, hello := connect(t, "http://"+a.addr)
			frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}})
			last := frames[len(frames)-1].Seq
			sums := checksums(frames)
			meta := "baton:{" + hello.SessionID + "}:meta"
			owner := rdb.HGet(ctx, meta, "owner").Val()
			c.ws.CloseNow()
			var left time.Time // when the store recorded the client's leaving
			eventually(t, "the store to record that the client left", func() bool {
				ms, err := strconv.ParseInt(rdb.HGet(ctx, meta, "detached").Val(), 10, 64)
				left = time.UnixMilli(ms)
				return err == nil
			})
			a.kill(t)
			eventually(t, "A's lease to lapse", func() bool {
				return rdb.Exists(ctx, "baton:{nodes}:"+owner).Val() == 0
			})
			// The time away is the thing under test: nothing to wait for
			// but the clock.
			time.Sleep(time.Until(left.Add(tc.away)))

			r := resume(t, "http://"+b.addr, hello, last, sums[last])
			if !tc.resumes {
				r.expectError(wsproto.CodeResumeRejected)
				if n := rdb.Exists(ctx, meta, "baton:{"+hello.SessionID+"}:events").Val(); n != 0 {
					t.Errorf("%d of the expired session's keys are still in Redis", n)
				}
				return
			}
			if away := time.Since(left); away >= ttl {
				t.Fatalf("the resume came %v after the client left, past the TTL: the machine is too slow for this test", away)
			}
			var m wsproto.Connected
			r.expectMeta(wsproto.EventConnected, &m)
			if !m.Resumed || m.Resync || m.LastSeq != last {
				t.Fatalf("resume on B: %+v, want resumed at seq %d without a resync", m, last)
			}
		})
	}
}
