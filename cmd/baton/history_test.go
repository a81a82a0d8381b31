package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// The conversation tests: each run of a session sees the runs before it,
// and the session's history survives a reload (a new connection's
// snapshot) and a takeover (the Redis checkpoint).

var conversation = []string{"Plan a weekend in Lisbon", "Now make it cheaper", "And add a day trip"}

// quoted is how the simulated models quote earlier requests (sim.Earlier).
func quoted(requests ...string) string {
	q := make([]string, len(requests))
	for i, r := range requests {
		q[i] = fmt.Sprintf("%q", r)
	}
	return "(following " + strings.Join(q, "; ") + ")"
}

// converse sends request and waits for its run's final answer.
func converse(t *testing.T, ctx context.Context, cl *client.Client, request string) client.View {
	t.Helper()
	before := cl.View()
	if err := cl.Message(ctx, request); err != nil {
		t.Fatal(err)
	}
	return waitView(t, ctx, cl, "the answer to "+request, func(v client.View) bool {
		return finished(v) && v.Run.Request == request && (before.Run == nil || v.Run.RunID != before.Run.RunID)
	})
}

// checkHistory fails t unless history is the runs of these requests with
// these answers, in order, each succeeded and with its end time.
func checkHistory(t *testing.T, where string, history []wsproto.HistoryEntry, requests, answers []string) {
	t.Helper()
	if len(history) != len(requests) {
		t.Fatalf("%s: %d history entries, want %d: %+v", where, len(history), len(requests), history)
	}
	for i, h := range history {
		if h.Request != requests[i] || h.Status != wsproto.StatusSucceeded || h.EndedAt.IsZero() || h.RunID == "" ||
			(answers != nil && h.Answer != answers[i]) {
			t.Errorf("%s: entry %d is %+v, want request %q, its answer, succeeded, an end time", where, i, h, requests[i])
		}
	}
}

// resyncSnapshot opens a new connection to base and resumes the session
// with a checksum that cannot match, as a reloaded page whose state is
// gone would: the answer is a snapshot, returned with system.connected.
func resyncSnapshot(t *testing.T, base, session, token string, lastSeq uint64) (wsproto.Connected, wsproto.Snapshot) {
	t.Helper()
	c, _ := connect(t, base)
	c.send(wsproto.EventUserReconnect, map[string]any{"session_id": session, "resume_token": token,
		"last_seq": lastSeq, "state_checksum": strings.Repeat("0", 64)})
	var hello wsproto.Connected
	c.expectMeta(wsproto.EventConnected, &hello)
	if !hello.Resync {
		t.Fatalf("the resume was not answered with a resync: %+v", hello)
	}
	var snap wsproto.Snapshot
	c.expectMeta(wsproto.EventStateSnapshot, &snap)
	return hello, snap
}

// TestConversation: three runs in one session; the second's plan summary
// and answer quote the first request, the third's the first two, and the
// answer is fed back in the agent loop too (the simulated tasks count the
// earlier runs they were shown). The client's history, made from the
// runs' end events, has the three, and so has the snapshot a reloaded
// client gets — which the Go client folds into the same view.
func TestConversation(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{AckEvery: 100, OnConfirm: client.AgreeAll})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var answers []string
	for i, req := range conversation {
		v := converse(t, ctx, cl, req)
		want := ""
		if i > 0 {
			want = " " + quoted(conversation[:i]...)
		}
		if !strings.HasPrefix(*v.Run.FinalAnswer, fmt.Sprintf("Answer to %q%s:", req, want)) {
			t.Errorf("answer %d: %q, want it to begin with Answer to %q%s", i+1, *v.Run.FinalAnswer, req, want)
		}
		if !strings.HasSuffix(v.Run.PlanSummary, fmt.Sprintf("%q%s", req, want)) {
			t.Errorf("plan summary %d: %q, want it to end with %q%s", i+1, v.Run.PlanSummary, req, want)
		}
		if in := fmt.Sprintf("(with %d earlier runs in view)", i); i > 0 && !strings.Contains(v.Run.Tasks[0].Result, in) {
			t.Errorf("run %d: task result %q does not say %q: the agent loop did not get the earlier runs", i+1, v.Run.Tasks[0].Result, in)
		}
		answers = append(answers, *v.Run.FinalAnswer)
		checkHistory(t, fmt.Sprintf("the client's view after run %d", i+1), v.History, conversation[:i+1], answers)
	}
	v := cl.View()
	clean(t, v)
	cl.Close()

	// A reload: a new connection resumes the session; its snapshot holds
	// the whole history.
	hello, snap := resyncSnapshot(t, base, v.SessionID, v.ResumeToken, v.LastSeq)
	if hello.HistoryLimit != 10 {
		t.Errorf("history_limit %d, want the default 10", hello.HistoryLimit)
	}
	checkHistory(t, "the snapshot after a reload", snap.History, conversation, answers)
	if b, err := json.Marshal(snap.History); err == nil { // what history costs a snapshot, for docs/protocol.md
		t.Logf("the snapshot's history: %d bytes for %d runs", len(b), len(snap.History))
	}
}

