package wsproto

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// tricky holds every character the encoders escape or replace: quotes,
// backslashes, control characters (\b and \f have short escapes), HTML's
// <, > and &, U+2028, U+2029 and invalid UTF-8, among ordinary text.
const tricky = "quote\" back\\ ctl\x00\x01\x1f\b\f\n\r\t <b>&amp; \u2028\u2029 bad\xff\xc3( ok é 日本 🎉 \x7f"

// checkAppendJSON holds m.appendJSON to json.Marshal: the same bytes after
// a prefix that is left alone, or ok false exactly when fallback is set,
// with dst returned at its length.
func checkAppendJSON(t *testing.T, m metadataAppender, fallback bool) {
	t.Helper()
	const prefix = `{"metadata":`
	got, ok := m.appendJSON([]byte(prefix))
	if ok == fallback {
		t.Fatalf("appendJSON ok = %v, want %v", ok, !fallback)
	}
	if !ok {
		if string(got) != prefix {
			t.Errorf("a fallback left %q, want the prefix alone", got)
		}
		return
	}
	want, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("json.Marshal refuses what appendJSON wrote %s: %v", got, err)
	}
	if !bytes.Equal(got, append([]byte(prefix), want...)) {
		t.Errorf("appendJSON:\n got %s\nwant %s%s", got, prefix, want)
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	items := []TodoItem{
		{ID: "1", Content: "Gather material", Status: TodoStatusInProgress, ToolCalls: 2},
		{ID: "2", Content: tricky, Status: TodoStatusBlocked, Note: tricky},
		{},
	}
	tests := []struct {
		name     string
		meta     metadataAppender
		fallback bool // json.Marshal does the work: it errs, or writes null
	}{
		{"solver.start", &SolverStart{RunID: "run_1", TaskID: "t1", Attempt: 2}, false},
		{"solver.start empty", &SolverStart{}, false},
		{"solver.start tricky, negative", &SolverStart{RunID: tricky, TaskID: tricky, Attempt: -3}, false},
		{"solver.start nil", (*SolverStart)(nil), true},

		{"solver.progress", &SolverProgress{RunID: "run_1", TaskID: "t1", Attempt: 1, Progress: 0.66, Message: "Working"}, false},
		{"solver.progress empty", &SolverProgress{}, false},
		{"solver.progress tricky", &SolverProgress{RunID: tricky, TaskID: tricky, Message: tricky, Progress: 1}, false},
		{"solver.progress negative zero", &SolverProgress{Progress: math.Copysign(0, -1)}, false},
		{"solver.progress third", &SolverProgress{Progress: 1.0 / 3}, false},
		{"solver.progress below 1e-6", &SolverProgress{Progress: 1e-7}, false},
		{"solver.progress at 1e-6", &SolverProgress{Progress: 1e-6}, false},
		{"solver.progress negative below 1e-6", &SolverProgress{Progress: -1.5e-7}, false},
		{"solver.progress smallest", &SolverProgress{Progress: math.SmallestNonzeroFloat64}, false},
		{"solver.progress below 1e21", &SolverProgress{Progress: 999999999999999900000}, false},
		{"solver.progress at 1e21", &SolverProgress{Progress: 1e21}, false},
		{"solver.progress largest", &SolverProgress{Progress: math.MaxFloat64}, false},
		{"solver.progress integer", &SolverProgress{Progress: 123456789}, false},
		{"solver.progress NaN", &SolverProgress{Progress: math.NaN()}, true},
		{"solver.progress +Inf", &SolverProgress{Progress: math.Inf(1)}, true},
		{"solver.progress -Inf", &SolverProgress{Progress: math.Inf(-1)}, true},
		{"solver.progress nil", (*SolverProgress)(nil), true},

		{"solver.completed", &SolverCompleted{RunID: "run_1", TaskID: "t1", Attempt: 1, Result: "done", DurationMS: 1834,
			Usage: Usage{PromptTokens: 812, CompletionTokens: 164, TotalTokens: 976}}, false},
		{"solver.completed empty", &SolverCompleted{}, false},
		{"solver.completed tricky, extremes", &SolverCompleted{RunID: tricky, Result: tricky + strings.Repeat("x", 5000),
			DurationMS: math.MinInt64, Usage: Usage{PromptTokens: math.MaxInt, TotalTokens: math.MinInt}}, false},
		{"solver.completed nil", (*SolverCompleted)(nil), true},

		{"agent.tool_call", &ToolCall{RunID: "run_1", TaskID: "t1", Attempt: 1, Round: 2, StepID: "tool_1", Tool: "web_search",
			Arguments: json.RawMessage(`{"query":"tomatoes","limit":5}`)}, false},
		{"agent.tool_call empty", &ToolCall{}, false}, // nil arguments: null
		{"agent.tool_call tricky", &ToolCall{RunID: tricky, TaskID: tricky, StepID: tricky, Tool: tricky,
			Arguments: json.RawMessage(`{"q":"a<b>&c \u2028\u2029 \"x\\\" é \ud83c\udf89","n":[1,2.5e-7,true,null]}`)}, false},
		{"agent.tool_call arguments to compact", &ToolCall{Arguments: json.RawMessage(" {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b c\":\" x \" } ")}, false},
		{"agent.tool_call arguments with raw separators", &ToolCall{Arguments: json.RawMessage("{\"a\":\"\u2028\u2029<\"}")}, false},
		{"agent.tool_call arguments with invalid UTF-8", &ToolCall{Arguments: json.RawMessage("{\"a\":\"\xff\xfe\"}")}, false},
		{"agent.tool_call arguments not an object", &ToolCall{Arguments: json.RawMessage(` "s" `)}, false},
		{"agent.tool_call arguments empty", &ToolCall{Arguments: json.RawMessage{}}, true},
		{"agent.tool_call arguments invalid", &ToolCall{Arguments: json.RawMessage(`{"a":`)}, true},
		{"agent.tool_call arguments two values", &ToolCall{Arguments: json.RawMessage(`{} {}`)}, true},
		{"agent.tool_call nil", (*ToolCall)(nil), true},

		{"agent.tool_result", &ToolResult{RunID: "run_1", TaskID: "t1", Attempt: 1, Round: 2, StepID: "tool_1", Tool: "web_search",
			OK: true, Result: "1. Sun.\n2. Water.", Truncated: true, DurationMS: 412}, false},
		{"agent.tool_result empty", &ToolResult{}, false},
		{"agent.tool_result tricky", &ToolResult{RunID: tricky, Tool: tricky, Result: tricky, DurationMS: -1}, false},
		{"agent.tool_result nil", (*ToolResult)(nil), true},

		{"todo.updated", &TodoUpdated{RunID: "run_1", TaskID: "t1", Version: 3, Items: items}, false},
		{"todo.updated nil items", &TodoUpdated{RunID: "run_1", TaskID: "t1", Version: 1}, false},
		{"todo.updated empty items", &TodoUpdated{Items: []TodoItem{}}, false},
		{"todo.updated one empty item", &TodoUpdated{Items: []TodoItem{{}}}, false},
		{"todo.updated nil", (*TodoUpdated)(nil), true},

		{"todo.item_progress", &TodoItemProgress{RunID: "run_1", TaskID: "t1", Version: 2, Item: items[0]}, false},
		{"todo.item_progress with a note", &TodoItemProgress{RunID: tricky, Item: items[1]}, false},
		{"todo.item_progress empty", &TodoItemProgress{}, false},
		{"todo.item_progress nil", (*TodoItemProgress)(nil), true},

		{"todo.completed", &TodoCompleted{RunID: "run_1", TaskID: "t1", Version: 4}, false},
		{"todo.completed empty", &TodoCompleted{}, false},
		{"todo.completed nil", (*TodoCompleted)(nil), true},

		{"plan.step_completed", &PlanStep{RunID: "run_1", Step: 2, Description: "Drafting the tasks"}, false},
		{"plan.step_completed tricky", &PlanStep{RunID: tricky, Step: -1, Description: tricky}, false},
		{"plan.step_completed empty", &PlanStep{}, false},
		{"plan.step_completed nil", (*PlanStep)(nil), true},

		{"aggregate.progress", &AggregateProgress{RunID: "run_1", Message: "Combining 4 results"}, false},
		{"aggregate.progress tricky", &AggregateProgress{RunID: tricky, Message: tricky}, false},
		{"aggregate.progress empty", &AggregateProgress{}, false},
		{"aggregate.progress nil", (*AggregateProgress)(nil), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkAppendJSON(t, tt.meta, tt.fallback)
		})
	}
}

