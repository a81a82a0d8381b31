package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// With a buffer.Parted ring (redisstore's), a checkpoint is stored as
// parts, so that a transition costs what it changed and not the whole
// state (issue 27): most transitions change one task, and a state of 50
// tasks with their results and journals is tens of KiB.
//
//   - "head": the checkpoint's version, seq, phase and followed;
//   - "run": the run's state without its tasks (wsproto.RunState);
//   - "exec": the run's record without its journal (runCheckpoint);
//   - "t/I": the run's task I (wsproto.TaskState), I from 0;
//   - "j/ID/N": round N (from 0) of the journal of task ID;
//   - "history": the session's history.
//
// Every checkpoint encodes the head (a few bytes), and the parts of what
// the transition may have changed (scope): "run" and "exec" unless the
// event is known to keep them; one task's part and the last round of its
// journal (with any rounds added or dropped), for the events of one task;
// no task part, for the events that change no task; all of them for every
// other transition, and whenever the run or its list of tasks is another
// one than at the last checkpoint. The first checkpoint of a ring writes
// every part and removes whatever else the store held (reset).
// assembleCheckpoint makes the parts one checkpoint again; Restore reads
// it as it reads a whole one. What scopeOf says is kept is checked in the
// tests: every checkpoint they make is assembled from the parts the ring
// holds and compared with the whole (verifyParts), so a part left as it
// was when it changed fails them.

// scope is what a transition may have changed of the task and journal
// parts: every part (all), or the parts of task (none when ""); and of the
// run and exec parts, which are made again unless the scope knows they
// kept what they were (the zero scope knows nothing: it is safe).
type scope struct {
	all  bool
	task string
	// run: the "run" part is unchanged (runKept), or is unless the run
	// had confirmations pending before or after (runKeptNoConfirms: the
	// event drops some of them, when any).
	run runKeep
	// execKept: the "exec" part is unchanged.
	execKept bool
}

// runKeep is what a scope knows of the "run" part.
type runKeep uint8

const (
	runMayChange runKeep = iota
	runKept
	runKeptNoConfirms
)

var scopeAll = scope{all: true}

// scopeOf is the scope of an event, from its metadata as the state
// folded it (wsproto.State.Apply) and the run's record too
// (runCheckpoint.apply). Whatever it does not know changes everything.
// An event of one task changes the run's state beyond its tasks only by
// dropping that task's confirmations (runKeptNoConfirms); the run's
// record only in the events apply folds, so the todo events keep it.
func scopeOf(meta any) scope {
	switch m := meta.(type) {
	case *wsproto.SolverStart:
		// A new run, or a task added (a chat run's), is another run or
		// list of tasks: checkpointPartsLocked makes that scopeAll.
		return scope{task: m.TaskID, run: runKeptNoConfirms}
	case *wsproto.SolverCompleted:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.SolverCancelled:
		return scope{task: m.TaskID, run: runKeptNoConfirms}
	case *wsproto.SolverSkipped:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.SolverRestarted:
		return scope{task: m.TaskID, run: runKeptNoConfirms}
	case *wsproto.ExecutionError:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.RecoveryStarted:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.RecoveryFailed:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.TodoUpdated:
		return scope{task: m.TaskID, run: runKept, execKept: true}
	case *wsproto.TodoItemProgress:
		return scope{task: m.TaskID, run: runKept, execKept: true}
	case *wsproto.TodoCompleted:
		return scope{task: m.TaskID, run: runKept, execKept: true}
	case *wsproto.ToolCall:
		return scope{task: m.TaskID, run: runKept}
	case *wsproto.ToolResult:
		return scope{task: m.TaskID, run: runKeptNoConfirms}
	case *wsproto.AggregateStart:
		return scope{run: runKept}
	case *wsproto.UserConfirm, *wsproto.PlanDecision:
		return scope{}
	}
	return scopeAll
}

// cpParts is what a session's Parted ring was given: the current value of
// every part, and what the task parts were encoded from.
type cpParts struct {
	ring buffer.Parted
	// have is every part the ring holds, by name.
	have map[string][]byte
	// fresh: the ring has had no checkpoint yet (reset).
	fresh bool
	// run, tasks and ntasks are the run, the first of its tasks and their
	// number at the last checkpoint: another run or list is scopeAll.
	run    *wsproto.RunState
	tasks  *wsproto.TaskState
	ntasks int
	// exec is the run record at the last checkpoint, nil when none.
	exec *runCheckpoint
	// history is the newest history entry's run at the last checkpoint.
	history string
	// confirms is the number of the run's pending confirmations when the
	// "run" part was last made.
	confirms int
	// rounds is the number of round parts (j/ID/N) of each task's journal.
	rounds map[string]int
}

// verifyParts, when set (tests), is given every checkpoint made in parts
// as a whole (full) and as its parts assembled again (assembled).
var verifyParts func(full, assembled []byte)

