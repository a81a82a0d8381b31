package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// Redis itself fails: a Sentinel failover (the replica in sync, or behind
// so that writes Redis acknowledged are lost) and a restart of a Redis
// that persists with an append-only file. Baton runs as a process on
// --redis-url, the client through real WebSockets.

// seqLog records the event each seq a client received named, to find a
// fork: one seq given to two events with no resync between that tells the
// client to drop the first.
type seqLog struct {
	mu      sync.Mutex // guards the fields below
	ids     map[uint64]string
	forks   []string
	resyncs int
}

func newSeqLog() *seqLog { return &seqLog{ids: map[uint64]string{}} }

func (l *seqLog) add(f client.Frame) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f.Event == wsproto.EventStateSnapshot {
		// A resync: the client drops what it held after the snapshot's
		// seq, which may name other events from now on.
		var snap wsproto.Snapshot
		if err := json.Unmarshal(f.Metadata, &snap); err != nil {
			l.forks = append(l.forks, "a snapshot that does not decode: "+err.Error())
			return
		}
		for seq := range l.ids {
			if seq > snap.Seq {
				delete(l.ids, seq)
			}
		}
		l.resyncs++
		return
	}
	if f.Seq == 0 {
		return
	}
	if id, ok := l.ids[f.Seq]; ok && id != f.EventID {
		l.forks = append(l.forks, f.Event+" "+f.EventID+" at a seq that named "+id)
	}
	l.ids[f.Seq] = f.EventID
}

func (l *seqLog) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.forks) > 0 {
		t.Errorf("seqs given to two events: %q", l.forks)
	}
}

// solveLogged dials the first of urls (resuming on the others), has it
// solve three slow tasks, confirming everything, and logs the seqs it
// receives.
func solveLogged(t *testing.T, ctx context.Context, urls []string) (*client.Client, *seqLog) {
	t.Helper()
	seqs := newSeqLog()
	cl := clusterClient(t, ctx, urls, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll, OnEvent: seqs.add})
	if err := cl.SolveTasks(ctx, slowTasks(3)); err != nil {
		t.Fatal(err)
	}
	return cl, seqs
}

// cutOff cuts the replica off (Failover.Cut) and waits until the client
// has received two events the master acknowledged after the cut: the
// master alone has them.
func cutOff(t *testing.T, ctx context.Context, f *redistest.Failover, cl *client.Client, session string) {
	t.Helper()
	f.Cut(t)
	// Events written before the cut may reach the client after it: what
	// the master held at the cut is what the replica has.
	last, err := f.Master.Client(t).HGet(ctx, "baton:{"+session+"}:meta", "last_seq").Uint64()
	if err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cl, "events after the cut", func(v client.View) bool { return v.LastSeq >= last+2 })
}

// TestSentinelFailover: Baton on a Sentinel setup (--redis-url with
// master_name); mid-run the sentinels promote the replica (SENTINEL
// FAILOVER). Baton follows the master and the run ends with every event
// once, in order.
func TestSentinelFailover(t *testing.T) {
	f := redistest.StartFailover(t, 2)
	n := startNode(t, "A", "127.0.0.1:0", f.URL())
	ctx := context.Background()
	cl, seqs := solveLogged(t, ctx, []string{n.url()})
	waitView(t, ctx, cl, "t1 completed", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == 3 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
	})
	f.Failover(t)
	v := waitView(t, ctx, cl, "the final answer after the failover", finished)
	clean(t, v)
	seqs.check(t)
	if v.Stats.Rejected != 0 {
		t.Errorf("rejected %d", v.Stats.Rejected)
	}
	if !strings.Contains(n.log.String(), `master \"mymaster\" of sentinels`) {
		t.Errorf("the node did not join through the sentinels")
	}
	// The run's last events are on the new master. (It may hold other
	// sessions: the failover lapses the node's lease — its renewals wait
	// for a replica, which the promoted one has none of for a while — and
	// the node adopts nothing until the lease holds again, so the resumes
	// meanwhile are refused, each leaving its connection's fresh session
	// until --idle-session-ttl.)
	if last, err := f.Replica.Client(t).HGet(ctx, "baton:{"+v.SessionID+"}:meta", "last_seq").Uint64(); err != nil || last < v.LastSeq {
		t.Errorf("the session on the new master is at seq %d (%v); the client got %d", last, err, v.LastSeq)
	}
}

// TestLostWritesAfterFailover: with --redis-replicas 0 (the master's reply
// counts) the replica is cut off, so the events the master acknowledges
// (and the client receives) next reach the master only; the master dies
// and the sentinels promote the stale replica.
// Baton's next write finds Redis behind what it made durable, says so,
// and fences the lost seqs: the client, which holds them, goes on without
// a gap, a duplicate or a seq given to two events, and the run ends.
func TestLostWritesAfterFailover(t *testing.T) {
	f := redistest.StartFailover(t, 1)
	// A lease that outlasts the failover: the owner must still hold the
	// session when it next writes, to find the store behind and fence.
	// With the default 3 s a slow failover (a loaded machine) lapses it
	// first: the session is given up, adopted again from what Redis kept,
	// and the client resyncs instead — clean too, but not this path (seen
	// in CI once).
	n := startNode(t, "A", "127.0.0.1:0", f.URL(), "--redis-replicas", "0", "--lease-ttl", "10s")
	ctx := context.Background()
	cl, seqs := solveLogged(t, ctx, []string{n.url()})
	v := waitView(t, ctx, cl, "the run's first events", func(v client.View) bool { return v.LastSeq >= 2 })
	cutOff(t, ctx, f, cl, v.SessionID)
	f.Master.Kill(t)
	f.Replica.Continue(t)
	f.WaitMaster(t, f.Replica)
	v = waitView(t, ctx, cl, "the final answer after the failover", finished)
	clean(t, v)
	seqs.check(t)
	if v.Stats.Rejected != 0 {
		t.Errorf("rejected %d", v.Stats.Rejected)
	}
	if !strings.Contains(n.log.String(), "Redis lost acknowledged writes") {
		t.Errorf("the node did not notice the lost writes")
	}
}

