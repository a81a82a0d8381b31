package orchestrator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// BenchmarkEmit measures the per-event path the pipeline pays: event id,
// encoding, ring append with checksum, state fold, and the enqueue for an
// attached connection. The queue is drained as a writer would, outside the
// timer's interest.
func BenchmarkEmit(b *testing.B) {
	srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}},
		&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: benchObserver})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(b.Context())
	sess, _, _ := srv.newSession(context.Background(), "")
	c := &conn{srv: srv, limit: 1 << 20, writing: true} // no writer: the queue is drained by hand
	c.attach(sess)
	sess.members = []*member{{c: c, ref: c.id}}
	meta := &wsproto.SolverProgress{RunID: "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", TaskID: "t2",
		Attempt: 1, Progress: 0.66, Message: "Working through it"}

	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sess.emit(wsproto.EventSolverProgress, "", "Working through it", meta)
		if i%512 == 511 {
			c.mu.Lock()
			clear(c.queue)
			c.queue = c.queue[:0]
			c.mu.Unlock()
		}
	}
}

// nopDurable is a Durable ring whose store takes everything at once and
// keeps nothing: what a checkpoint costs the session, without the store.
type nopDurable struct {
	*buffer.Memory
	bytes int
}

func (r *nopDurable) Checkpoint(data []byte)    { r.bytes = len(data) }
func (r *nopDurable) Commit()                   {}
func (r *nopDurable) Durable() (uint64, string) { return 0, "" }

// nopParted is a nopDurable taking its checkpoint in parts (Redis's
// ring): bytes is what the latest checkpoint changed.
type nopParted struct{ nopDurable }

func (r *nopParted) CheckpointParts(parts map[string][]byte, reset bool) {
	r.bytes = 0
	for _, b := range parts {
		r.bytes += len(b)
	}
}

// BenchmarkEmitCheckpointed is BenchmarkEmit with a durable ring and an
// event that is checkpointed (a todo item's progress), in a run of n tasks
// with a 1 KiB result each: encoding the session's state under its lock is
// the price of a checkpoint at every transition. whole is a ring taking
// the whole checkpoint each time; parts one taking it in parts
// (cpparts.go), as Redis's does, whose cost is the one task's part and the
// head, whatever n.
func BenchmarkEmitCheckpointed(b *testing.B) {
	for _, mode := range []string{"whole", "parts"} {
		for _, n := range []int{1, 10, 50} {
			b.Run(fmt.Sprintf("%s/tasks=%d", mode, n), func(b *testing.B) { benchCheckpointed(b, mode == "parts", n) })
		}
	}
}

func benchCheckpointed(b *testing.B, parted bool, n int) {
	defer func(v func(full, assembled []byte)) { verifyParts = v }(verifyParts)
	verifyParts = nil // the tests' check of every checkpoint is not what is measured
	var ring *nopDurable
	srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}},
		&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: benchObserver, NewRing: func(n int) buffer.Ring {
			if parted {
				p := &nopParted{nopDurable{Memory: buffer.NewMemory(n)}}
				ring = &p.nopDurable
				return p
			}
			ring = &nopDurable{Memory: buffer.NewMemory(n)}
			return ring
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close(b.Context())
	sess, _, _ := srv.newSession(context.Background(), "")
	const runID = "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77"
	tasks := make([]wsproto.Task, n)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Research the background", DependsOn: []string{}}
	}
	sess.state.BeginSolving(runID, "Plan a garden", tasks)
	for i := range sess.state.Run.Tasks {
		sess.state.Run.Tasks[i].Status, sess.state.Run.Tasks[i].Result = wsproto.TaskCompleted, strings.Repeat("r", 1024)
	}
	sess.run = &run{id: runID, sess: sess, cp: &runCheckpoint{ID: runID, Stage: stageSolving}}
	meta := &wsproto.TodoItemProgress{RunID: runID, TaskID: "t1", Version: 1,
		Item: wsproto.TodoItem{ID: "1", Content: "Gather material", Status: wsproto.TodoStatusInProgress, ToolCalls: 1}}
	b.ReportAllocs()
	for b.Loop() {
		meta.Version++
		sess.emit(wsproto.EventTodoItemProgress, "", "Gather material: in_progress", meta)
	}
	b.ReportMetric(float64(ring.bytes), "checkpoint-bytes")
}

