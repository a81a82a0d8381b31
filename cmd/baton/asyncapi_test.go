package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/asyncapitest"
	"github.com/baton-run/baton/wsproto"
)

func spec(t *testing.T) *asyncapitest.Spec {
	t.Helper()
	s, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The spec names exactly wsproto's events, each direction's, and its
// envelopes say what §2 says: seq on sequenced events only, step_id on
// agent.user_confirm, agent.tool_call and agent.tool_result only.
func TestSpecEvents(t *testing.T) {
	s := spec(t)
	server := []string{
		wsproto.EventConnected, wsproto.EventError, wsproto.EventStateSnapshot,
		wsproto.EventPlanStart, wsproto.EventPlanStepCompleted, wsproto.EventPlanCompleted, wsproto.EventPlanCancelled,
		wsproto.EventPlanDecision, wsproto.EventPlanUpdated, wsproto.EventUserConfirm, wsproto.EventConfirmSettled, wsproto.EventFinalAnswer,
		wsproto.EventToolCall, wsproto.EventToolResult,
		wsproto.EventSolverStart, wsproto.EventSolverProgress, wsproto.EventSolverCompleted, wsproto.EventSolverCancelled,
		wsproto.EventSolverSkipped, wsproto.EventSolverRestarted,
		wsproto.EventExecutionError, wsproto.EventRecoveryStarted, wsproto.EventRecoverySuccess, wsproto.EventRecoveryFailed,
		wsproto.EventAggregateStart, wsproto.EventAggregateProgress, wsproto.EventAggregateCompleted,
		wsproto.EventPipelineCompleted, wsproto.EventPipelineCancelled,
		wsproto.EventTodoUpdated, wsproto.EventTodoItemProgress, wsproto.EventTodoCompleted,
	}
	client := []string{
		wsproto.EventUserMessage, wsproto.EventUserSolve, wsproto.EventUserResponse, wsproto.EventUserCancel,
		wsproto.EventUserCancelTask, wsproto.EventUserRestart, wsproto.EventUserReplan, wsproto.EventUserAck,
		wsproto.EventUserReconnect,
	}
	slices.Sort(server)
	slices.Sort(client)
	if got := s.Events(asyncapitest.FromServer); !slices.Equal(got, server) {
		t.Errorf("server events in the spec:\n%v\nin wsproto:\n%v", got, server)
	}
	if got := s.Events(asyncapitest.FromClient); !slices.Equal(got, client) {
		t.Errorf("client events in the spec:\n%v\nin wsproto:\n%v", got, client)
	}
	for _, e := range server {
		p := s.Payload(asyncapitest.FromServer, e)
		required, _ := p["required"].([]any)
		props, _ := p["properties"].(map[string]any)
		stepID := e == wsproto.EventUserConfirm || e == wsproto.EventToolCall || e == wsproto.EventToolResult
		for field, want := range map[string]bool{"seq": wsproto.Sequenced(e), "step_id": stepID} {
			_, declared := props[field]
			if slices.Contains(required, any(field)) != want || declared != want {
				t.Errorf("%s: %s required %v, declared %v; want %v", e, field, slices.Contains(required, any(field)), declared, want)
			}
		}
		if p["additionalProperties"] != false {
			t.Errorf("%s: the envelope is not closed", e)
		}
	}
}

var ts = time.Date(2026, 11, 22, 10, 0, 0, 123456789, time.UTC)

// encode is a frame as Baton writes it: wsproto's encoder and typed metadata.
func encode(t *testing.T, f wsproto.Frame) []byte {
	t.Helper()
	f.EventID, f.SessionID, f.Timestamp = "01968a1e-7b1c-7d3e-9c4a-2f8e6d5b4a31", "sess_1", ts
	b, err := wsproto.AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit decodes a frame, lets change alter it, and encodes it again.
func edit(t *testing.T, frame []byte, change func(f, meta map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(frame))
	dec.UseNumber()
	var f map[string]any
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	meta, _ := f["metadata"].(map[string]any)
	change(f, meta)
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The spec catches drift: frames as Baton writes them pass, and each
// mutation of one — a field missing, added, mistyped, out of its enum, in
// the wrong place — fails.
func TestSpecRejectsDrift(t *testing.T) {
	s := spec(t)
	tasks := []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}, {ID: "b", Title: "B", DependsOn: []string{"a"}}}
	planStart := encode(t, wsproto.Frame{Event: wsproto.EventPlanStart, Seq: 3, Metadata: &wsproto.PlanStart{RunID: "run_1", Request: "r"}})
	planDone := encode(t, wsproto.Frame{Event: wsproto.EventPlanCompleted, Seq: 4, Metadata: &wsproto.PlanCompleted{RunID: "run_1", PlanSummary: "s", Tasks: tasks}})
	connected := encode(t, wsproto.Frame{Event: wsproto.EventConnected, Metadata: &wsproto.Connected{SessionID: "sess_1", ResumeToken: "tok", BufferCapacity: 1000}})
	confirm := encode(t, wsproto.Frame{Event: wsproto.EventUserConfirm, Seq: 5, StepID: "confirm_plan_1",
		Metadata: &wsproto.UserConfirm{RunID: "run_1", StepID: "confirm_plan_1", Kind: wsproto.ConfirmPlan, PlanSummary: "s", Tasks: tasks, ExpiresAt: ts}})
	i := 1
	sysErr := encode(t, wsproto.Frame{Event: wsproto.EventError, Metadata: &wsproto.Error{Code: wsproto.CodeInvalidTasks, Message: "m", RefType: wsproto.EventUserSolve,
		Details: []wsproto.TaskProblem{{Code: wsproto.ProblemDuplicateID, Message: "m", Index: &i, TaskID: "a"}}}})
	skipped := encode(t, wsproto.Frame{Event: wsproto.EventSolverSkipped, Seq: 9,
		Metadata: &wsproto.SolverSkipped{RunID: "run_1", TaskID: "b", Reason: wsproto.ReasonDependencyFailed, Dependency: "a"}})
	progress := encode(t, wsproto.Frame{Event: wsproto.EventSolverProgress, Seq: 7,
		Metadata: &wsproto.SolverProgress{RunID: "run_1", TaskID: "a", Attempt: 1, Progress: 0.5, Message: "m"}})
	planErr := encode(t, wsproto.Frame{Event: wsproto.EventExecutionError, Seq: 2, Metadata: &wsproto.ExecutionError{RunID: "run_1", Stage: "plan",
		Attempt: 1, ErrorType: "network", Message: "m (network)", Recoverable: true, SuggestedAction: "retry"}})
	ack := []byte(`{"event":"user.ack","metadata":{"last_seq":3}}`)
	response := []byte(`{"event":"user.response","metadata":{"step_id":"confirm_task_1","action":"skip"}}`)
	none := func(f, m map[string]any) {}

	tests := []struct {
		name   string
		dir    asyncapitest.Direction
		frame  []byte
		change func(f, meta map[string]any)
		valid  bool
	}{
		{"plan.start as written", asyncapitest.FromServer, planStart, none, true},
		{"plan.completed as written", asyncapitest.FromServer, planDone, none, true},
		{"system.connected as written", asyncapitest.FromServer, connected, none, true},
		{"agent.user_confirm as written", asyncapitest.FromServer, confirm, none, true},
		{"system.error as written", asyncapitest.FromServer, sysErr, none, true},
		{"solver.skipped as written", asyncapitest.FromServer, skipped, none, true},
		{"solver.progress as written", asyncapitest.FromServer, progress, none, true},
		{"planning error as written", asyncapitest.FromServer, planErr, none, true},
		{"user.ack as written", asyncapitest.FromClient, ack, none, true},
		{"user.response as written", asyncapitest.FromClient, response, none, true},

		{"a required field missing", asyncapitest.FromServer, planStart, func(f, m map[string]any) { delete(m, "run_id") }, false},
		{"a field the spec does not know", asyncapitest.FromServer, planStart, func(f, m map[string]any) { m["colour"] = "blue" }, false},
		{"a field of the wrong type", asyncapitest.FromServer, planStart, func(f, m map[string]any) { m["request"] = 5 }, false},
		{"an envelope field the spec does not know", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["trace"] = "x" }, false},
		{"metadata null", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["metadata"] = nil }, false},
		{"no seq on a sequenced event", asyncapitest.FromServer, planStart, func(f, m map[string]any) { delete(f, "seq") }, false},
		{"seq 0", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["seq"] = 0 }, false},
		{"seq on an unsequenced frame", asyncapitest.FromServer, connected, func(f, m map[string]any) { f["seq"] = 1 }, false},
		{"step_id where §2 allows none", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["step_id"] = "x" }, false},
		{"no step_id on a confirmation", asyncapitest.FromServer, confirm, func(f, m map[string]any) { delete(f, "step_id") }, false},
		{"a timestamp not in UTC", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["timestamp"] = "2026-11-22T11:00:00.123+01:00" }, false},
		{"a timestamp with trailing zeros", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["timestamp"] = "2026-11-22T10:00:00.120Z" }, false},
		{"an event id that is no UUID v7", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["event_id"] = "0e7d4c52-0f5e-4f47-9d43-5b1c1c8f3f6a" }, false},
		{"an event the spec does not have", asyncapitest.FromServer, planStart, func(f, m map[string]any) { f["event"] = "plan.teleport" }, false},
		{"a client event from the server", asyncapitest.FromServer, ack, none, false},
		{"depends_on null", asyncapitest.FromServer, planDone, func(f, m map[string]any) { m["tasks"].([]any)[0].(map[string]any)["depends_on"] = nil }, false},
		{"an error code outside §7", asyncapitest.FromServer, sysErr, func(f, m map[string]any) { m["code"] = "teapot" }, false},
		{"a problem code outside §5.1", asyncapitest.FromServer, sysErr, func(f, m map[string]any) { m["details"].([]any)[0].(map[string]any)["code"] = "bad" }, false},
		{"a confirmation kind with another kind's fields", asyncapitest.FromServer, confirm, func(f, m map[string]any) { m["kind"] = "tool_confirm" }, false},
		{"a confirmation step_id of another kind", asyncapitest.FromServer, confirm, func(f, m map[string]any) { m["step_id"] = "confirm_task_1" }, false},
		{"a dependency_failed skip naming no dependency", asyncapitest.FromServer, skipped, func(f, m map[string]any) { delete(m, "dependency") }, false},
		{"a synthesized skip naming a dependency", asyncapitest.FromServer, skipped, func(f, m map[string]any) { m["reason"] = "synthesized" }, false},
		{"progress past 1", asyncapitest.FromServer, progress, func(f, m map[string]any) { m["progress"] = 1.5 }, false},
		{"a fractional attempt", asyncapitest.FromServer, progress, func(f, m map[string]any) { m["attempt"] = 1.5 }, false},
		{"a planning error naming a task too", asyncapitest.FromServer, planErr, func(f, m map[string]any) { m["task_id"] = "a" }, false},
		{"a negative ack", asyncapitest.FromClient, ack, func(f, m map[string]any) { m["last_seq"] = -1 }, false},
		{"an ack without last_seq", asyncapitest.FromClient, ack, func(f, m map[string]any) { delete(m, "last_seq") }, false},
		{"a response without step_id", asyncapitest.FromClient, response, func(f, m map[string]any) { delete(m, "step_id") }, false},
		{"a response with an unknown action", asyncapitest.FromClient, response, func(f, m map[string]any) { m["action"] = "ignore" }, false},
		{"a server event from the client", asyncapitest.FromClient, planStart, none, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := edit(t, tt.frame, tt.change)
			_, err := s.Validate(tt.dir, frame)
			if (err == nil) != tt.valid {
				t.Fatalf("Validate(%s) = %v, want valid %v", frame, err, tt.valid)
			}
		})
	}
}

