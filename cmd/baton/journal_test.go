package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/openai/openaitest"
	"github.com/baton-run/baton/wsproto"
)

// The journal (orchestrator/journal.go) across kill -9: a two-node
// cluster runs tasks whose model is a scripted endpoint in this process
// (every reply counted) and whose tool is a counting MCP server
// (internal/mcptest -tools count: every execution appended to a file).
// The node running the task is killed at each kind of moment, held there
// by the model or the tool, and the client's resume has the other node
// take the run over.

// journalScript is what the scripted model answers each task, round by
// round: the counts to call (one reply), then the answer.
var journalScript = map[string][][]int{
	"a": {{1}, {2, 3}},
	"b": {{11}},
}

// journalModel is the scripted model: it counts the replies it has given
// per task and round, and holds the first call of one (task, round) until
// the node that made it is gone.
type journalModel struct {
	holdTask  string
	holdRound int
	arrived   chan struct{} // closed when the held call has arrived

	mu      sync.Mutex // guards replies, held
	replies map[string]int
	held    bool
}

func newJournalModel(holdTask string, holdRound int) *journalModel {
	return &journalModel{holdTask: holdTask, holdRound: holdRound, arrived: make(chan struct{}), replies: map[string]int{}}
}

func (m *journalModel) handler() openaitest.Handler {
	return fakeModel(func(int64) string { return fakePlan }, func(w http.ResponseWriter, r *http.Request, req openaitest.Request) {
		task := ""
		for id := range journalScript {
			if strings.Contains(req.Messages[1].Content, "[task:"+id+"]") {
				task = id
			}
		}
		round := 1
		for _, msg := range req.Messages {
			if msg.Role == "assistant" {
				round++
			}
		}
		m.mu.Lock()
		hold := !m.held && task == m.holdTask && round == m.holdRound
		if hold {
			m.held = true
			close(m.arrived)
		}
		m.mu.Unlock()
		if hold {
			<-r.Context().Done() // the node is killed: this reply never returns
			return
		}
		script := journalScript[task]
		if round <= len(script) {
			var calls []openaitest.Call
			for k, n := range script[round-1] {
				calls = append(calls, openaitest.Call{ID: fmt.Sprintf("call_%s_%d_%d", task, round, k), Name: "ct__count",
					Arguments: fmt.Sprintf(`{"n":%d}`, n)})
			}
			openaitest.ToolCalls(w, 8, calls...)
		} else {
			openaitest.Stream(w, "Counted ", task, ".")
		}
		m.mu.Lock()
		m.replies[fmt.Sprintf("%s/%d", task, round)]++
		m.mu.Unlock()
	})
}

func (m *journalModel) counts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.replies)
}