// BenchmarkCheckpointHistory is BenchmarkEmitCheckpointed's 1-task state
// with a conversation behind it: the session's history, which every
// checkpoint carries, at 0, 1 and 10 (--history-runs) finished runs of
// a request and a 400-byte answer, the size of the simulated model's.
func BenchmarkCheckpointHistory(b *testing.B) {
	for _, n := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			var ring *nopDurable
			srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}},
				&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: benchObserver, NewRing: func(n int) buffer.Ring {
					ring = &nopDurable{Memory: buffer.NewMemory(n)}
					return ring
				}})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close(b.Context())
			sess, _, _ := srv.newSession(context.Background(), "")
			for i := range n {
				sess.state.History = append(sess.state.History, wsproto.HistoryEntry{RunID: fmt.Sprintf("run_%d", i),
					Request: "Plan a weekend in Lisbon", Answer: strings.Repeat("a", 400), Status: wsproto.StatusSucceeded, EndedAt: time.Now()})
			}
			const runID = "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77"
			sess.state.BeginSolving(runID, "Plan a garden", []wsproto.Task{{ID: "t1", Title: "Research the background", DependsOn: []string{}}})
			sess.state.Run.Tasks[0].Status, sess.state.Run.Tasks[0].Result = wsproto.TaskCompleted, strings.Repeat("r", 1024)
			sess.run = &run{id: runID, sess: sess, cp: &runCheckpoint{ID: runID, Stage: stageSolving}}
			meta := &wsproto.TodoItemProgress{RunID: runID, TaskID: "t1", Version: 1,
				Item: wsproto.TodoItem{ID: "1", Content: "Gather material", Status: wsproto.TodoStatusInProgress, ToolCalls: 1}}
			b.ReportAllocs()
			for b.Loop() {
				meta.Version++
				sess.emit(wsproto.EventTodoItemProgress, "", "Gather material: in_progress", meta)
			}
			b.ReportMetric(float64(ring.bytes), "checkpoint-bytes")
		})
	}
}

// BenchmarkCheckpointJournal is a tool result's checkpoint in parts for a
// task whose agent loop is at round n (each round a 400-byte reply and
// one answered tool call of 400 bytes): the journal is stored by round,
// so the transition writes the last round, whatever n.
func BenchmarkCheckpointJournal(b *testing.B) {
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("rounds=%d", n), func(b *testing.B) {
			defer func(v func(full, assembled []byte)) { verifyParts = v }(verifyParts)
			verifyParts = nil
			var ring *nopDurable
			srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}},
				&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Observer: benchObserver, NewRing: func(c int) buffer.Ring {
					p := &nopParted{nopDurable{Memory: buffer.NewMemory(c)}}
					ring = &p.nopDurable
					return p
				}})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close(b.Context())
			sess, _, _ := srv.newSession(context.Background(), "")
			const runID = "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77"
			sess.state.BeginSolving(runID, "Plan a garden", []wsproto.Task{{ID: "t1", Title: "Research the background", DependsOn: []string{}}})
			sess.state.Run.Tasks[0].Status = wsproto.TaskRunning
			result := strings.Repeat("r", 400)
			rounds := make([]journalRound, n)
			for i := range rounds {
				rounds[i] = journalRound{Round: i + 1, Text: strings.Repeat("t", 400),
					Calls: []journalCall{{ID: fmt.Sprint("c", i), Name: "search", StepID: fmt.Sprint("tool_", i), Result: &result}}}
			}
			sess.run = &run{id: runID, sess: sess, cp: &runCheckpoint{ID: runID, Stage: stageSolving,
				Journal: map[string][]journalRound{"t1": rounds}}}
			meta := &wsproto.ToolResult{RunID: runID, TaskID: "t1", StepID: fmt.Sprint("tool_", n-1), Tool: "search", Round: n, Result: result}
			b.ReportAllocs()
			for b.Loop() {
				sess.emit(wsproto.EventToolResult, "", "search: done", meta)
			}
			b.ReportMetric(float64(ring.bytes), "checkpoint-bytes")
		})
	}
}
