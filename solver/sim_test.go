package solver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// The simulated model runs the loop as §12 says, the same way every time.
func TestSimLoop(t *testing.T) {
	listFiles := fakeTool{name: "list_files", call: func(context.Context, json.RawMessage) (string, error) { return "a.md\nb/", nil }}
	tests := []struct {
		name   string
		task   wsproto.Task
		tools  []tool.Tool
		answer string // what the user answers; "" answers nothing
		want   []string
		result string
	}{
		{
			name: "default: a todo list, marked completed, then the answer",
			task: wsproto.Task{ID: "t", Title: "Write the intro"},
			want: []string{
				`tool_call t 1 1 todo_write {"items":[{"content":"Gather material for Write the intro","id":"1"},` +
					`{"content":"Work through Write the intro","id":"2"},{"content":"Check the result","id":"3"}]}`,
				`tool_result t 1 1 todo_write true "Todo list written: 3 items."`, `todo.updated t v1 3 items`,
				`tool_call t 1 2 todo_update {"id":"1","status":"completed"}`, `tool_result t 1 2 todo_update true "Item 1 is now completed."`,
				`todo.item_progress t v2 1 completed 0`,
				`tool_call t 1 2 todo_update {"id":"2","status":"completed"}`, `tool_result t 1 2 todo_update true "Item 2 is now completed."`,
				`todo.item_progress t v3 2 completed 0`,
				`tool_call t 1 2 todo_update {"id":"3","status":"completed"}`, `todo.item_progress t v4 3 completed 0`, `todo.completed t v5`,
			},
			result: "Write the intro: done.",
		},
		{
			name:  "tool directives in order, list_files when offered, quoted in the answer",
			task:  wsproto.Task{ID: "u", Title: "Look", Description: `[sim:tool=echo {"say":"a]b"}] [sim:tool=nosuch {}]`},
			tools: []tool.Tool{echo("echo"), listFiles},
			want: []string{
				`tool_call u 1 2 echo {"say":"a]b"}`, `tool_result u 1 2 echo true "echo got {\"say\":\"a]b\"}"`,
				`tool_call u 1 3 nosuch {}`,
				`tool_call u 1 4 list_files {}`, `tool_result u 1 4 list_files true "a.md\nb/"`,
			},
			result: `Look: done. echo: "echo got {\"say\":\"a]b\"}". nosuch: "there is no tool \"nosuch\"; ` +
				`the tools are: todo_write, todo_update, ask_user, echo, list_files". list_files: "a.md\nb/".`,
		},
		{
			name:   "ask: the answer is quoted",
			task:   wsproto.Task{ID: "v", Title: "Ask", Description: "[sim:ask=Which city?]"},
			answer: "Porto",
			want:   []string{`tool_call v 1 2 ask_user {"question":"Which city?"}`, `ask v Which city?`, `tool_result v 1 2 ask_user true "The user answered: Porto"`},
			result: `Ask: done. ask_user: "The user answered: Porto".`,
		},
		{
			name:   "result_bytes: the answer padded to that size",
			task:   wsproto.Task{ID: "w", Title: "Sized", Description: "[sim:result_bytes=60]"},
			result: "Sized: done. Lorem ipsum dolor sit amet, consectetur adipisc",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the same every time
				rec := &recorder{}
				if tt.answer != "" {
					rec.answer = func(context.Context, string, string) (string, bool) { return tt.answer, true }
				}
				rep := New([]wsproto.Task{tt.task}, &Sim{}, rec, Options{Loop: Loop{Tools: toolSet(t, tt.tools...)}}).Execute(t.Context())
				lines := loopLines(rec.events())
				for _, w := range tt.want {
					if !slices.Contains(lines, w) {
						t.Errorf("missing %s in:\n%s", w, strings.Join(lines, "\n"))
					}
				}
				if got := rep.Results[tt.task.ID]; got != tt.result {
					t.Errorf("result %q, want %q", got, tt.result)
				}
				if last := lines[len(lines)-1]; !strings.HasPrefix(last, "todo.completed") {
					t.Errorf("the todo list did not end completed: %s", last)
				}
			}
		})
	}
}

func TestPadTo(t *testing.T) {
	tests := []struct {
		name, s string
		n       int
		want    string
	}{
		{"padded", "ab", 10, "ab Lorem i"},
		{"exact", "abc", 3, "abc"},
		{"cut", "abcdef", 4, "abcd"},
		{"cut through a rune", "aé", 2, "a Lorem"[:2]},
		{"empty", "abc", 0, ""},
		{"past the filler", "", 130, strings.Repeat(" Lorem ipsum dolor sit amet, consectetur adipiscing elit.", 3)[:130]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := padTo(tt.s, tt.n); got != tt.want || len(got) != tt.n {
				t.Errorf("padTo(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
			}
		})
	}
}

func TestSimFaults(t *testing.T) {
	fast := failure.Policy{MaxRetries: 3, Base: time.Microsecond, Max: time.Microsecond}
	rec := &recorder{}
	tasks := []wsproto.Task{{ID: "f", Title: "Flaky", Description: "[sim:fail=network*2]"}}
	rep := New(tasks, &Sim{}, rec, Options{Retry: fast}).Execute(t.Context())
	lines := rec.events()
	if rep.Tasks[0].Status != wsproto.TaskCompleted || index(lines, "fail f 1 network") < 0 || index(lines, "fail f 2 network") < 0 || index(lines, "done f 3") < 0 {
		t.Errorf("status %s, events %q", rep.Tasks[0].Status, lines)
	}
	// The failing executions fail before any tool call: attempt 3's
	// todo_write is the list's first version.
	if i := index(lines, "todo.updated f v1 3 items"); i < index(lines, "start f 3") {
		t.Errorf("todo events before the successful attempt: %q", lines)
	}
}

func TestSplitPieces(t *testing.T) {
	tests := []struct {
		name string
		s    string
		max  int
	}{
		{name: "empty", s: "", max: 1},
		{name: "one word", s: "word", max: 1},
		{name: "a sentence", s: "What time is it in Tokyo?: done.", max: 4},
		{name: "two words", s: "a b", max: 2},
		{name: "spaces at the ends", s: " lead and trail ", max: 4},
		{name: "a long word then words", s: strings.Repeat("x", 50) + " y z", max: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pieces := splitPieces(tt.s, simStreamPieces)
			if strings.Join(pieces, "") != tt.s || len(pieces) > simStreamPieces {
				t.Errorf("splitPieces(%q) = %q: not the text in at most %d pieces", tt.s, pieces, simStreamPieces)
			}
			if len(pieces) < tt.max {
				t.Errorf("splitPieces(%q) = %q: fewer than %d pieces", tt.s, pieces, tt.max)
			}
		})
	}
}
