package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// errorLog keeps the system.error frames a client saw.
type errorLog struct {
	mu   sync.Mutex
	errs []wsproto.Error
}

func (l *errorLog) onEvent(f client.Frame) {
	if f.Event != wsproto.EventError {
		return
	}
	var e wsproto.Error
	if m, err := f.Meta(); err == nil {
		e = *m.(*wsproto.Error)
	}
	l.mu.Lock()
	l.errs = append(l.errs, e)
	l.mu.Unlock()
}

func (l *errorLog) codes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.errs {
		out = append(out, e.Code)
	}
	return out
}

// sameEnd fails t unless the laptop and the phone ended with the same
// stream: the same latest seq and checksum, the same final answer, each
// event once (a client that resynced has fewer events than seqs).
func sameEnd(t *testing.T, laptop, phone client.View) {
	t.Helper()
	clean(t, laptop)
	clean(t, phone)
	if laptop.LastSeq != phone.LastSeq || laptop.Checksum != phone.Checksum {
		t.Errorf("laptop at seq %d (%s), phone at %d (%s): want the same", laptop.LastSeq, laptop.Checksum, phone.LastSeq, phone.Checksum)
	}
	if laptop.Run == nil || phone.Run == nil || laptop.Run.FinalAnswer == nil || phone.Run.FinalAnswer == nil ||
		*laptop.Run.FinalAnswer != *phone.Run.FinalAnswer {
		t.Errorf("final answers differ: laptop %+v, phone %+v", laptop.Run, phone.Run)
	}
	for name, v := range map[string]client.View{"laptop": laptop, "phone": phone} {
		if v.Stats.Replaced > 0 {
			t.Errorf("%s was replaced (4000) %d times: a follow must leave the others attached", name, v.Stats.Replaced)
		}
		if v.Stats.Resyncs == 0 && uint64(v.Stats.Events) != v.LastSeq {
			t.Errorf("%s applied %d events of %d, with no resync", name, v.Stats.Events, v.LastSeq)
		}
	}
}