// fakeReporter collects what checkWire reports.
type fakeReporter struct{ errs []string }

func (r *fakeReporter) Helper() {}
func (r *fakeReporter) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// checkWire fails a test whose server sends a frame that breaks the spec,
// or refuses a client frame the spec allows, and counts what it validated.
func TestCheckWire(t *testing.T) {
	good := encode(t, wsproto.Frame{Event: wsproto.EventPlanStart, Seq: 1, Metadata: &wsproto.PlanStart{RunID: "run_1", Request: "r"}})
	bad := edit(t, good, func(f, m map[string]any) { delete(m, "run_id") })
	tests := []struct {
		name       string
		fromServer [][]byte
		fromClient []string
		want       []string // substrings of the errors reported, in order
	}{
		{"frames as the spec says", [][]byte{good}, []string{`{"event":"user.cancel"}`}, nil},
		{"a bad server frame", [][]byte{good, bad}, nil, []string{"at '/metadata': missing property 'run_id'"}},
		{"a client frame off the spec", nil, []string{`{"event":"user.dance"}`, `{"event":"user.ack","metadata":{"last_seq":"3"}}`}, nil},
		{"many bad server frames", [][]byte{bad, bad, bad, bad, bad, bad, bad}, nil,
			[]string{"breaks", "breaks", "breaks", "breaks", "breaks", "and 2 more"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tap := serveFrames(t, tt.fromServer, tt.fromClient)
			r, seen := &fakeReporter{}, newTally()
			checkWire(r, tap, seen)
			if len(r.errs) != len(tt.want) {
				t.Fatalf("reported %d errors, want %d: %q", len(r.errs), len(tt.want), r.errs)
			}
			for i, w := range tt.want {
				if !strings.Contains(r.errs[i], w) {
					t.Errorf("error %d = %q, want it to contain %q", i, r.errs[i], w)
				}
			}
			if tt.want == nil && seen.fromServer[wsproto.EventPlanStart] != len(tt.fromServer) {
				t.Errorf("counted %v, want %d plan.start", seen.fromServer, len(tt.fromServer))
			}
		})
	}
}

