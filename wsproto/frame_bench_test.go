package wsproto_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

const benchRunID = "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77"

// hotEvents are the events a run emits most, with metadata of a typical
// size: what BenchmarkAppendFrame measures one by one.
var hotEvents = []struct {
	event string
	meta  any
}{
	{wsproto.EventSolverStart, &wsproto.SolverStart{RunID: benchRunID, TaskID: "t2", Attempt: 1}},
	{wsproto.EventSolverProgress, &wsproto.SolverProgress{RunID: benchRunID, TaskID: "t2", Attempt: 1, Progress: 0.66, Message: "Working through it"}},
	{wsproto.EventSolverCompleted, &wsproto.SolverCompleted{RunID: benchRunID, TaskID: "t2", Attempt: 1,
		Result: "The garden gets six hours of sun; plant tomatoes along the south fence.", DurationMS: 1834,
		Usage: wsproto.Usage{PromptTokens: 812, CompletionTokens: 164, TotalTokens: 976}}},
	{wsproto.EventToolCall, &wsproto.ToolCall{RunID: benchRunID, TaskID: "t2", Attempt: 1, Round: 2,
		StepID: "tool_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", Tool: "web_search",
		Arguments: json.RawMessage(`{"query":"tomato sun hours","limit":5}`)}},
	{wsproto.EventToolResult, &wsproto.ToolResult{RunID: benchRunID, TaskID: "t2", Attempt: 1, Round: 2,
		StepID: "tool_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", Tool: "web_search", OK: true,
		Result: "1. Tomatoes need 6–8 hours of direct sun a day.\n2. Water at the base, in the morning.", DurationMS: 412}},
	{wsproto.EventTodoUpdated, &wsproto.TodoUpdated{RunID: benchRunID, TaskID: "t2", Version: 1, Items: []wsproto.TodoItem{
		{ID: "1", Content: "Gather material", Status: wsproto.TodoStatusInProgress, ToolCalls: 1},
		{ID: "2", Content: "Compare the options", Status: wsproto.TodoStatusPending},
		{ID: "3", Content: "Write the recommendation", Status: wsproto.TodoStatusPending}}}},
	{wsproto.EventTodoItemProgress, &wsproto.TodoItemProgress{RunID: benchRunID, TaskID: "t2", Version: 2,
		Item: wsproto.TodoItem{ID: "1", Content: "Gather material", Status: wsproto.TodoStatusCompleted, ToolCalls: 2}}},
	{wsproto.EventTodoCompleted, &wsproto.TodoCompleted{RunID: benchRunID, TaskID: "t2", Version: 4}},
	{wsproto.EventPlanStepCompleted, &wsproto.PlanStep{RunID: benchRunID, Step: 2, Description: "Drafting the tasks"}},
	{wsproto.EventAggregateProgress, &wsproto.AggregateProgress{RunID: benchRunID, Message: "Combining 4 results"}},
}

// BenchmarkAppendFrame: one sequenced frame of each hot event, encoded
// into a reused buffer as the session does.
func BenchmarkAppendFrame(b *testing.B) {
	for _, h := range hotEvents {
		b.Run(h.event, func(b *testing.B) {
			f := wsproto.Frame{Event: h.event, EventID: "0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", Seq: 1234,
				SessionID: "sess_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", Timestamp: time.Now(), Content: "Working through it",
				Metadata: h.meta}
			buf := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				buf, _ = wsproto.AppendFrame(buf[:0], f)
			}
		})
	}
}
