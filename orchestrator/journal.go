package orchestrator

import (
	"context"
	"slices"

	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// The checkpoint journals the rounds of each running task's execution
// (runCheckpoint.Journal), so that a run restored elsewhere goes on with
// the task from its last completed round: no model reply and no tool
// result already in is asked for again (solver.Journal).
//
// A round's reply is a note of its own (taskEvents.Replied, a unit
// without an event), written before the loop acts on it. Its calls'
// results come from the events, in the units of tool.call and tool.result
// themselves, so the journal always agrees with what the client was told:
// a call whose tool.result is out is journaled with that result (the text
// the model saw); one whose tool.call is out and whose result is not
// (OpenTools) began and never returned, and is made again, as a retry,
// after Restore answers its tool.call with "cancelled".
//
// The journal is the current execution's only: it goes when the execution
// ends (solver.completed, execution.error, solver.cancelled,
// solver.restarted; the result is then in the state, or the next
// execution starts from scratch) and is kept by solver.start, which is
// how a restored task's new execution begins.
//
// Size: a round holds at most MaxResultBytes of reply text, MaxResultBytes
// of arguments per call and ToolResultLimit of result per call (the loop
// keeps no more: solver.Round), and an execution has at most MaxRounds
// rounds, so the journal is bounded by the running tasks (MaxParallel) ×
// MaxRounds × (MaxResultBytes + calls per reply × (MaxResultBytes +
// ToolResultLimit)), the calls per reply being bounded in turn by the
// model's output limit (--max-output-tokens). With the defaults (128 KiB,
// 16 KiB, 8 rounds) a typical round is a few KiB. The checkpoint is
// written at every event, so --max-result-bytes, --tool-result-limit and
// --max-rounds bound what each write costs.
// Old checkpoints have no journal and restore as before (the task starts
// from scratch): the field is additive and the version stays 1.

// Settled implements solver.Journal: it returns once every unit written
// so far is in the store (or ctx is done), so that what the loop does next
// is done on a journal a takeover would find. The loop waits so before it
// runs a tool (its tool.call, and the reply before it, are then durable: a
// takeover retries the call, told so) and before it asks the model (the
// results it is asked with are durable: a takeover never runs those calls
// again). It costs a round trip to the store per tool call and per model
// call; with any ring but a durable one it returns at once.
func (e taskEvents) Settled(ctx context.Context) {
	sess := e.r.sess
	sess.mu.Lock()
	d := sess.dur
	if d == nil {
		sess.mu.Unlock()
		return
	}
	done := d.waitLocked(d.seq)
	sess.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// durableWaiter waits for seq to be durable.
type durableWaiter struct {
	seq  uint64
	done chan struct{}
}

// waitLocked returns a channel closed once seq is durable; nil when it is
// already. Under the session's lock, like settled: deliver, which calls
// settled, is not called under the ring's lock, so asking the ring here
// loses no wake-up.
func (d *durable) waitLocked(seq uint64) <-chan struct{} {
	if held, _ := d.ring.Durable(); held >= seq {
		return nil
	}
	w := durableWaiter{seq: seq, done: make(chan struct{})}
	d.waiters = append(d.waiters, w)
	return w.done
}

// settled wakes the waiters for seqs up to seq, which the store now holds.
func (d *durable) settled(seq uint64) {
	d.waiters = slices.DeleteFunc(d.waiters, func(w durableWaiter) bool {
		if w.seq <= seq {
			close(w.done)
			return true
		}
		return false
	})
}

// journalRound is one round of a task's execution.
type journalRound struct {
	Round     int           `json:"round"`
	Text      string        `json:"text,omitempty"`
	TextBytes int           `json:"text_bytes,omitempty"`
	Final     bool          `json:"final,omitempty"`
	Usage     wsproto.Usage `json:"usage"`
	Calls     []journalCall `json:"calls,omitempty"`
}

// journalCall is a call of a round's reply, and how far it got.
type journalCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments,omitempty"`
	// StepID is its tool.call's, once that is out.
	StepID string `json:"step_id,omitempty"`
	// Result is its tool.result's, once that is out.
	Result *string `json:"result,omitempty"`
	// Retry: it began on a server that died before it returned; it is
	// made again (StepID is then the new call's, once out).
	Retry bool `json:"retry,omitempty"`
}

// Replied implements solver.Journal: the reply is journaled before the
// loop acts on it.
func (e taskEvents) Replied(taskID string, r solver.Round) {
	sess := e.r.sess
	sess.mu.Lock()
	defer sess.mu.Unlock()
	x := e.r.cp
	if x == nil || sess.run != e.r || x.ended {
		return
	}
	x.journalReply(taskID, r)
	sess.changedScopeLocked(scope{task: taskID, run: runKept, execKept: true}) // the journal alone
}

// journalReply records a reply as the task's latest round.
func (x *runCheckpoint) journalReply(taskID string, r solver.Round) {
	jr := journalRound{Round: r.Number, Text: r.Reply.Text, TextBytes: r.Reply.TextBytes, Final: r.Final, Usage: r.Reply.Usage}
	for _, c := range r.Reply.ToolCalls {
		jr.Calls = append(jr.Calls, journalCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	if x.Journal == nil {
		x.Journal = make(map[string][]journalRound)
	}
	// Rounds from this number on are an earlier execution's (one that
	// did not replay them): a new execution starts at round 1.
	rounds := x.Journal[taskID]
	for len(rounds) > 0 && rounds[len(rounds)-1].Round >= r.Number {
		rounds = rounds[:len(rounds)-1]
	}
	x.Journal[taskID] = append(rounds, jr)
}

// journalCall folds a tool.call into its task's journal: it is the first
// call of the round's reply not begun yet.
func (x *runCheckpoint) journalCall(m *wsproto.ToolCall) {
	if c := x.journaled(m.TaskID, m.Round, func(c *journalCall) bool { return c.StepID == "" && c.Result == nil }); c != nil {
		c.StepID = m.StepID
	}
}

// journalResult folds a tool.result into its task's journal.
func (x *runCheckpoint) journalResult(m *wsproto.ToolResult) {
	if c := x.journaled(m.TaskID, m.Round, func(c *journalCall) bool { return c.StepID == m.StepID && c.Result == nil }); c != nil {
		text := m.Result
		c.Result = &text
	}
}

// journaled returns the first call of the task's last round that match
// accepts, when that round is round.
func (x *runCheckpoint) journaled(taskID string, round int, match func(c *journalCall) bool) *journalCall {
	rounds := x.Journal[taskID]
	if len(rounds) == 0 || rounds[len(rounds)-1].Round != round {
		return nil
	}
	calls := rounds[len(rounds)-1].Calls
	for i := range calls {
		if match(&calls[i]) {
			return &calls[i]
		}
	}
	return nil
}

// dropJournal forgets a task's journal: its execution ended.
func (x *runCheckpoint) dropJournal(taskID string) {
	delete(x.Journal, taskID)
	if len(x.Journal) == 0 {
		x.Journal = nil
	}
}

// resumeJournal is a running task's journal as the solver replays it. A
// call that began and did not return is marked for a retry in the record
// too, and loses its step_id: resumeSolving answers that tool.call with
// "cancelled", which is not its result, and the retry's tool.call takes
// its place.
func (x *runCheckpoint) resumeJournal(taskID string) []solver.Round {
	var out []solver.Round
	for _, jr := range x.Journal[taskID] {
		r := solver.Round{Number: jr.Round, Final: jr.Final,
			Reply: solver.Reply{Text: jr.Text, TextBytes: jr.TextBytes, Usage: jr.Usage}}
		for i := range jr.Calls {
			c := &jr.Calls[i]
			r.Reply.ToolCalls = append(r.Reply.ToolCalls, solver.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			switch {
			case c.Result != nil:
				r.Results = append(r.Results, solver.CallResult{Text: *c.Result})
			case c.StepID != "" || c.Retry:
				c.StepID, c.Retry = "", true
				r.Results = append(r.Results, solver.CallResult{Retry: true})
			}
		}
		out = append(out, r)
	}
	return out
}