// TestConversationBounds: --history-runs bounds the history the
// session keeps, and so the snapshot; --history-budget bounds what the
// models see, the oldest runs first: with room for one earlier run, the
// third answer quotes the second request only.
func TestConversationBounds(t *testing.T) {
	// The simulated runs' requests and answers come to 393 and 356 bytes
	// (logged below): 500 holds the second and not both.
	base := startServer(t, "--history-runs", "2", "--history-budget", "500")
	ctx := context.Background()
	var errs frameLog
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{AckEvery: 100, OnConfirm: client.AgreeAll, OnEvent: func(f client.Frame) {
		if f.Event == wsproto.EventError {
			errs.add(f)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var answers []string
	for _, req := range conversation {
		answers = append(answers, *converse(t, ctx, cl, req).Run.FinalAnswer)
	}
	for i, a := range answers {
		t.Logf("run %d: %d bytes", i+1, len(conversation[i])+len(a))
	}
	if a, want := answers[2], quoted(conversation[1]); !strings.Contains(a, want+":") {
		t.Errorf("third answer %q, want it to quote the second request alone: %s", a, want)
	}
	v := cl.View()
	for _, f := range errs.all() {
		t.Errorf("system.error: %s", f.Metadata)
	}
	checkHistory(t, "the client's view", v.History, conversation[1:], answers[1:])
	cl.Close()
	hello, snap := resyncSnapshot(t, base, v.SessionID, v.ResumeToken, v.LastSeq)
	if hello.HistoryLimit != 2 {
		t.Errorf("history_limit %d, want 2", hello.HistoryLimit)
	}
	checkHistory(t, "the snapshot", snap.History, conversation[1:], answers[1:])
}

// TestConversationTakeover: two runs end on A; the third waits for its
// plan's confirmation when A is killed (SIGKILL). B takes the session
// over from Redis: the client resumes there, confirms, and B's aggregator
// — which knows the first two runs only from the checkpoint — quotes both
// requests; a reloaded client gets all three from B's snapshot.
func TestConversationTakeover(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	ctx := context.Background()

	// Plans are confirmed at once, until hold is set: then the third's
	// waits, for the kill.
	var mu sync.Mutex
	hold := false
	cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3,
		OnConfirm: func(c wsproto.UserConfirm) *client.Answer {
			mu.Lock()
			defer mu.Unlock()
			if hold && c.Kind == wsproto.ConfirmPlan {
				return nil
			}
			return client.AgreeAll(c)
		}})
	var answers []string
	for _, req := range conversation[:2] {
		answers = append(answers, *converse(t, ctx, cl, req).Run.FinalAnswer)
	}
	mu.Lock()
	hold = true
	mu.Unlock()
	if err := cl.Message(ctx, conversation[2]); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, ctx, cl, "the third plan's confirmation", func(v client.View) bool {
		return v.Run != nil && v.Run.Request == conversation[2] && len(v.Run.PendingConfirm) == 1
	})
	stepID := v.Run.PendingConfirm[0].StepID
	a.kill(t)
	waitView(t, ctx, cl, "a resume on B", func(v client.View) bool { return v.Stats.Resumes >= 1 })
	yes := true
	if err := cl.Respond(ctx, stepID, client.Answer{Confirmed: &yes}); err != nil {
		t.Fatal(err)
	}
	v = waitView(t, ctx, cl, "the third answer, from B", func(v client.View) bool {
		return finished(v) && v.Run.Request == conversation[2]
	})
	clean(t, v)
	if !strings.Contains(b.log.String(), "session taken over") {
		t.Errorf("B did not take the session over")
	}
	third := *v.Run.FinalAnswer
	if want := fmt.Sprintf("Answer to %q %s:", conversation[2], quoted(conversation[:2]...)); !strings.HasPrefix(third, want) {
		t.Errorf("third answer %q, want it to begin with %s", third, want)
	}
	answers = append(answers, third)
	checkHistory(t, "the client's view", v.History, conversation, answers)
	cl.Close()

	_, snap := resyncSnapshot(t, "http://"+b.addr, v.SessionID, v.ResumeToken, v.LastSeq)
	checkHistory(t, "B's snapshot", snap.History, conversation, answers)
}
