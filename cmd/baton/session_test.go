package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// checksums returns c(n) for every n of a session's frames (index = seq).
func checksums(frames []client.Frame) []string {
	sums := []string{""}
	for _, f := range frames {
		if wsproto.Sequenced(f.Event) {
			sums = append(sums, buffer.NextChecksum(sums[len(sums)-1], f.EventID))
		}
	}
	return sums
}

// resume opens a new connection and sends user.reconnect_with_state. As a
// client keeps the newest resume token (each resume rotates it, §3.5), a
// token the session once had stands for the newest one a test connection
// has read (tokens.latest); any other token is sent as it is.
func resume(t *testing.T, base string, hello wsproto.Connected, lastSeq uint64, sum string) *conn {
	t.Helper()
	c, _ := connect(t, base)
	c.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
		"resume_token": tokens.latest(hello.SessionID, hello.ResumeToken), "last_seq": lastSeq, "state_checksum": sum})
	return c
}

// tokens are the resume tokens the test connections have read, by session.
var tokens = tokenBook{sessions: map[string]*sessionTokens{}}

type tokenBook struct {
	mu       sync.Mutex // guards sessions
	sessions map[string]*sessionTokens
}

type sessionTokens struct {
	had    map[string]bool
	newest string
}

// saw notes a system.connected's session and token.
func (b *tokenBook) saw(m wsproto.Connected) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sessions[m.SessionID]
	if s == nil {
		s = &sessionTokens{had: map[string]bool{}}
		b.sessions[m.SessionID] = s
	}
	s.had[m.ResumeToken], s.newest = true, m.ResumeToken
}

// latest is the session's newest token if token is one it had, else token.
func (b *tokenBook) latest(sessionID, token string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[sessionID]; s != nil && s.had[token] {
		return s.newest
	}
	return token
}

// solveAll runs tasks to the end and returns every frame of the run.
func solveAll(t *testing.T, c *conn, tasks []wsproto.Task) []client.Frame {
	t.Helper()
	c.send("user.solve_tasks", map[string]any{"tasks": tasks})
	return c.until(wsproto.EventFinalAnswer)
}

func TestAck(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}, {ID: "b", Title: "B"}})
	latest := frames[len(frames)-1].Seq
	sums := checksums(frames)

	c.send("user.ack", map[string]any{"last_seq": latest + 1})
	c.expectError("invalid_ack")
	c.send("user.ack", map[string]any{"last_seq": 5})
	c.send("user.ack", map[string]any{"last_seq": 3}) // smaller: a no-op, no reply
	c.send("user.ack", map[string]any{"last_seq": -1})
	c.expectError("invalid_message") // the first reply since invalid_ack: the acks got none

	// seq ≤ 5 is gone: resuming from 4 is a resync, from 5 a replay.
	r := resume(t, base, hello, 4, sums[4])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resync {
		t.Errorf("resume from a pruned seq: %+v, want resync", m)
	}
	r.expect(wsproto.EventStateSnapshot)
	r = resume(t, base, hello, 5, sums[5])
	m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
	if m.Resync || m.Replayed == nil || uint64(*m.Replayed) != latest-5 || m.LastSeq != latest || m.StateChecksum != sums[latest] {
		t.Errorf("resume from the acked seq: %+v", m)
	}
	for seq := uint64(6); seq <= latest; seq++ {
		if f := r.next(); f.Seq != seq || f.EventID != frames[seq-1].EventID {
			t.Fatalf("replayed seq %d (%s), want %d", f.Seq, f.Event, seq)
		}
	}
}

// TestResumeWhileProducing drops and resumes a client many times while the
// run keeps producing events: the session's whole stream must stay
// contiguous, with no duplicate delivered, and end in a final answer.
func TestResumeWhileProducing(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 30 {
		t.Run(fmt.Sprint(iter), func(t *testing.T) {
			log := &frameLog{}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl, err := client.Dial(ctx, wsURL(base), &client.Options{Resume: true, ResumeDelay: time.Millisecond, OnEvent: log.add})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			tasks := []wsproto.Task{sleepTask("a", "9ms"), sleepTask("b", "6ms"), sleepTask("c", "3ms", "a"),
				sleepTask("d", "6ms", "b", "c"), sleepTask("e", "3ms", "d")}
			if err := cl.SolveTasks(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			// Drop at random points: after a random number of new events.
			for drops := 0; drops < 4; drops++ {
				at := cl.View().LastSeq + uint64(1+rng.IntN(6))
				finished := func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }
				if err := cl.Wait(ctx, func(v client.View) bool { return v.LastSeq >= at || finished(v) }); err != nil {
					t.Fatal(err)
				}
				if finished(cl.View()) {
					break
				}
				cl.Drop()
			}
			if err := cl.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
				t.Fatalf("no final answer: %v (view %+v)", err, cl.View())
			}
			v := cl.View()
			if len(v.Stats.Violations) > 0 {
				t.Fatalf("violations: %v", v.Stats.Violations)
			}
			var seqd []client.Frame
			for _, f := range log.all() {
				if wsproto.Sequenced(f.Event) {
					seqd = append(seqd, f)
				}
				if f.Event == wsproto.EventConnected {
					m := meta[wsproto.Connected](t, f)
					if m.Resumed && (m.Resync || m.Replayed == nil) {
						t.Errorf("resume within the ring answered %+v, want a replay", m)
					}
				}
			}
			checkStream(t, seqd, 1)
			if v.Stats.Resumes == 0 && iter == 0 {
				t.Errorf("no resume happened")
			}
		})
	}
}