// TestAppendFrameMetadata holds AppendFrame to what it wrote before the
// hand encoders: the envelope around json.Marshal's metadata, and on an
// error nothing appended.
func TestAppendFrameMetadata(t *testing.T) {
	head := Frame{Event: EventSolverProgress, EventID: "e1", Seq: 7, SessionID: "s", StepID: tricky,
		Timestamp: time.Date(2026, 11, 22, 10, 0, 0, 5, time.UTC), Content: tricky}
	tests := []struct {
		name    string
		meta    any
		wantErr string // the error's end, or "" for none
	}{
		{"hand encoded", &SolverProgress{RunID: "r", TaskID: tricky, Progress: 0.5, Message: tricky}, ""},
		{"hand encoded, empty", &TodoUpdated{}, ""},
		{"through encoding/json", &SolverSkipped{RunID: "r", TaskID: tricky, Reason: ReasonDependencyFailed}, ""},
		{"a value, not a pointer", SolverStart{RunID: "r"}, ""},
		{"nil", nil, ""},
		{"NaN progress", &SolverProgress{Progress: math.NaN()}, "unsupported value: NaN"},
		{"arguments not JSON", &ToolCall{Arguments: json.RawMessage(`{`)}, "unexpected end of JSON input"},
		{"a nil pointer", (*SolverStart)(nil), "not a JSON object"},
		{"not an object", []int{1}, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := head
			f.Metadata = tt.meta
			dst := []byte("earlier frames")
			got, err := AppendFrame(dst, f)
			if tt.wantErr != "" {
				if err == nil || !strings.HasSuffix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one ending %q", err, tt.wantErr)
				}
				if string(got) != "earlier frames" {
					t.Errorf("after an error dst is %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var meta []byte
			if tt.meta != nil {
				meta, _ = json.Marshal(tt.meta)
			}
			if want := appendFrame([]byte("earlier frames"), f, meta); !bytes.Equal(got, want) {
				t.Errorf("AppendFrame:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// FuzzAppendJSON builds every hand-encoded type from the fuzzed values and
// holds its encoding to json.Marshal's. ok false must mean json.Marshal
// refuses the value.
func FuzzAppendJSON(f *testing.F) {
	f.Add("run_1", "t1", "Working through it", int64(1), 0.66, []byte(`{"query":"x"}`), true)
	f.Add("", "", "", int64(0), 0.0, []byte(nil), false)
	f.Add(tricky, tricky, tricky, int64(-1), -1e-7, []byte(" [1, \"<\u2028>\" ,{}] "), true)
	f.Add("é\u2029", "\x00", "\xed\xa0\x80", int64(math.MaxInt64), 1e21, []byte(`{"a":`), false)
	f.Add("a", "b", "c", int64(math.MinInt64), math.Inf(1), []byte{}, true)
	f.Add("<", ">", "&", int64(42), 5e-324, []byte("\"\xff\""), false)
	f.Fuzz(func(t *testing.T, a, b, c string, n int64, x float64, raw []byte, flag bool) {
		item := TodoItem{ID: a, Content: b, Status: c, ToolCalls: int(n), Note: c}
		if flag {
			item.Note = ""
		}
		var items []TodoItem
		switch {
		case flag && len(a) > 0:
			items = []TodoItem{item, {ID: b}}
		case flag:
			items = []TodoItem{}
		}
		var args json.RawMessage
		if raw != nil || !flag {
			args = raw
		}
		all := []metadataAppender{
			&SolverStart{RunID: a, TaskID: b, Attempt: int(n)},
			&SolverProgress{RunID: a, TaskID: b, Attempt: int(n), Progress: x, Message: c},
			&SolverCompleted{RunID: a, TaskID: b, Attempt: int(n), Result: c, DurationMS: n,
				Usage: Usage{PromptTokens: int(n), CompletionTokens: int(n >> 3), TotalTokens: -int(n)}},
			&ToolCall{RunID: a, TaskID: b, Attempt: int(n), Round: int(n >> 1), StepID: c, Tool: a, Arguments: args},
			&ToolResult{RunID: a, TaskID: b, Attempt: int(n), Round: int(n >> 1), StepID: c, Tool: a, OK: flag,
				Result: c, Truncated: !flag, DurationMS: n},
			&TodoUpdated{RunID: a, TaskID: b, Version: int(n), Items: items},
			&TodoItemProgress{RunID: a, TaskID: b, Version: int(n), Item: item},
			&TodoCompleted{RunID: a, TaskID: b, Version: int(n)},
			&PlanStep{RunID: a, Step: int(n), Description: c},
			&AggregateProgress{RunID: a, Message: c},
		}
		for _, m := range all {
			_, err := json.Marshal(m)
			checkAppendJSON(t, m, err != nil)
		}
	})
}