// TestFollowTwoDevices: a laptop starts a run, a phone follows the session
// with its follow token, and each drops and resumes (following) at its own
// moments while the run goes on; the phone approves the plan. Both end
// with every event once and the same state, and neither was replaced.
func TestFollowTwoDevices(t *testing.T) {
	base := startServer(t, "--sim-delay", "20ms")
	ctx := context.Background()
	var laptopErrs, phoneErrs errorLog
	laptop, err := client.Dial(ctx, wsURL(base), &client.Options{Resume: true, Follow: true, AckEvery: 3, OnEvent: laptopErrs.onEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer laptop.Close()
	first := laptop.View()
	if first.FollowToken == "" || first.FollowToken == first.ResumeToken {
		t.Fatalf("system.connected gave follow token %q (resume token %q): want one of its own", first.FollowToken, first.ResumeToken)
	}
	if err := laptop.Message(ctx, "Compare three databases"); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, laptop, "the plan's confirmation", func(v client.View) bool { return v.Run != nil && len(v.Run.PendingConfirm) > 0 })

	phone, err := client.Follow(ctx, wsURL(base), first.SessionID, first.FollowToken,
		&client.Options{Resume: true, AckEvery: 5, OnConfirm: client.AgreeAll, OnEvent: phoneErrs.onEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer phone.Close()
	// The phone's follow may begin with a snapshot (the laptop's acks
	// pruned the ring); every later resume of either is a replay.
	joined := phone.View().Stats.Resyncs

	waitView(t, ctx, laptop, "the first task", func(v client.View) bool { return v.Phase == wsproto.PhaseSolving })
	laptop.Drop()
	waitView(t, ctx, laptop, "the laptop's resume", func(v client.View) bool { return v.Stats.Resumes >= 1 })
	phone.Drop()
	waitView(t, ctx, phone, "the phone's resume", func(v client.View) bool { return v.Stats.Resumes >= 2 })
	laptop.Drop()

	l := waitView(t, ctx, laptop, "the laptop's end", finished)
	p := waitView(t, ctx, phone, "the phone's end", finished)
	l = waitView(t, ctx, laptop, "the laptop at the phone's seq", func(v client.View) bool { return v.LastSeq >= p.LastSeq })
	p = waitView(t, ctx, phone, "the phone at the laptop's seq", func(v client.View) bool { return v.LastSeq >= l.LastSeq })
	sameEnd(t, l, p)
	// Exactly the resumes the test made: the laptop's two drops, the
	// phone's follow and its one drop. A connection replaced (4000) would
	// have resumed again, and replaced the other in turn.
	if l.Stats.Resumes != 2 || p.Stats.Resumes != 2 {
		t.Errorf("resumes: laptop %d, phone %d; want 2 each", l.Stats.Resumes, p.Stats.Resumes)
	}
	// A device that drops keeps its hold on the ring while the other acks
	// on: its resume is a replay.
	if l.Stats.Resyncs != 0 || p.Stats.Resyncs != joined {
		t.Errorf("resyncs after a drop: laptop %d, phone %d; want replays only", l.Stats.Resyncs, p.Stats.Resyncs-joined)
	}
	if p.FollowToken != first.FollowToken || p.ResumeToken != first.FollowToken {
		t.Errorf("the phone holds resume token %q and follow token %q: want the follow token, which does not rotate", p.ResumeToken, p.FollowToken)
	}
	// A step_id_mismatch may answer an answer the phone sent again after
	// a resume (§3.5): ResentAnswers, not Errors.
	if l.Stats.Errors > 0 || p.Stats.Errors > 0 {
		t.Errorf("system.errors: laptop %v, phone %v; want none but re-sent answers", laptopErrs.codes(), phoneErrs.codes())
	}
}

// TestFollowFirstAnswerWins: two devices answer one confirmation; the
// first answer is applied, the second is told step_id_mismatch, and both
// see the same answered plan.
func TestFollowFirstAnswerWins(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	var aErrs, bErrs errorLog
	no := false
	a, err := client.Dial(ctx, wsURL(base), &client.Options{Follow: true, OnConfirm: client.AgreeAll, OnEvent: aErrs.onEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v := a.View()
	// b declines: whichever answer was applied, both devices see it.
	b, err := client.Follow(ctx, wsURL(base), v.SessionID, v.FollowToken, &client.Options{OnEvent: bErrs.onEvent,
		OnConfirm: func(wsproto.UserConfirm) *client.Answer { return &client.Answer{Confirmed: &no} }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := a.Message(ctx, "Plan a trip"); err != nil {
		t.Fatal(err)
	}
	ended := func(v client.View) bool { return v.Run != nil && v.Phase == wsproto.PhaseIdle }
	av := waitView(t, ctx, a, "a's end", ended)
	bv := waitView(t, ctx, b, "b's end", func(v client.View) bool { return ended(v) && v.LastSeq >= av.LastSeq })
	av = waitView(t, ctx, a, "a at b's seq", func(v client.View) bool { return v.LastSeq >= bv.LastSeq })
	clean(t, av)
	clean(t, bv)
	if av.Checksum != bv.Checksum || finished(av) != finished(bv) {
		t.Errorf("a ended at %s (answered: %v), b at %s (answered: %v): want the same", av.Checksum, finished(av), bv.Checksum, finished(bv))
	}
	waitFor(t, "the second answer's reply", func() bool { return len(aErrs.codes())+len(bErrs.codes()) >= 1 })
	got := append(aErrs.codes(), bErrs.codes()...)
	if len(got) != 1 || got[0] != wsproto.CodeStepIDMismatch {
		t.Fatalf("system.errors %v: want exactly one step_id_mismatch, for the later answer", got)
	}
	// The loser is the one told; the winner's answer is what both saw.
	if len(aErrs.codes()) == 1 && finished(av) {
		t.Errorf("a was told its answer lost, yet the run went on as a's approval, not b's decline")
	}
	if len(bErrs.codes()) == 1 && !finished(av) {
		t.Errorf("b was told its answer lost, yet the run ended as b's decline, not a's approval")
	}
}

// waitFor polls cond until it holds, for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// TestFollowPlainResumeReplaces: a resume without follow replaces every
// connection attached, the followers included, with 4000.
func TestFollowPlainResumeReplaces(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	a, err := client.Dial(ctx, wsURL(base), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v := a.View()
	b, err := client.Follow(ctx, wsURL(base), v.SessionID, v.FollowToken, &client.Options{Resume: false})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	// The follow token cannot replace: only the session's resume token can.
	c, _ := connect(t, base)
	c.send(wsproto.EventUserReconnect, map[string]any{"session_id": v.SessionID, "resume_token": v.FollowToken, "last_seq": 0})
	c.expectError(wsproto.CodeResumeRejected)

	d, _ := connect(t, base)
	d.send(wsproto.EventUserReconnect, map[string]any{"session_id": v.SessionID, "resume_token": v.ResumeToken, "last_seq": 0})
	var m wsproto.Connected
	d.expectMeta(wsproto.EventConnected, &m)
	if !m.Resumed || m.Followers != 0 {
		t.Fatalf("plain resume answered %+v", m)
	}
	for name, cl := range map[string]*client.Client{"the first connection": a, "the follower": b} {
		select {
		case <-cl.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was not closed", name)
		}
		if code := websocket.CloseStatus(cl.Err()); code != wsproto.CloseSessionReplaced {
			t.Errorf("%s ended with %v, want 4000", name, cl.Err())
		}
	}
}

// TestFollowCap: with --max-followers 2 a third follow is refused with
// follow_limit and changes nothing: the two attached keep getting events,
// and the refused connection stays on its fresh session.
func TestFollowCap(t *testing.T) {
	base := startServer(t, "--max-followers", "2")
	ctx := context.Background()
	a, err := client.Dial(ctx, wsURL(base), &client.Options{Follow: true, OnConfirm: client.AgreeAll})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v := a.View()
	b, err := client.Follow(ctx, wsURL(base), v.SessionID, v.FollowToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := client.Follow(ctx, wsURL(base), v.SessionID, v.FollowToken, nil); !errors.Is(err, client.ErrFollowLimit) {
		t.Fatalf("a third follow: %v, want ErrFollowLimit", err)
	}
	c, fresh := connect(t, base)
	c.send(wsproto.EventUserReconnect, map[string]any{"session_id": v.SessionID, "resume_token": v.ResumeToken, "last_seq": 0, "follow": true})
	e := c.expectError(wsproto.CodeFollowLimit)
	if e.RefType != wsproto.EventUserReconnect {
		t.Errorf("follow_limit names %q, want the reconnect", e.RefType)
	}
	// Nothing changed: the resume token presented still resumes, and the
	// refused connection is still on its fresh session.
	c.message("Hello")
	if f := c.expect(wsproto.EventPlanStart); f.SessionID != fresh.SessionID {
		t.Errorf("the refused connection's run is in %s, want its fresh session %s", f.SessionID, fresh.SessionID)
	}
	if err := a.Message(ctx, "Plan a trip"); err != nil {
		t.Fatal(err)
	}
	av := waitView(t, ctx, a, "a's end", finished)
	bv := waitView(t, ctx, b, "b's end", func(v client.View) bool { return finished(v) && v.LastSeq >= av.LastSeq })
	sameEnd(t, av, bv)
}

// followRaw attaches a raw connection to a session as a follower having
// everything up to lastSeq, and returns it with the answer.
func followRaw(t *testing.T, base, sessionID, token string, lastSeq uint64) (*conn, wsproto.Connected) {
	t.Helper()
	c, _ := connect(t, base)
	c.send(wsproto.EventUserReconnect, map[string]any{"session_id": sessionID, "resume_token": token, "last_seq": lastSeq, "follow": true})
	var m wsproto.Connected
	c.expectMeta(wsproto.EventConnected, &m)
	if !m.Resumed {
		t.Fatalf("follow answered %+v", m)
	}
	return c, m
}

// TestFollowPruneWaitsForSlowest: a device that acks every event and a
// follower that acks none: the ring keeps every event for the follower,
// whose resume from seq 0 is a full replay, not a resync. Then the
// follower acks up to seq 5 and the other device leaves: the ring drops
// what every connection attached has acked, and a resume from seq 0 is a
// resync.
func TestFollowPruneWaitsForSlowest(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	a, err := client.Dial(ctx, wsURL(base), &client.Options{Follow: true, AckEvery: 1, OnConfirm: client.AgreeAll})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v := a.View()
	slow, _ := followRaw(t, base, v.SessionID, v.FollowToken, 0)
	if err := a.Message(ctx, "Plan a trip"); err != nil {
		t.Fatal(err)
	}
	av := waitView(t, ctx, a, "the run's end", finished)
	waitFor(t, "a's last ack", func() bool { return a.View().Stats.Events == int(av.LastSeq) })
	// An ack on a round trip: once answered, the server applied a's acks
	// before it (one connection's frames are applied in order).
	if err := a.Ack(ctx, av.LastSeq); err != nil {
		t.Fatal(err)
	}
	for f := slow.next(); f.Seq < av.LastSeq; f = slow.next() {
	}

	again, m := followRaw(t, base, v.SessionID, v.FollowToken, 0)
	if m.Resync || m.Replayed == nil || uint64(*m.Replayed) != av.LastSeq {
		t.Fatalf("the slow follower's resume from 0: %+v; want all %d events replayed", m, av.LastSeq)
	}
	again.ws.CloseNow()
	slow.send(wsproto.EventUserAck, map[string]any{"last_seq": 5})
	a.Close()
	// slow's ack, then a's leaving, pruned the ring to 5; the round trip
	// (an ack past the end is answered) shows slow's ack was applied.
	slow.send(wsproto.EventUserAck, map[string]any{"last_seq": av.LastSeq + 1})
	slow.expectError(wsproto.CodeInvalidAck)
	waitFor(t, "the ring pruned to seq 5", func() bool {
		c, _ := connect(t, base)
		defer c.ws.CloseNow()
		c.send(wsproto.EventUserReconnect, map[string]any{"session_id": v.SessionID, "resume_token": v.FollowToken, "last_seq": 0, "follow": true})
		var m wsproto.Connected
		c.expectMeta(wsproto.EventConnected, &m)
		return m.Resync
	})
	late, m := followRaw(t, base, v.SessionID, v.FollowToken, 5)
	if m.Resync || m.Replayed == nil || uint64(*m.Replayed) != av.LastSeq-5 {
		t.Fatalf("a resume from 5 after the prune: %+v; want the %d events after 5 replayed", m, av.LastSeq-5)
	}
	late.ws.CloseNow()
}

// TestFollowBehindRingResyncs: a follower away while more events than the
// ring holds are made resumes with a resync (its snapshot is the session's
// latest state), while the device that stayed has every event.
func TestFollowBehindRingResyncs(t *testing.T) {
	base := startServer(t, "--buffer-size", "16")
	ctx := context.Background()
	a, err := client.Dial(ctx, wsURL(base), &client.Options{Follow: true, AckEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v := a.View()
	if err := a.Message(ctx, "Plan a trip"); err != nil {
		t.Fatal(err)
	}
	// The run waits for the plan's confirmation while the phone comes and
	// goes: all that follows is made in its absence.
	pv := waitView(t, ctx, a, "the plan's confirmation", func(v client.View) bool { return v.Run != nil && len(v.Run.PendingConfirm) > 0 })
	phone, err := client.Follow(ctx, wsURL(base), v.SessionID, v.FollowToken, &client.Options{Resume: false, AckEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	left := waitView(t, ctx, phone, "the phone at the confirmation", func(v client.View) bool { return v.LastSeq >= pv.LastSeq }).LastSeq
	phone.Close()
	if err := a.Respond(ctx, pv.Run.PendingConfirm[0].StepID, *client.AgreeAll(pv.Run.PendingConfirm[0])); err != nil {
		t.Fatal(err)
	}
	av := waitView(t, ctx, a, "the run's end", finished)
	if av.LastSeq < left+17 {
		t.Fatalf("the run made %d events after the phone left; the test needs more than the ring's 16", av.LastSeq-left)
	}
	c, m := followRaw(t, base, v.SessionID, v.FollowToken, left)
	if !m.Resync {
		t.Fatalf("the phone's follow from seq %d, %d events behind a ring of 16: %+v, want a resync", left, av.LastSeq-left, m)
	}
	var snap wsproto.Snapshot
	c.expectMeta(wsproto.EventStateSnapshot, &snap)
	if snap.Seq != av.LastSeq || snap.StateChecksum != av.Checksum || snap.Run == nil || snap.Run.FinalAnswer == nil {
		t.Errorf("snapshot at seq %d (%s), want the session's %d (%s) with its final answer", snap.Seq, snap.StateChecksum, av.LastSeq, av.Checksum)
	}
	clean(t, av)
}

// TestClusterFollow: the laptop on node A (the session's owner) and the
// phone following on node B, each dropping and resuming with follow on
// the other node at its own moments: both end with every event once and
// the same state; the phone's acks reach the owner (a follow from seq 0
// after the run, with both acking, is a resync: the ring was pruned).
func TestClusterFollow(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()
	laptop := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{Follow: true, AckEvery: 2})
	v := laptop.View()
	if err := laptop.SolveTasks(ctx, slowTasks(3)); err != nil {
		t.Fatal(err)
	}
	phone, err := client.Follow(ctx, b.url(), v.SessionID, v.FollowToken,
		&client.Options{Resume: true, AckEvery: 2, Elsewhere: []string{a.url()}})
	if err != nil {
		t.Fatal(err)
	}
	defer phone.Close()
	waitView(t, ctx, phone, "the phone's first task", func(v client.View) bool { return v.Phase == wsproto.PhaseSolving })
	laptop.Drop() // resumes on B
	waitView(t, ctx, laptop, "the laptop's resume", func(v client.View) bool { return v.Stats.Resumes >= 1 })
	phone.Drop() // resumes on A
	waitView(t, ctx, phone, "the phone's resume", func(v client.View) bool { return v.Stats.Resumes >= 2 })

	l := waitView(t, ctx, laptop, "the laptop's end", finished)
	p := waitView(t, ctx, phone, "the phone's end", func(v client.View) bool { return finished(v) && v.LastSeq >= l.LastSeq })
	l = waitView(t, ctx, laptop, "the laptop at the phone's seq", func(v client.View) bool { return v.LastSeq >= p.LastSeq })
	sameEnd(t, l, p)
	// sameEnd checked neither was replaced (4000). On a loaded machine a
	// store or a forwarded command may be slow enough to close a
	// connection with 1012 (§12), which adds a resume: at least the
	// test's.
	if l.Stats.Resumes < 1 || p.Stats.Resumes < 2 {
		t.Errorf("resumes: laptop %d, phone %d; want at least 1 and 2", l.Stats.Resumes, p.Stats.Resumes)
	}
	if l.Stats.Errors > 0 || p.Stats.Errors > 0 {
		t.Errorf("errors: laptop %d, phone %d", l.Stats.Errors, p.Stats.Errors)
	}
}

// TestClusterFollowPrune: a follower on node B, which does not hold the
// session, holds the owner's ring back until it acks: the owner learns of
// it when it attaches and gets its acks forwarded.
func TestClusterFollowPrune(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	baseA, baseB := "http://"+a.addr, "http://"+b.addr
	ctx := context.Background()
	laptop, err := client.Dial(ctx, a.url(), &client.Options{Follow: true, AckEvery: 1, OnConfirm: client.AgreeAll})
	if err != nil {
		t.Fatal(err)
	}
	defer laptop.Close()
	v := laptop.View()
	phone, _ := followRaw(t, baseB, v.SessionID, v.FollowToken, 0)
	if err := laptop.SolveTasks(ctx, slowTasks(1)); err != nil {
		t.Fatal(err)
	}
	lv := waitView(t, ctx, laptop, "the run's end", finished)
	if err := laptop.Ack(ctx, lv.LastSeq); err != nil {
		t.Fatal(err)
	}
	for f := phone.next(); f.Seq < lv.LastSeq; f = phone.next() {
	}
	// The laptop's acks are applied (an ack past the end is answered after
	// them); the phone on B has acked nothing: a follow from 0 replays all.
	laptop.Close()
	c, m := followRaw(t, baseA, v.SessionID, v.FollowToken, 0)
	if m.Resync || m.Replayed == nil || uint64(*m.Replayed) != lv.LastSeq {
		t.Fatalf("a follow from 0 while B's follower acked nothing: %+v; want all %d events replayed", m, lv.LastSeq)
	}
	c.ws.CloseNow()
	// Once the phone acks through B, the owner drops what it acked.
	phone.send(wsproto.EventUserAck, map[string]any{"last_seq": lv.LastSeq})
	waitFor(t, "the ring pruned by B's follower's ack", func() bool {
		c, _ := connect(t, baseA)
		defer c.ws.CloseNow()
		c.send(wsproto.EventUserReconnect, map[string]any{"session_id": v.SessionID, "resume_token": v.FollowToken, "last_seq": 0, "follow": true})
		var m wsproto.Connected
		c.expectMeta(wsproto.EventConnected, &m)
		return m.Resync
	})
}