// TestReplayCountsAndChecksum checks system.connected's numbers on a replay.
func TestReplayCountsAndChecksum(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}})
	sums := checksums(frames)
	latest := uint64(len(sums) - 1)
	token := hello.ResumeToken
	for _, from := range []uint64{0, 3, latest} {
		r := resume(t, base, hello, from, sums[from])
		m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
		if !m.Resumed || m.Resync || *m.Replayed != int(latest-from) || m.LastSeq != latest ||
			m.StateChecksum != sums[latest] || m.SessionID != hello.SessionID || m.ResumeToken == token || m.ResumeToken == "" {
			t.Errorf("from %d: %+v (a new resume token after %s)", from, m, token)
		}
		token = m.ResumeToken
		for seq := from + 1; seq <= latest; seq++ {
			if f := r.next(); f.Seq != seq {
				t.Fatalf("from %d: got seq %d, want %d", from, f.Seq, seq)
			}
		}
	}
}

// TestResync: a gap (events evicted from a small ring), a checksum
// mismatch and a last_seq ahead of the server each get a snapshot equal to
// the state of a client that saw every event, and applying it and then the
// live events ends in the same state as applying every event.
//
// The run stops on a question before the resume, so the first connection
// holds every event up to the snapshot: the reference never needs the
// server's ring, which in the gap case has lost the start.
func TestResync(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		from func(sums []string) (uint64, string)
	}{
		{"gap", []string{"--buffer-size", "8"}, func(sums []string) (uint64, string) { return 1, sums[1] }},
		{"checksum mismatch", nil, func(sums []string) (uint64, string) { return 3, "not-the-checksum" }},
		{"ahead of the server", nil, func(sums []string) (uint64, string) { return 1 << 40, "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, tt.args...)
			c, hello := connect(t, base)
			sent := []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}, {ID: "b", Title: "B", DependsOn: []string{}},
				{ID: "ask", Title: "Ask", Description: "[sim:ask=Which one?]", DependsOn: []string{"a", "b"}},
				{ID: "end", Title: "End", DependsOn: []string{"ask"}}}
			c.send("user.solve_tasks", map[string]any{"tasks": sent})
			early := c.until(wsproto.EventUserConfirm) // then nothing until the answer
			question := meta[wsproto.UserConfirm](t, early[len(early)-1])
			sums := checksums(early)
			latest := uint64(len(sums) - 1)
			// The reference is the client that sent the tasks and saw every
			// event: no event carries a user.solve_tasks list, it knows it.
			var ref wsproto.State
			apply := func(st *wsproto.State, frames []client.Frame) {
				for _, f := range frames {
					if !wsproto.Sequenced(f.Event) {
						continue
					}
					if st.Run == nil && f.Event == wsproto.EventSolverStart {
						st.BeginSolving(meta[wsproto.SolverStart](t, f).RunID, "", sent)
					}
					if err := st.ApplyJSON(f.Event, f.Metadata); err != nil {
						t.Fatalf("apply %s: %v", f.Event, err)
					}
				}
			}
			apply(&ref, early)

			from, sum := tt.from(sums)
			r := resume(t, base, hello, from, sum)
			m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
			if !m.Resumed || !m.Resync || m.Replayed == nil || *m.Replayed != 0 {
				t.Fatalf("system.connected %+v, want a resync", m)
			}
			snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
			if snap.Seq != m.LastSeq || snap.StateChecksum != m.StateChecksum || snap.Run == nil {
				t.Fatalf("snapshot %+v vs connected %+v", snap, m)
			}
			if snap.Seq != latest || snap.StateChecksum != sums[latest] {
				t.Fatalf("snapshot at seq %d (%s), want the question's seq %d (%s)", snap.Seq, snap.StateChecksum, latest, sums[latest])
			}
			if c.closeCode() != 4000 {
				t.Errorf("the replaced connection was not closed with 4000")
			}
			same := func(when string, got, want wsproto.State) {
				t.Helper()
				g, _ := json.Marshal(got.Snapshot(0, ""))
				w, _ := json.Marshal(want.Snapshot(0, ""))
				if string(g) != string(w) {
					t.Errorf("%s: state from the snapshot:\n%s\nfrom every event:\n%s", when, g, w)
				}
			}
			state := wsproto.State{Phase: snap.Phase, Run: snap.Run}
			same("at the snapshot", state, ref)

			// Answer from the new connection; both clients record it.
			r.respond(question.StepID, map[string]any{"text": "the first"})
			state.Answer(question.StepID, "the first")
			ref.Answer(question.StepID, "the first")
			live := r.until(wsproto.EventFinalAnswer)
			checkStream(t, live, snap.Seq+1)
			sumAfter := snap.StateChecksum
			for _, f := range live {
				sumAfter = buffer.NextChecksum(sumAfter, f.EventID)
			}
			apply(&state, live)
			apply(&ref, live)
			same("at the end", state, ref)

			// The server agrees with the chain: resuming at the end with it
			// is a replay of nothing.
			end := resume(t, base, hello, live[len(live)-1].Seq, sumAfter)
			if em := meta[wsproto.Connected](t, end.expect(wsproto.EventConnected)); em.Resync || *em.Replayed != 0 {
				t.Errorf("resume with the checksum after snapshot + live: %+v, want a replay of nothing", em)
			}
		})
	}
}

