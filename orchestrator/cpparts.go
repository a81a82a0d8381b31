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
//   - "head": the checkpoint without its run's tasks, its record's
//     journal and its history;
//   - "t/I": the run's task I (wsproto.TaskState), I from 0;
//   - "j/ID": the journal of task ID (runCheckpoint.Journal);
//   - "history": the session's history.
//
// Every checkpoint re-encodes the head, and the parts of what the
// transition may have changed (scope): one task's, for the events of one
// task; none, for the events that change no task; all of them for every
// other transition, and whenever the run or its list of tasks is another
// one than at the last checkpoint. The first checkpoint of a ring writes
// every part and removes whatever else the store held (reset).
// assembleCheckpoint makes the parts one checkpoint again; Restore reads
// it as it reads a whole one.

// scope is what a transition may have changed of the task and journal
// parts: every part (all), or the parts of task (none when "").
type scope struct {
	all  bool
	task string
}

var scopeAll = scope{all: true}

// scopeOf is the scope of an event, from its metadata as the state
// folded it. Whatever it does not know changes everything.
func scopeOf(meta any) scope {
	switch m := meta.(type) {
	case *wsproto.SolverStart:
		return scope{task: m.TaskID}
	case *wsproto.SolverCompleted:
		return scope{task: m.TaskID}
	case *wsproto.SolverCancelled:
		return scope{task: m.TaskID}
	case *wsproto.SolverSkipped:
		return scope{task: m.TaskID}
	case *wsproto.SolverRestarted:
		return scope{task: m.TaskID}
	case *wsproto.ExecutionError:
		return scope{task: m.TaskID}
	case *wsproto.RecoveryStarted:
		return scope{task: m.TaskID}
	case *wsproto.RecoveryFailed:
		return scope{task: m.TaskID}
	case *wsproto.TodoUpdated:
		return scope{task: m.TaskID}
	case *wsproto.TodoItemProgress:
		return scope{task: m.TaskID}
	case *wsproto.TodoCompleted:
		return scope{task: m.TaskID}
	case *wsproto.ToolCall:
		return scope{task: m.TaskID}
	case *wsproto.ToolResult:
		return scope{task: m.TaskID}
	case *wsproto.UserConfirm, *wsproto.PlanDecision, *wsproto.AggregateStart:
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

	head := checkpoint{Version: checkpointVersion, Seq: sess.dur.seq, Phase: sess.state.Phase, Followed: sess.followed}
	if run != nil {
		r := *run
		r.Tasks = nil
		head.Run = &r
	}
	if exec != nil {
		x := *exec
		x.Journal = nil
		head.Exec = &x
	}
	if err := set("head", &head); err != nil {
		return err
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
		for name := range p.have {
			if id, ok := strings.CutPrefix(name, "j/"); ok && (exec == nil || exec.Journal[id] == nil) {
				delta[name] = nil
			}
		}
		if exec != nil {
			for id, rounds := range exec.Journal {
				if err := set("j/"+id, rounds); err != nil {
					return err
				}
			}
		}
	case sc.task != "":
		for i := range tasks {
			if tasks[i].ID == sc.task {
				if err := set(taskPart(i), &tasks[i]); err != nil {
					return err
				}
			}
		}
		if rounds := exec.journalOf(sc.task); rounds != nil {
			if err := set("j/"+sc.task, rounds); err != nil {
				return err
			}
		} else {
			drop("j/" + sc.task)
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

// journalOf is the journal of a task, nil when x is.
func (x *runCheckpoint) journalOf(taskID string) []journalRound {
	if x == nil {
		return nil
	}
	return x.Journal[taskID]
}

func taskPart(i int) string { return "t/" + strconv.Itoa(i) }

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
	for name, b := range parts {
		id, ok := strings.CutPrefix(name, "j/")
		if !ok || cp.Exec == nil {
			continue
		}
		var rounds []journalRound
		if err := json.Unmarshal(b, &rounds); err != nil {
			return nil, fmt.Errorf("decode checkpoint journal of %s: %w", id, err)
		}
		if cp.Exec.Journal == nil {
			cp.Exec.Journal = make(map[string][]journalRound)
		}
		cp.Exec.Journal[id] = rounds
	}
	return json.Marshal(&cp)
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
