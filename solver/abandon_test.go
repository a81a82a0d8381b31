package solver

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// A tool that ignores its context holds up neither its task nor the run:
// at its timeout, or at the task's cancel, the loop goes on with that as
// the call's result, and the call is abandoned to Loop.Calls until the
// tool returns.
func TestAbandonedToolCall(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		cancel  bool // cancel the task once the tool runs
		status  string
		result  string
	}{
		{name: "timeout", timeout: 50 * time.Millisecond, status: wsproto.TaskCompleted,
			result: `tool_result t 1 1 stuck false "the tool did not answer within 50ms"`},
		{name: "cancel", timeout: time.Hour, cancel: true, status: wsproto.TaskCancelled,
			result: `tool_result t 1 1 stuck false "cancelled"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
			stuck := fakeTool{name: "stuck", call: func(context.Context, json.RawMessage) (string, error) {
				close(entered)
				<-release // not ctx: this tool does not obey it
				close(returned)
				return "too late", nil
			}}
			defer func() {
				select {
				case <-release:
				default:
					close(release) // the test failed: let the goroutine end for goleak
				}
			}()
			group := &tool.Group{}
			rec := &recorder{}
			r := New([]wsproto.Task{task("t")}, &scripted{next: byRound(calls(1, `stuck {}`))}, rec,
				Options{Loop: Loop{Tools: toolSet(t, stuck), ToolTimeout: tt.timeout, Calls: group}})
			done := make(chan Report, 1)
			go func() { done <- r.Execute(t.Context()) }()
			<-entered
			if tt.cancel {
				if err := r.CancelTask(t.Context(), "t"); err != nil {
					t.Fatal(err)
				}
			}
			var rep Report
			select {
			case rep = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the run did not end while its tool call ran on; events %q", rec.events())
			}
			if got := rep.Tasks[0].Status; got != tt.status || !slices.Contains(rec.events(), tt.result) {
				t.Errorf("status %s, events %q; want %s and %s", got, rec.events(), tt.status, tt.result)
			}
			if n := group.Abandoned(); n != 1 {
				t.Errorf("Abandoned() = %d while the tool runs, want 1", n)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			if err := group.Wait(ctx); err == nil {
				t.Errorf("Wait returned nil while the tool runs")
			}
			cancel()
			close(release)
			<-returned
			ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if err := group.Wait(ctx); err != nil {
				t.Fatalf("Wait after the tool returned: %v", err)
			}
			if n := group.Abandoned(); n != 0 {
				t.Errorf("Abandoned() = %d after the tool returned, want 0", n)
			}
		})
	}
}

// Without Loop.Calls the Run owns its abandoned calls: Execute returns
// once they have ended.
func TestRunWaitsForItsAbandonedCalls(t *testing.T) {
	release, returned := make(chan struct{}), make(chan struct{})
	stuck := fakeTool{name: "stuck", call: func(context.Context, json.RawMessage) (string, error) {
		<-release
		close(returned)
		return "", nil
	}}
	rec := &recorder{}
	r := New([]wsproto.Task{task("t")}, &scripted{next: byRound(calls(1, `stuck {}`))}, rec,
		Options{Loop: Loop{Tools: toolSet(t, stuck), ToolTimeout: 20 * time.Millisecond}})
	done := make(chan Report, 1)
	go func() { done <- r.Execute(t.Context()) }()
	waitLine(t, rec, `tool_result t 1 1 stuck false "the tool did not answer within 20ms"`)
	close(release)
	rep := <-done
	select {
	case <-returned:
	default:
		t.Errorf("Execute returned before its abandoned call ended")
	}
	if rep.Tasks[0].Status != wsproto.TaskCompleted {
		t.Errorf("status %s", rep.Tasks[0].Status)
	}
}
