package orchestrator

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// scenario is a run that loses its server at a chosen moment.
type scenario struct {
	name string
	// start begins the run on server A; act, if set, then does what the
	// client does there (it may wait for events with f.waitFor).
	start func(ctx context.Context, c *client.Client) error
	act   func(ctx context.Context, f *failover, c *client.Client) error
	// freeze picks the unit after which A dies.
	freeze func(unit []buffer.Entry, cp *checkpoint) bool
	// kind is the confirmation left open on A, answered on B with answer
	// and the step_id A gave it — unless answerOnA (A takes the answer,
	// and dies before acting on it) or noAnswer (nobody answers it).
	kind      string
	answer    client.Answer
	answerOnA bool
	noAnswer  bool
	// onA answers the confirmations on A other than kind's, when the
	// default (confirm, retry, approve, any text) does not fit.
	onA func(c *client.Client, uc wsproto.UserConfirm) *client.Answer
	// confirmTimeout is A's and B's, when not the default.
	confirmTimeout time.Duration
	// ended says the run is over, when it does not end with a final
	// answer.
	ended func(f *failover) bool
	check func(t *testing.T, f *failover)
}

// failover is what a test of a takeover sees.
type failover struct {
	frozen    *checkpoint // what B started from
	frozenSeq uint64      // the latest seq the store had
	final     client.View
	a, b      *node
	target    string // the step_id of the confirmation left open, if any

	mu     sync.Mutex     // guards events
	events []client.Frame // every sequenced event the client applied
}

func (f *failover) record(fr client.Frame) {
	if fr.Seq != 0 {
		f.mu.Lock()
		f.events = append(f.events, fr)
		f.mu.Unlock()
	}
}

func (f *failover) seen() []client.Frame {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// has reports whether the client has applied an event of this type whose
// metadata passes match (nil: any).
func (f *failover) has(event string, match func(meta any) bool) bool {
	return slices.ContainsFunc(f.seen(), func(e client.Frame) bool { return is(e, event, match) })
}

func is(e client.Frame, event string, match func(meta any) bool) bool {
	if e.Event != event {
		return false
	}
	m, err := e.Meta()
	return err == nil && (match == nil || match(m))
}

// waitFor waits until the client has applied an event like has's.
func (f *failover) waitFor(ctx context.Context, c *client.Client, event string, match func(meta any) bool) error {
	return c.Wait(ctx, func(client.View) bool { return f.has(event, match) })
}

// completed returns the last solver.completed of a task, nil if none.
func (f *failover) completed(id string) *wsproto.SolverCompleted {
	var last *wsproto.SolverCompleted
	for _, e := range f.seen() {
		if is(e, wsproto.EventSolverCompleted, func(m any) bool { return m.(*wsproto.SolverCompleted).TaskID == id }) {
			m, _ := e.Meta()
			last = m.(*wsproto.SolverCompleted)
		}
	}
	return last
}

// result is a task's result, "" when it did not complete.
func (f *failover) result(id string) string {
	if c := f.completed(id); c != nil {
		return c.Result
	}
	return ""
}

// onB returns the events the server that took over emitted.
func (f *failover) onB() []client.Frame {
	return slices.DeleteFunc(f.seen(), func(e client.Frame) bool { return e.Seq <= f.frozenSeq })
}

// defaultAnswer answers every kind of confirmation so that runs go on.
func defaultAnswer(uc wsproto.UserConfirm) *client.Answer {
	switch uc.Kind {
	case wsproto.ConfirmPlan, wsproto.ConfirmAdjust:
		return &client.Answer{Confirmed: yes()}
	case wsproto.ConfirmTaskFailed:
		return &client.Answer{Action: "retry"}
	case wsproto.ConfirmTool:
		return &client.Answer{Approved: yes()}
	}
	return &client.Answer{Text: text("anything")}
}

// runFailover runs sc's request on server A until sc.freeze says A dies,
// restores the session on server B from A's store alone, and lets the
// client resume there (through the same address) until the run is over.
func runFailover(t *testing.T, sc scenario) *failover {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	f := &failover{a: newNode(true), b: newNode(false)}
	opts := func(n *node, newRing func(int) buffer.Ring) *Options {
		return &Options{Logger: quiet(), RetryBase: time.Millisecond, NewRing: newRing,
			ConfirmTimeout: sc.confirmTimeout, Loop: solver.Loop{Tools: n.tools()}}
	}

	// Server A: the first session's ring writes to st, which freezes —
	// and A's models stop — after the unit sc.freeze picks.
	var stores sync.Mutex // guards st
	var st *store
	srvA, err := New(f.a.models(), opts(f.a, func(n int) buffer.Ring {
		stores.Lock()
		defer stores.Unlock()
		s := newStore(nil)
		if st == nil {
			s = newStore(func(unit []buffer.Entry, cp *checkpoint) bool {
				if sc.freeze(unit, cp) {
					f.a.kill()
					return true
				}
				return false
			})
			st = s
		}
		return &durRing{Memory: buffer.NewMemory(n), st: s}
	}))
	if err != nil {
		t.Fatal(err)
	}
	fr := &front{}
	fr.set(srvA)
	hs := httptest.NewServer(fr)
	defer hs.Close()

	var onB atomic.Bool
	var amu sync.Mutex // guards answered
	answered := map[string]bool{}
	var c *client.Client
	respond := func(uc wsproto.UserConfirm) *client.Answer {
		if uc.Kind != sc.kind {
			if !onB.Load() && sc.onA != nil {
				return sc.onA(c, uc)
			}
			return defaultAnswer(uc)
		}
		amu.Lock()
		defer amu.Unlock()
		if sc.noAnswer || (!onB.Load() && !sc.answerOnA) || answered[uc.StepID] {
			return nil
		}
		answered[uc.StepID] = true
		return &sc.answer
	}
	c, err = client.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), &client.Options{
		Resume: true, ResumeDelay: 10 * time.Millisecond, OnConfirm: respond, OnEvent: f.record})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := sc.start(ctx, c); err != nil {
		t.Fatal(err)
	}
	if sc.act != nil {
		if err := sc.act(ctx, f, c); err != nil {
			t.Fatal(err)
		}
	}

	// A dies.
	stores.Lock()
	dying := st
	stores.Unlock()
	select {
	case <-dying.froze:
	case <-ctx.Done():
		t.Fatal("the moment to kill the server never came")
	}
	fr.set(nil)
	if err := srvA.Close(ctx); err != nil {
		t.Fatalf("close A: %v", err)
	}

	// B takes over from the store alone.
	entries, cp, tail := dying.contents()
	if err := json.Unmarshal(cp, &f.frozen); err != nil {
		t.Fatal(err)
	}
	f.frozenSeq = uint64(len(entries))
	ring, err := rebuild(entries, buffer.DefaultCapacity)
	if err != nil {
		t.Fatal(err)
	}
	srvB, err := New(f.b.models(), opts(f.b, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer srvB.Close(context.Background())
	v := c.View()
	if err := srvB.Restore(ctx, v.SessionID, v.ResumeToken, ring, cp, tail); err != nil {
		t.Fatalf("restore: %v", err)
	}
	onB.Store(true)
	fr.set(srvB)

	// The confirmation left open is answered on B with its step_id: by
	// the client if B asks it again (a task's question, when the task
	// gets back to it), else by the test.
	if sc.kind != "" && !sc.answerOnA {
		if f.target = openStep(f.frozen, sc.kind); f.target == "" {
			t.Fatalf("no %s open in the checkpoint", sc.kind)
		}
	}
	if f.target != "" && !sc.noAnswer {
		if err := c.Wait(ctx, func(v client.View) bool { return v.Stats.Resumes > 0 }); err != nil {
			t.Fatal(err)
		}
		amu.Lock()
		mine := !answered[f.target]
		answered[f.target] = true
		amu.Unlock()
		if mine {
			if err := c.Respond(ctx, f.target, sc.answer); err != nil {
				t.Fatal(err)
			}
		}
	}
	ended := func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }
	if sc.ended != nil {
		ended = func(client.View) bool { return sc.ended(f) }
	}
	if err := c.Wait(ctx, ended); err != nil {
		t.Fatalf("the run did not end: %v (%+v)", err, c.View().Run)
	}
	f.final = c.View()
	c.Close()
	return f
}