// TestJournalAcrossKill: whatever the moment the node running a task dies,
// the run ends on the other node, no model reply and no tool result that
// came back is asked for again, the one tool call in flight runs at most
// once more and is told it is a retry, and the client's stream has no gap
// and no duplicate.
func TestJournalAcrossKill(t *testing.T) {
	for _, tt := range []struct {
		name  string
		tasks []string // "a", or "a" then "b" depending on it
		// The moment: the model's call of (holdTask, holdRound) in
		// flight, or the tool's call of count n held before or after it
		// has counted (hold "before-N" or "after-N").
		holdTask  string
		holdRound int
		hold      string
		// execs is what the counting tool must have recorded, in order.
		execs []string
	}{
		{name: "model call in flight", tasks: []string{"a"}, holdTask: "a", holdRound: 2,
			execs: []string{"1 false", "2 false", "3 false"}},
		{name: "model reply in, its tool call not run", tasks: []string{"a"}, hold: "before-2",
			execs: []string{"1 false", "2 true", "3 false"}},
		{name: "mid tool call", tasks: []string{"a"}, hold: "after-2",
			execs: []string{"1 false", "2 false", "2 true", "3 false"}},
		{name: "tool results in, next model call in flight", tasks: []string{"a"}, holdTask: "a", holdRound: 3,
			execs: []string{"1 false", "2 false", "3 false"}},
		{name: "between tasks", tasks: []string{"a", "b"}, holdTask: "b", holdRound: 1,
			execs: []string{"1 false", "2 false", "3 false", "11 false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ran := filepath.Join(dir, "ran")
			if tt.hold != "" {
				if err := os.WriteFile(filepath.Join(dir, "hold-"+tt.hold), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			model := newJournalModel(tt.holdTask, tt.holdRound)
			fake := openaitest.NewServer(t, model.handler())
			rds := redistest.Start(t)
			args := []string{"--model", "openai", "--openai-base-url", fake.BaseURL(),
				"--mcp", mcptestServer(t, "ct", "-tools", "count", "-ran", ran, "-gate", dir)}
			a := startNode(t, "A", "127.0.0.1:0", rds.URL(), args...)
			b := startNode(t, "B", "127.0.0.1:0", rds.URL(), args...)
			ctx := context.Background()

			var tasks []wsproto.Task
			for i, id := range tt.tasks {
				task := wsproto.Task{ID: id, Title: "Count " + id, Description: "Count [task:" + id + "]"}
				if i > 0 {
					task.DependsOn = []string{tt.tasks[i-1]}
				}
				tasks = append(tasks, task)
			}
			var ends frameLog
			cl := clusterClient(t, ctx, []string{a.url(), b.url()}, client.Options{AckEvery: 3, OnConfirm: client.AgreeAll,
				OnEvent: func(f client.Frame) {
					if f.Event == wsproto.EventPipelineCompleted {
						ends.add(f)
					}
				}})
			if err := cl.SolveTasks(ctx, tasks); err != nil {
				t.Fatal(err)
			}
			// The moment: the held call has reached the model, or the
			// tool (which says so with held-N).
			if tt.hold != "" {
				_, n, _ := strings.Cut(tt.hold, "-")
				eventually(t, "the tool call held", func() bool {
					_, err := os.Stat(filepath.Join(dir, "held-"+n))
					return err == nil
				})
			} else {
				select {
				case <-model.arrived:
				case <-time.After(60 * time.Second):
					t.Fatal("the model call to hold never came")
				}
			}
			if finished(cl.View()) {
				t.Fatal("the run ended before the kill: the test proves nothing")
			}
			a.kill(t)
			v := waitView(t, ctx, cl, "the final answer after the kill", finished)
			clean(t, v)
			if e := ends.all(); len(e) != 1 || meta[wsproto.PipelineCompleted](t, e[0]).Status != wsproto.StatusSucceeded {
				t.Errorf("pipeline.completed: %d of them (%v), want one, succeeded", len(e), e)
			}
			for _, task := range v.Run.Tasks {
				if task.Status != wsproto.TaskCompleted {
					t.Errorf("task %s ended %s", task.ID, task.Status)
				}
			}
			if !strings.Contains(b.log.String(), "session taken over") {
				t.Errorf("B did not take the session over")
			}

			// Every tool call that returned ran once; the one in flight
			// ran again, told it is a retry.
			data, err := os.ReadFile(ran)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(strings.ReplaceAll(string(data), " ", "_")); !slices.Equal(got, underscored(tt.execs)) {
				t.Errorf("tool executions %q, want %q", got, underscored(tt.execs))
			}
			// Every model reply was given once: none that came back was
			// asked for again.
			want := map[string]int{}
			for _, id := range tt.tasks {
				for round := 1; round <= len(journalScript[id])+1; round++ {
					want[fmt.Sprintf("%s/%d", id, round)] = 1
				}
			}
			if got := model.counts(); !maps.Equal(got, want) {
				t.Errorf("model replies per task/round %v, want %v", got, want)
			}
		})
	}
}

func underscored(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.ReplaceAll(l, " ", "_")
	}
	return out
}