// TestFailoverLosesNothingTold: with a Sentinel URL a write counts only
// once the replica holds it (--redis-replicas defaults to 1). The replica
// is cut off: the master goes on acknowledging writes, but none of them
// counts, so the client receives nothing past what the replica has and
// the run waits (and the node's lease lapses: its renewals do not count
// either). The master dies and the stale replica is promoted: it lost
// only what Baton never counted, so there is nothing to fence and nothing
// to resync, and once the old master is back as its replica the run goes
// on and ends with every event once.
func TestFailoverLosesNothingTold(t *testing.T) {
	f := redistest.StartFailover(t, 1)
	n := startNode(t, "A", "127.0.0.1:0", f.URL())
	ctx := context.Background()
	cl, seqs := solveLogged(t, ctx, []string{n.url()})
	v := waitView(t, ctx, cl, "the run's first events", func(v client.View) bool { return v.LastSeq >= 2 })
	f.Cut(t)
	mc := f.Master.Client(t)
	meta := "baton:{" + v.SessionID + "}:meta"
	last, err := mc.HGet(ctx, meta, "last_seq").Uint64() // what the replica holds
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the master alone holding an event", func() bool {
		l, err := mc.HGet(ctx, meta, "last_seq").Uint64()
		return err == nil && l > last
	})
	if got := cl.View().LastSeq; got > last {
		t.Fatalf("the client received seq %d; the replica holds up to %d", got, last)
	}
	f.Master.Kill(t)
	f.Replica.Continue(t)
	f.WaitMaster(t, f.Replica)
	// The new master has no replica, so no write counts yet: the old
	// master comes back, empty, and the sentinels make it the replica.
	f.Master.Restart(t)
	v = waitView(t, ctx, cl, "the final answer after the failover", finished)
	clean(t, v)
	seqs.check(t)
	if v.Stats.Resyncs != 0 || v.Stats.Rejected != 0 {
		t.Errorf("resyncs %d, rejected %d; want neither: Redis lost nothing the client had", v.Stats.Resyncs, v.Stats.Rejected)
	}
	if strings.Contains(n.log.String(), "Redis lost acknowledged writes") {
		t.Errorf("the node found writes lost; none it counted should be")
	}
}

// TestRedisAppendOnlyRestart: Redis persists with an append-only file
// (appendfsync always) and is killed (SIGKILL) mid-run while the client
// is away; started again on the same port and directory it has every
// session back: the client's resume replays what it missed and the run
// ends.
func TestRedisAppendOnlyRestart(t *testing.T) {
	rds := redistest.StartConfig(t, redistest.Config{AppendOnly: true})
	n := startNode(t, "A", "127.0.0.1:0", rds.URL())
	ctx := context.Background()
	cl, seqs := solveLogged(t, ctx, []string{n.url()})
	waitView(t, ctx, cl, "t1 completed", func(v client.View) bool {
		return v.Run != nil && len(v.Run.Tasks) == 3 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
	})
	rds.Kill(t)
	resumes := cl.View().Stats.Resumes
	cl.Drop()
	rds.Restart(t)
	waitView(t, ctx, cl, "a resume", func(v client.View) bool { return v.Stats.Resumes > resumes })
	v := waitView(t, ctx, cl, "the final answer after the restart", finished)
	clean(t, v)
	seqs.check(t)
	if v.Stats.Resyncs != 0 || v.Stats.Rejected != 0 {
		t.Errorf("resyncs %d, rejected %d; want plain replays", v.Stats.Resyncs, v.Stats.Rejected)
	}
	if v.Run.Tasks[0].Attempt != 1 {
		t.Errorf("t1 ran %d times", v.Run.Tasks[0].Attempt)
	}
}

// TestLostWritesOwnerDead: as TestLostWritesAfterFailover, but the owner
// dies with the master, so no node knows what Redis lost. B takes the
// session over from what the promoted replica kept; the client, ahead of
// it, resumes on B with an explicit resync (state_snapshot), never a
// replay that skips or a seq reused without it, and the run ends.
func TestLostWritesOwnerDead(t *testing.T) {
	f := redistest.StartFailover(t, 1)
	a := startNode(t, "A", "127.0.0.1:0", f.URL(), "--redis-replicas", "0")
	b := startNode(t, "B", "127.0.0.1:0", f.URL(), "--redis-replicas", "0")
	ctx := context.Background()
	cl, seqs := solveLogged(t, ctx, []string{a.url(), b.url()})
	v := waitView(t, ctx, cl, "the run's first events", func(v client.View) bool { return v.LastSeq >= 2 })
	cutOff(t, ctx, f, cl, v.SessionID)
	a.kill(t)
	f.Master.Kill(t)
	f.Replica.Continue(t)
	f.WaitMaster(t, f.Replica)
	v = waitView(t, ctx, cl, "the final answer after the failover", finished)
	clean(t, v)
	seqs.check(t)
	if v.Stats.Resyncs == 0 || v.Stats.Rejected != 0 {
		t.Errorf("resyncs %d, rejected %d; want a resync (the client is ahead of Redis)", v.Stats.Resyncs, v.Stats.Rejected)
	}
	if !strings.Contains(b.log.String(), "session taken over") {
		t.Errorf("B did not take the session over")
	}
}
