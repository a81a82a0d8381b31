package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// TestClusterResyncNeverAheadOfStore: a resync answered while the store
// is behind the owner never gives the client a seq the store does not
// hold; so after the owner dies, the client's seq never goes backwards on
// the node that takes over. Redis keeps answering (the resume's own token
// rotation needs it) while the owner's writes of events fail: the test
// puts a string where the session's event stream was, so that the append
// script's XADD fails with WRONGTYPE, a transient error the writer
// retries, and puts the stream back once the owner is dead.
func TestClusterResyncNeverAheadOfStore(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()
	rdb := rds.Client(t)

	c, hello := connect(t, "http://"+a.addr)
	c.send("user.solve_tasks", map[string]any{"tasks": slowTasks(6)})
	seen := c.until(wsproto.EventSolverStart)
	metaKey, events := "baton:{"+hello.SessionID+"}:meta", "baton:{"+hello.SessionID+"}:events"
	owner := rdb.HGet(ctx, metaKey, "owner").Val()

	// The store stops taking A's events; A's run goes on in memory.
	stash := events + ":stash"
	if err := rdb.Rename(ctx, events, stash).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, events, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's writes of events to fail", func() bool {
		return strings.Contains(a.log.String(), "redisstore: write failed, retrying")
	})

	// A resync on A (a checksum that is not the session's): whatever it is
	// answered with, the client holds no seq the store does not have.
	last := seen[len(seen)-1].Seq
	held, heldSum := last, checksums(seen)[last]
	r := resume(t, "http://"+a.addr, hello, last, "not the checksum")
	f, err := r.read(3 * heldTimeoutForTest)
	switch {
	case err != nil:
		// Held until the store catches up, which it does not: 1012, and
		// the client resumes again with what it had.
		if code := websocket.CloseStatus(err); code != websocket.StatusServiceRestart {
			t.Fatalf("the resync on A ended with %v, want a system.connected or 1012", err)
		}
	case f.Event == wsproto.EventConnected:
		m := meta[wsproto.Connected](t, f)
		if !m.Resync {
			t.Fatalf("resume on A: %+v, want a resync", m)
		}
		held, heldSum = m.LastSeq, m.StateChecksum
	default:
		t.Fatalf("the resync on A began with %s, want system.connected", f.Event)
	}
	stored, err := strconv.ParseUint(rdb.HGet(ctx, metaKey, "last_seq").Val(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if held > stored {
		t.Errorf("the client holds seq %d, the store only %d", held, stored)
	}

	// A dies with what the store never got; the stream comes back.
	a.kill(t)
	if err := rdb.Del(ctx, events).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Rename(ctx, stash, events).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "A's lease to lapse", func() bool { return rdb.Exists(ctx, "baton:{nodes}:"+owner).Val() == 0 })

	r = resume(t, "http://"+b.addr, hello, held, heldSum)
	var m wsproto.Connected
	r.expectMeta(wsproto.EventConnected, &m)
	if !m.Resumed || m.LastSeq < held {
		t.Fatalf("resume on B: %+v; the client had seq %d: its seq went backwards", m, held)
	}
	if m.LastSeq == held && m.StateChecksum != heldSum {
		t.Errorf("resume on B: checksum %s at seq %d, the client had %s", m.StateChecksum, held, heldSum)
	}
}

// heldTimeoutForTest is the server's bound on a resync's wait for the
// store (orchestrator's heldTimeout).
const heldTimeoutForTest = 5 * time.Second