// checkpointPartsLocked gives the ring the parts of the checkpoint that
// sc may have changed, and the head.
func (sess *session) checkpointPartsLocked(sc scope) error {
	p := sess.dur.parts
	delta := make(map[string][]byte, 4)
	set := func(name string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode checkpoint part %s: %w", name, err)
		}
		delta[name] = b
		return nil
	}
	drop := func(name string) {
		if _, ok := p.have[name]; ok {
			delta[name] = nil
		}
	}

	run := sess.state.Run
	var exec *runCheckpoint
	if r := sess.run; r != nil && r.cp != nil && !r.cp.ended {
		exec = r.cp
	}
	var tasks []wsproto.TaskState
	var first *wsproto.TaskState
	if run != nil {
		tasks = run.Tasks
		if len(tasks) > 0 {
			first = &tasks[0]
		}
	}
	if p.fresh || run != p.run || first != p.tasks || len(tasks) != p.ntasks || exec != p.exec {
		sc = scopeAll
	}

	if err := set("head", &checkpoint{Version: checkpointVersion, Seq: sess.dur.seq, Phase: sess.state.Phase,
		Followed: sess.followed}); err != nil {
		return err
	}
	if run == nil {
		drop("run")
	} else if confirms := len(run.PendingConfirm); sc.all || sc.run == runMayChange ||
		sc.run == runKeptNoConfirms && (confirms > 0 || p.confirms > 0) {
		r := *run
		r.Tasks = nil
		if err := set("run", &r); err != nil {
			return err
		}
		p.confirms = confirms
	}
	if exec == nil {
		drop("exec")
	} else if sc.all || !sc.execKept {
		x := *exec
		x.Journal = nil
		if err := set("exec", &x); err != nil {
			return err
		}
	}

	if h := sess.state.History; len(h) == 0 {
		drop("history")
	} else if last := h[len(h)-1].RunID; p.fresh || last != p.history {
		if err := set("history", h); err != nil {
			return err
		}
		p.history = last
	}

	switch {
	case sc.all:
		for i := range tasks {
			if err := set(taskPart(i), &tasks[i]); err != nil {
				return err
			}
		}
		for i := len(tasks); i < p.ntasks; i++ {
			drop(taskPart(i))
		}
		rounds := make(map[string]int)
		if exec != nil {
			for id, js := range exec.Journal {
				if err := p.setRounds(set, drop, id, js, 0); err != nil {
					return err
				}
				rounds[id] = len(js)
			}
		}
		for id, n := range p.rounds {
			if exec == nil || exec.Journal[id] == nil {
				for i := range n {
					drop(roundPart(id, i))
				}
			}
		}
		p.rounds = rounds
	case sc.task != "":
		for i := range tasks {
			if tasks[i].ID == sc.task {
				if err := set(taskPart(i), &tasks[i]); err != nil {
					return err
				}
			}
		}
		js := exec.journalOf(sc.task)
		// Only the last round changes, or rounds are added or dropped
		// from the end (journal.go): rounds before the last one stored
		// are as they were.
		from := min(p.rounds[sc.task], max(len(js)-1, 0))
		if err := p.setRounds(set, drop, sc.task, js, from); err != nil {
			return err
		}
		if len(js) == 0 {
			delete(p.rounds, sc.task)
		} else {
			if p.rounds == nil {
				p.rounds = make(map[string]int)
			}
			p.rounds[sc.task] = len(js)
		}
	}

	if p.have == nil || p.fresh {
		p.have = make(map[string][]byte, len(delta))
	}
	for name, b := range delta {
		if b == nil {
			delete(p.have, name)
		} else {
			p.have[name] = b
		}
	}
	p.ring.CheckpointParts(delta, p.fresh)
	p.fresh = false
	p.run, p.tasks, p.ntasks, p.exec = run, first, len(tasks), exec

	if verifyParts != nil {
		sess.verifyPartsLocked()
	}
	return nil
}

// setRounds sets the round parts of a task's journal js from round from
// on, and drops the parts of rounds beyond js that the ring holds.
func (p *cpParts) setRounds(set func(string, any) error, drop func(string), id string, js []journalRound, from int) error {
	for i := from; i < len(js); i++ {
		if err := set(roundPart(id, i), &js[i]); err != nil {
			return err
		}
	}
	for i := len(js); i < p.rounds[id]; i++ {
		drop(roundPart(id, i))
	}
	return nil
}

// journalOf is the journal of a task, nil when x is.
func (x *runCheckpoint) journalOf(taskID string) []journalRound {
	if x == nil {
		return nil
	}
	return x.Journal[taskID]
}

func taskPart(i int) string { return "t/" + strconv.Itoa(i) }

// roundPart is the name of round i (from 0) of task id's journal.
func roundPart(id string, i int) string { return "j/" + id + "/" + strconv.Itoa(i) }

