package wsproto_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-run/baton/wsproto"
)

const runID = "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77"

func frameOf(event, content string, meta any) wsproto.Frame {
	return wsproto.Frame{Event: event, EventID: "0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a78", Seq: 7, SessionID: "sess_x",
		Timestamp: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Content: content, Metadata: meta}
}

// decoded is a cut frame as a client reads it.
type decoded struct {
	Event    string         `json:"event"`
	Seq      uint64         `json:"seq"`
	Content  string         `json:"content"`
	Metadata map[string]any `json:"metadata"`
}

func TestFitFrame(t *testing.T) {
	long := strings.Repeat("The quick brown fox <jumps> & \"quotes\" — naïve café 🦊. ", 4000) // ~250 KB, escapes and multibyte runes
	tasks := make([]wsproto.Task, 50)
	for i := range tasks {
		tasks[i] = wsproto.Task{ID: fmt.Sprintf("t%d", i+1), Title: "Task", Description: long[:20000], DependsOn: []string{}}
	}
	items := make([]wsproto.TodoItem, 3000)
	for i := range items {
		items[i] = wsproto.TodoItem{ID: fmt.Sprint(i), Content: "short", Status: wsproto.TodoStatusPending}
	}
	tests := []struct {
		name  string
		frame wsproto.Frame
		limit int
		cut   bool // want it cut
		fits  bool
		check func(t *testing.T, d decoded, typed any)
	}{
		{name: "small: as it is", limit: 4096, fits: true,
			frame: frameOf(wsproto.EventSolverCompleted, "Completed t1", &wsproto.SolverCompleted{RunID: runID, TaskID: "t1", Attempt: 1, Result: "short"})},
		{name: "a task's long result", limit: 4096, cut: true, fits: true,
			frame: frameOf(wsproto.EventSolverCompleted, "Completed t1", &wsproto.SolverCompleted{RunID: runID, TaskID: "t1", Attempt: 2, Result: long, DurationMS: 12}),
			check: func(t *testing.T, d decoded, typed any) {
				m := typed.(*wsproto.SolverCompleted)
				if m.RunID != runID || m.TaskID != "t1" || m.Attempt != 2 || m.DurationMS != 12 || d.Content != "Completed t1" {
					t.Errorf("fields other than the result changed: %+v, content %q", m, d.Content)
				}
				if !strings.HasSuffix(m.Result, wsproto.CutMarker) || !strings.HasPrefix(long, strings.TrimSuffix(m.Result, wsproto.CutMarker)) ||
					len(m.Result) < 2500 {
					t.Errorf("result %d bytes %q…: want most of the room, a prefix of the original and the marker", len(m.Result), m.Result[:40])
				}
			}},
		{name: "the final answer: content and metadata cut alike", limit: 8192, cut: true, fits: true,
			frame: frameOf(wsproto.EventFinalAnswer, long, &wsproto.FinalAnswer{RunID: runID, Content: long}),
			check: func(t *testing.T, d decoded, typed any) {
				if m := typed.(*wsproto.FinalAnswer); m.Content != d.Content || !strings.HasSuffix(d.Content, wsproto.CutMarker) {
					t.Errorf("metadata content %d bytes, frame content %d: want the same cut", len(m.Content), len(d.Content))
				}
			}},
		{name: "tool arguments: strings cut, still an object", limit: 4096, cut: true, fits: true,
			frame: frameOf(wsproto.EventToolCall, "Calling write", &wsproto.ToolCall{RunID: runID, TaskID: "t1", Attempt: 1, Round: 2,
				StepID: "tool_1", Tool: "write", Arguments: json.RawMessage(`{"path":"a.md","body":` + mustJSON(long) + `,"n":3}`)}),
			check: func(t *testing.T, d decoded, typed any) {
				var args map[string]any
				if err := json.Unmarshal(typed.(*wsproto.ToolCall).Arguments, &args); err != nil || args["path"] != "a.md" || args["n"] != 3.0 ||
					!strings.HasSuffix(args["body"].(string), wsproto.CutMarker) {
					t.Errorf("arguments %v (%v)", args, err)
				}
			}},
		{name: "a tool result keeps its truncated field", limit: 4096, cut: true, fits: true,
			frame: frameOf(wsproto.EventToolResult, "read answered", &wsproto.ToolResult{RunID: runID, TaskID: "t1", Attempt: 1, Round: 1,
				StepID: "tool_1", Tool: "read", OK: true, Result: long}),
			check: func(t *testing.T, d decoded, typed any) {
				if m := typed.(*wsproto.ToolResult); !m.Truncated || !strings.HasSuffix(m.Result, wsproto.CutMarker) {
					t.Errorf("tool result %+v", m)
				}
			}},
		{name: "a plan: descriptions cut, ids and dependencies whole", limit: 64 << 10, cut: true, fits: true,
			frame: frameOf(wsproto.EventPlanCompleted, "Plan ready", &wsproto.PlanCompleted{RunID: runID, PlanSummary: long, Tasks: tasks}),
			check: func(t *testing.T, d decoded, typed any) {
				m := typed.(*wsproto.PlanCompleted)
				for i, task := range m.Tasks {
					if task.ID != tasks[i].ID || task.Title != "Task" || !reflect.DeepEqual(task.DependsOn, []string{}) ||
						!strings.HasSuffix(task.Description, wsproto.CutMarker) {
						t.Fatalf("task %d: %+v", i, task)
					}
				}
			}},
		{name: "bulk that is not text cannot fit: as it is", limit: 4096, fits: false,
			frame: frameOf(wsproto.EventTodoUpdated, "Todo list of t1", &wsproto.TodoUpdated{RunID: runID, TaskID: "t1", Version: 1, Items: items})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			whole, err := wsproto.AppendFrame(nil, tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			raw, cut, fits, err := wsproto.FitFrame([]byte("prefix"), tt.frame, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			b, ok := strings.CutPrefix(string(raw), "prefix")
			if !ok {
				t.Fatalf("dst overwritten: %.40q", b)
			}
			if fits != tt.fits || fits && len(b) > tt.limit || !fits && tt.cut && len(b) >= len(whole) {
				t.Fatalf("fits %v with %d bytes (limit %d), want %v", fits, len(b), tt.limit, tt.fits)
			}
			var d decoded
			if err := json.Unmarshal([]byte(b), &d); err != nil || !utf8.ValidString(b) {
				t.Fatalf("not valid JSON or UTF-8: %v", err)
			}
			if !tt.cut {
				if b != string(whole) || !reflect.DeepEqual(cut, tt.frame) {
					t.Fatalf("changed a frame that fits")
				}
				return
			}
			if d.Metadata["truncated"] != true || d.Metadata["original_bytes"] != float64(len(whole)) || d.Seq != 7 || d.Event != tt.frame.Event {
				t.Errorf("marker %v / %v, want true / %d", d.Metadata["truncated"], d.Metadata["original_bytes"], len(whole))
			}
			// The frame returned is the one encoded: its state is the
			// client's.
			again, _ := json.Marshal(cut.Metadata)
			typed, err := wsproto.DecodeMetadata(tt.frame.Event, again)
			want, _ := wsproto.DecodeMetadata(tt.frame.Event, mustRaw(t, d.Metadata))
			if err != nil || !reflect.DeepEqual(typed, want) || cut.Content != d.Content {
				t.Errorf("the frame returned is not the one encoded")
			}
			if tt.check != nil {
				tt.check(t, d, cut.Metadata)
			}
		})
	}
}

// Whatever the texts, a cut frame fits, is valid JSON and keeps every
// text a prefix of the original.
func TestFitFrameRandom(t *testing.T) {
	alphabet := []string{"a", "é", "🦊", "<", "&", "\"", "\\", "\n", "\x01", "\u2028", "\xff"}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for i := range 200 {
		limit := 2048 + rng.IntN(8192)
		msg := word(rng.IntN(20000))
		f := frameOf(wsproto.EventAggregateProgress, word(rng.IntN(20000)), &wsproto.AggregateProgress{RunID: runID, Message: msg})
		b, cut, fits, err := wsproto.FitFrame(nil, f, limit)
		if err != nil || !fits || len(b) > limit {
			t.Fatalf("case %d: fits %v, %d bytes over %d, %v", i, fits, len(b), limit, err)
		}
		var d decoded
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := asJSON(cut.Metadata.(*wsproto.AggregateProgress).Message)
		valid := asJSON(msg)
		if got != d.Metadata["message"] || !strings.HasPrefix(valid, strings.TrimSuffix(got, wsproto.CutMarker)) {
			t.Fatalf("case %d: message not a prefix of the original: got %d bytes %q…, frame %q…, original %d", i, len(got), got[max(0, len(got)-20):], fmt.Sprint(d.Metadata["message"])[:20], len(msg))
		}
	}
}

// asJSON is s as JSON carries it: each byte of invalid UTF-8 a U+FFFD.
func asJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func mustRaw(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkFitFrame is the rare path of the event path: a task result of
// 2 MiB cut to a 1 MiB frame.
func BenchmarkFitFrame(b *testing.B) {
	f := frameOf(wsproto.EventSolverCompleted, "Completed t1",
		&wsproto.SolverCompleted{RunID: runID, TaskID: "t1", Attempt: 1, Result: strings.Repeat("Lorem ipsum dolor sit amet. ", 2<<20/28)})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, fits, err := wsproto.FitFrame(nil, f, 1<<20); err != nil || !fits {
			b.Fatal(fits, err)
		}
	}
}