func TestResumeRejected(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	_, hello := connect(t, base)
	shape := func(f client.Frame) string {
		var m map[string]any
		json.Unmarshal(f.Metadata, &m)
		b, _ := json.Marshal(map[string]any{"event": f.Event, "content": f.Content, "metadata": m})
		return string(b)
	}
	unknown := resume(t, base, wsproto.Connected{SessionID: "sess_nope", ResumeToken: hello.ResumeToken}, 0, "")
	e1 := unknown.expect(wsproto.EventError)
	wrong := resume(t, base, wsproto.Connected{SessionID: hello.SessionID, ResumeToken: "guess"}, 0, "")
	e2 := wrong.expect(wsproto.EventError)
	if meta[wsproto.Error](t, e1).Code != "resume_rejected" || shape(e1) != shape(e2) {
		t.Errorf("rejections differ or are wrong:\n%s\n%s", shape(e1), shape(e2))
	}
	// The connection stays on its fresh session and works.
	wrong.message("still here")
	wrong.expect(wsproto.EventPlanStart)
}

func TestReconnectMustBeFirst(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	_, hello := connect(t, base)
	c, _ := connect(t, base)
	c.send("user.ack", map[string]any{"last_seq": 0})
	c.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
		"resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""})
	c.expectError("invalid_state")
}

func TestSessionTTL(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--session-ttl", "100ms")
	c, hello := connect(t, base)
	if n := health(t, base); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
	c.ws.Close(websocket.StatusNormalClosure, "")
	eventually(t, "the session to expire", func() bool { return health(t, base) == 0 })
	r := resume(t, base, hello, 0, "")
	r.expectError("resume_rejected")
}

// TestRingOverflow: with capacity B and more than B events, replay of
// exactly B works and one more back is a resync.
func TestRingOverflow(t *testing.T) {
	t.Parallel()
	const size = 16
	base := startServer(t, "--buffer-size", fmt.Sprint(size))
	c, hello := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}, {ID: "b", Title: "B"}, {ID: "c", Title: "C", DependsOn: []string{"a"}}})
	latest := uint64(len(frames))
	if latest <= size+1 {
		t.Fatalf("only %d events", latest)
	}
	sums := checksums(frames)
	r := resume(t, base, hello, latest-size, sums[latest-size])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); m.Resync || *m.Replayed != size {
		t.Fatalf("resume from latest−B: %+v", m)
	}
	for i := range uint64(size) {
		if f := r.next(); f.Seq != latest-size+1+i {
			t.Fatalf("replayed %d", f.Seq)
		}
	}
	r = resume(t, base, hello, latest-size-1, sums[latest-size-1])
	if m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected)); !m.Resync {
		t.Fatalf("resume from latest−B−1: %+v, want resync", m)
	}
	r.expect(wsproto.EventStateSnapshot)
}

func TestSnapshotShape(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	_, confirm := runToConfirm(t, c, "Check the snapshot")
	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	if snap.Phase != wsproto.PhaseAwaitingConfirm || snap.Run == nil || len(snap.Run.PendingConfirm) != 1 ||
		snap.Run.PendingConfirm[0].StepID != confirm.StepID || snap.Run.FinalAnswer != nil ||
		!reflect.DeepEqual(len(snap.Run.Tasks), len(confirm.Tasks)) || snap.Run.Request != "Check the snapshot" {
		t.Fatalf("snapshot %+v", snap)
	}
	for _, task := range snap.Run.Tasks {
		if task.Status != wsproto.TaskPending {
			t.Errorf("task %s %s", task.ID, task.Status)
		}
	}
	// The confirmation can be answered from the new connection.
	r.respond(confirm.StepID, map[string]any{"confirmed": true})
	r.until(wsproto.EventFinalAnswer)
}
