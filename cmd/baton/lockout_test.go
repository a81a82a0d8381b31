package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// floodResult is what a connect/close flood did.
type floodResult struct {
	upgraded, refused int
	took              time.Duration
}

// connectFlood opens n connections authenticated by token, workers at a
// time, reads each one's system.connected and drops it: the attack of a
// client that connects and goes away without using its session. A
// refused upgrade is counted, not an error.
func connectFlood(ctx context.Context, base, token string, n, workers int) (floodResult, error) {
	var next, upgraded, refused atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	opts := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				ws, resp, err := websocket.Dial(ctx, wsURL(base), opts)
				if err != nil {
					if resp != nil {
						refused.Add(1)
						continue
					}
					errs <- err
					return
				}
				_, _, err = ws.Read(ctx) // system.connected: the session is made
				ws.CloseNow()
				if err != nil {
					errs <- err
					return
				}
				upgraded.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	r := floodResult{upgraded: int(upgraded.Load()), refused: int(refused.Load()), took: time.Since(start)}
	return r, errors.Join(<-errs)
}

// sessionsNow is /healthz's session count, for a goroutine that may not
// fail the test.
func sessionsNow(base string) (int, error) {
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var h healthReport
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h.Sessions, err
}

// TestConnectFloodLocksNoOneOut is issue 23's lockout: one subject opens
// and drops connections as fast as it can, four times as many as the
// server may hold sessions. (The 10,000 against the default
// --max-sessions of 10,000 takes a minute under -race on a busy 2-core
// machine; scaled down, the attack is the same.) The subject's sessions
// never exceed its cap (--max-sessions-per-subject, 50 by default) and
// are freed --idle-session-ttl after it went, so the server's count is
// back to normal within seconds; meanwhile another subject resumes the
// session it had before the flood, with every event, and a new connection
// of its starts a run and completes it.
func TestConnectFloodLocksNoOneOut(t *testing.T) {
	t.Parallel()
	const (
		maxSessions = 500
		flood       = 4 * maxSessions
		workers     = 32
		idleTTL     = 2 * time.Second
		perSub      = 50 // the default --max-sessions-per-subject
		recovery    = 15 * time.Second
	)
	base := startServer(t, append(twoSubjects, "--max-sessions", strconv.Itoa(maxSessions),
		"--idle-session-ttl", idleTTL.String())...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Bob's session from before the flood: a run to its end, then he goes.
	before, hello := connectAs(t, base, bobToken)
	frames := solveAll(t, before, []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}})
	last := frames[len(frames)-1].Seq
	before.ws.Close(websocket.StatusNormalClosure, "")
	eventually(t, "bob's connection to be closed", func() bool { return healthz(t, base).Connections == 0 })
	baseline := health(t, base)

	// The flood, with the server's session count watched meanwhile.
	var peak atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n, err := sessionsNow(base); err == nil && int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	r, err := connectFlood(ctx, base, aliceToken, flood, workers)
	close(stop)
	<-watched
	if err != nil {
		t.Fatalf("flood: %v (%d upgraded, %d refused)", err, r.upgraded, r.refused)
	}
	floodEnd := time.Now()
	t.Logf("flood: %d connections in %v (%.0f/s), %d refused; sessions: %d before, %d at the peak seen",
		flood, r.took.Round(time.Millisecond), float64(flood)/r.took.Seconds(), r.refused, baseline, peak.Load())
	if r.upgraded != flood {
		t.Errorf("%d of the flood's %d upgrades refused: a client over its cap is upgraded, to resume", r.refused, flood)
	}
	if p := peak.Load(); p > int64(baseline+perSub) {
		t.Errorf("%d sessions at the flood's peak, over bob's %d and alice's cap of %d", p, baseline, perSub)
	}

	// Right after the flood, while alice's last sessions are still held:
	// bob resumes his session from before, with every event, and a new
	// connection of his starts a run and completes it.
	r2, _ := connectAs(t, base, bobToken)
	r2.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
		"resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""})
	if m := meta[wsproto.Connected](t, r2.expect(wsproto.EventConnected)); !m.Resumed || m.Resync || m.LastSeq != last {
		t.Fatalf("bob's resume after the flood: %+v, want a replay up to %d", m, last)
	}
	fresh, _ := connectAs(t, base, bobToken)
	solveAll(t, fresh, []wsproto.Task{{ID: "b", Title: "B", DependsOn: []string{}}})

	// The count is back to bob's sessions within seconds: alice's are gone.
	want := baseline + 1 // bob's new one, which has a run
	deadline := floodEnd.Add(recovery)
	for health(t, base) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions %v after the flood, want %d", health(t, base), recovery, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("sessions back to %d %v after the flood ended (--idle-session-ttl %v)", want,
		time.Since(floodEnd).Round(10*time.Millisecond), idleTTL)
}

// TestClusterSessionCaps: with --store redis, a node at its --max-sessions
// still serves a resume of a session another node owns, and still takes
// a dead node's run over; an unused session is deleted from Redis
// --idle-session-ttl after its connection left, and its resume is then
// rejected; connections beyond the cap leave nothing in Redis.
func TestClusterSessionCaps(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL(), "--idle-session-ttl", "1s")
	b := startNode(t, "B", "127.0.0.1:0", rds.URL(), "--idle-session-ttl", "1s", "--max-sessions", "1")
	ctx := context.Background()
	rdb := rds.Client(t)
	stored := func(id string) bool { return rdb.Exists(ctx, "baton:{"+id+"}:meta").Val() == 1 }

	held, _ := connect(t, "http://"+b.addr) // B's one session, kept
	cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll})
	if err := cl.SolveTasks(ctx, slowTasks(3)); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cl, "the run's first event", func(v client.View) bool { return v.LastSeq > 0 })
	cl.Drop()
	waitView(t, ctx, cl, "a resume on B, which is full", func(v client.View) bool { return v.Stats.Resumes == 1 })
	eventually(t, "B to log the resume from the store", func() bool {
		return strings.Contains(b.log.String(), "session resumed from the store")
	})

	// An unused session on A: in Redis once its connection has stayed
	// silent a second (where another node's follow finds it), gone from
	// there within seconds of its connection, and its resume rejected.
	idle, hello := connect(t, "http://"+a.addr)
	eventually(t, "the silent connection's session to be recorded in Redis", func() bool { return stored(hello.SessionID) })
	idle.ws.CloseNow()
	eventually(t, "the unused session to be deleted from Redis", func() bool { return !stored(hello.SessionID) })
	r := resume(t, "http://"+a.addr, hello, 0, "")
	r.expectError(wsproto.CodeResumeRejected)

	// Connections beyond B's cap record nothing.
	before := rdb.Keys(ctx, "baton:{*}:meta").Val()
	for range 20 {
		c, _ := connect(t, "http://"+b.addr)
		c.ws.CloseNow()
	}
	if after := rdb.Keys(ctx, "baton:{*}:meta").Val(); len(after) != len(before) {
		t.Errorf("sessions in Redis: %d before connections beyond B's cap, %d after", len(before), len(after))
	}

	// A dies mid-run: B, full, takes the run over all the same.
	a.kill(t)
	v := waitView(t, ctx, cl, "the final answer", finished)
	clean(t, v)
	eventually(t, "B to log the takeover", func() bool { return strings.Contains(b.log.String(), "session taken over") })
	held.ws.Close(websocket.StatusNormalClosure, "")
}