// serveFrames runs a WebSocket server behind a Tap that reads the client's
// frames, then writes its own, and returns the Tap once both are done.
func serveFrames(t *testing.T, fromServer [][]byte, fromClient []string) *asyncapitest.Tap {
	t.Helper()
	tap := new(asyncapitest.Tap)
	done := make(chan struct{})
	srv := httptest.NewServer(tap.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for range fromClient {
			if _, _, err := ws.Read(r.Context()); err != nil {
				return
			}
		}
		for _, f := range fromServer {
			ws.Write(r.Context(), websocket.MessageText, f)
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, wsURL(srv.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	for _, f := range fromClient {
		ws.Write(ctx, websocket.MessageText, []byte(f))
	}
	for {
		if _, _, err := ws.Read(ctx); err != nil {
			break
		}
	}
	<-done
	return tap
}

// The suite's coverage check names what the spec has and no test produced,
// and what notProduced excuses but a test produced.
func TestWireCoverage(t *testing.T) {
	s := spec(t)
	serverEvents, clientEvents, variants := variantsOf(s)
	full := func() *tally {
		seen := newTally()
		for _, e := range serverEvents {
			seen.fromServer[e] = 1
		}
		for _, e := range clientEvents {
			seen.fromClient[e] = 1
		}
		for _, v := range variants {
			if _, excused := notProduced[v]; !excused {
				seen.variants[v] = 1
			}
		}
		return seen
	}
	tests := []struct {
		name   string
		excuse string // a variant notProduced excuses during the case
		change func(*tally)
		want   []string // "" for no error
	}{
		{"everything", "", func(*tally) {}, nil},
		{"an event never sent", "", func(s *tally) { delete(s.fromServer, wsproto.EventPlanUpdated) }, []string{"never produced plan.updated"}},
		{"a client event never sent", "", func(s *tally) { delete(s.fromClient, wsproto.EventUserReplan) }, []string{"never produced user.replan"}},
		{"a kind never asked", "", func(s *tally) { delete(s.variants, "agent.user_confirm kind=tool_confirm") }, []string{"kind=tool_confirm"}},
		{"an excused code seen", "system.error code=internal", func(s *tally) { s.variants["system.error code=internal"] = 1 },
			[]string{"notProduced excuses system.error code=internal"}},
		{"a code never sent", "", func(s *tally) { delete(s.variants, "system.error code=rate_limited") }, []string{"code=rate_limited"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.excuse != "" {
				notProduced[tt.excuse] = "excused by this case"
				defer delete(notProduced, tt.excuse)
			}
			seen := full()
			tt.change(seen)
			err := seen.covered(io.Discard, s)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("covered: %v, want an error containing %q", err, w)
				}
			}
		})
	}
}