// verifyPartsLocked hands verifyParts the checkpoint encoded whole and
// assembled from the parts the ring holds, both decoded and encoded again
// (the whole one carries its history last).
func (sess *session) verifyPartsLocked() {
	cp := checkpoint{Version: checkpointVersion, Seq: sess.dur.seq, Phase: sess.state.Phase, Run: sess.state.Run,
		History: sess.state.History, Followed: sess.followed}
	if r := sess.run; r != nil && r.cp != nil && !r.cp.ended {
		cp.Exec = r.cp
	}
	full, err := reencode(json.Marshal(&cp))
	if err != nil {
		verifyParts(nil, []byte(err.Error()))
		return
	}
	assembled, err := assembleCheckpoint(sess.dur.parts.have)
	if err != nil {
		verifyParts(full, []byte(err.Error()))
		return
	}
	verifyParts(full, assembled)
}

// reencode decodes a checkpoint and encodes it again.
func reencode(b []byte, err error) ([]byte, error) {
	if err != nil {
		return nil, err
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, err
	}
	return json.Marshal(&cp)
}

// errNoHead is assembleCheckpoint's error for parts without a head.
var errNoHead = errors.New("checkpoint parts without a head")

// assembleCheckpoint makes a checkpoint stored in parts one encoded
// checkpoint again, as Restore reads it.
func assembleCheckpoint(parts map[string][]byte) ([]byte, error) {
	head, ok := parts["head"]
	if !ok {
		return nil, errNoHead
	}
	var cp checkpoint
	if err := json.Unmarshal(head, &cp); err != nil {
		return nil, fmt.Errorf("decode checkpoint head: %w", err)
	}
	if b, ok := parts["run"]; ok {
		if err := json.Unmarshal(b, &cp.Run); err != nil {
			return nil, fmt.Errorf("decode checkpoint run: %w", err)
		}
	}
	if b, ok := parts["exec"]; ok {
		if err := json.Unmarshal(b, &cp.Exec); err != nil {
			return nil, fmt.Errorf("decode checkpoint exec: %w", err)
		}
	}
	if h, ok := parts["history"]; ok {
		if err := json.Unmarshal(h, &cp.History); err != nil {
			return nil, fmt.Errorf("decode checkpoint history: %w", err)
		}
	}
	if cp.Run != nil {
		cp.Run.Tasks = []wsproto.TaskState{}
		for i := 0; ; i++ {
			b, ok := parts[taskPart(i)]
			if !ok {
				break
			}
			var t wsproto.TaskState
			if err := json.Unmarshal(b, &t); err != nil {
				return nil, fmt.Errorf("decode checkpoint task %d: %w", i, err)
			}
			cp.Run.Tasks = append(cp.Run.Tasks, t)
		}
	}
	if cp.Exec != nil {
		journal, err := assembleJournal(parts)
		if err != nil {
			return nil, err
		}
		cp.Exec.Journal = journal
	}
	return json.Marshal(&cp)
}

// assembleJournal makes the journal parts one journal again: a task's
// rounds (j/ID/N, a round each, N from 0), or its whole journal (j/ID, an
// array: what the Baton before rounds wrote).
func assembleJournal(parts map[string][]byte) (map[string][]journalRound, error) {
	var journal map[string][]journalRound
	rounds := make(map[string]map[int]journalRound)
	for name, b := range parts {
		key, ok := strings.CutPrefix(name, "j/")
		if !ok {
			continue
		}
		if journal == nil {
			journal = make(map[string][]journalRound)
		}
		if len(b) > 0 && b[0] == '[' {
			var js []journalRound
			if err := json.Unmarshal(b, &js); err != nil {
				return nil, fmt.Errorf("decode checkpoint journal of %s: %w", key, err)
			}
			journal[key] = js
			continue
		}
		slash := strings.LastIndexByte(key, '/')
		n, err := strconv.Atoi(key[slash+1:])
		if slash < 0 || err != nil || n < 0 {
			return nil, fmt.Errorf("checkpoint part %q: not a journal round", name)
		}
		var r journalRound
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("decode checkpoint journal round %s: %w", key, err)
		}
		id := key[:slash]
		if rounds[id] == nil {
			rounds[id] = make(map[int]journalRound)
		}
		rounds[id][n] = r
	}
	for id, byN := range rounds {
		js := make([]journalRound, len(byN))
		for n, r := range byN {
			if n >= len(js) {
				return nil, fmt.Errorf("checkpoint journal of %s: round %d of %d", id, n, len(js))
			}
			js[n] = r
		}
		journal[id] = js
	}
	return journal, nil
}

// checkpointData is the checkpoint of a session opened from the store,
// whole, nil when it has none. A whole checkpoint beside parts was
// written after them, by a Baton that knows no parts (every write of
// this one that sets the whole checkpoint removes the parts, and the
// first of a ring in parts removes the whole one): it is the latest.
func (op *Opened) checkpointData() ([]byte, error) {
	if op.Checkpoint != nil || len(op.CheckpointParts) == 0 {
		return op.Checkpoint, nil
	}
	b, err := assembleCheckpoint(op.CheckpointParts)
	if err != nil {
		return nil, fmt.Errorf("assemble checkpoint: %w", err)
	}
	return b, nil
}