// openStep is the step_id of the confirmation of this kind open in cp.
func openStep(cp *checkpoint, kind string) string {
	if cp.Run == nil {
		return ""
	}
	for _, c := range cp.Run.PendingConfirm {
		if c.Kind == kind {
			return c.StepID
		}
	}
	return ""
}

// checkFailover checks what every takeover must give: each seq once and in
// order, tasks completed before the takeover not run again and running
// ones started again as their next execution, and the confirmation left
// open asked again, if at all, with its step_id.
func checkFailover(t *testing.T, f *failover, sc scenario) {
	t.Helper()
	if s := f.final.Stats; len(s.Violations) > 0 || s.Duplicates > 0 || s.Resumes == 0 {
		t.Errorf("client stats %+v: want no violation, no duplicate, a resume", s)
	}
	for i, e := range f.seen() {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i+1, e.Seq)
		}
	}
	if f.final.Phase != wsproto.PhaseIdle {
		t.Errorf("phase %s at the end", f.final.Phase)
	}
	if f.frozen.Run == nil {
		return
	}
	b := f.onB()
	for _, ts := range f.frozen.Run.Tasks {
		switch ts.Status {
		case wsproto.TaskCompleted:
			if n := f.b.executions(ts.ID); n != 0 {
				t.Errorf("%s, completed before the takeover, ran %d times after", ts.ID, n)
			}
		case wsproto.TaskRunning, wsproto.TaskRetrying:
			i := slices.IndexFunc(b, func(e client.Frame) bool {
				return is(e, wsproto.EventSolverStart, func(m any) bool { return m.(*wsproto.SolverStart).TaskID == ts.ID })
			})
			if i < 0 {
				continue // cancelled, or the run ended first
			}
			m, _ := b[i].Meta()
			if got := m.(*wsproto.SolverStart).Attempt; got != ts.Attempt+1 {
				t.Errorf("%s started again as execution %d, want %d", ts.ID, got, ts.Attempt+1)
			}
		}
	}
	if f.target == "" {
		return
	}
	for _, e := range b {
		if is(e, wsproto.EventUserConfirm, func(m any) bool {
			uc := m.(*wsproto.UserConfirm)
			return uc.Kind == sc.kind && uc.StepID != f.target
		}) {
			t.Errorf("the new server asked a new %s instead of %s: %s", sc.kind, f.target, e.Metadata)
		}
	}
}
