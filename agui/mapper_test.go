package agui

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

// ev is a sequenced /ws frame for the mapper.
func ev(seq uint64, event string, meta string) frame {
	return frame{Event: event, Seq: seq, Timestamp: time.Unix(1700000000, 0), Metadata: json.RawMessage(meta)}
}

// brief writes AG-UI events as TYPE or TYPE(detail), for comparing.
func brief(evs []Event) string {
	var out []string
	for _, e := range evs {
		s := fmt.Sprint(e["type"])
		switch s {
		case "STEP_STARTED", "STEP_FINISHED":
			s += "(" + fmt.Sprint(e["stepName"]) + ")"
		case "TEXT_MESSAGE_START", "TEXT_MESSAGE_END":
			s += "(" + fmt.Sprint(e["messageId"]) + ")"
		case "TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS":
			s += "(" + fmt.Sprint(e["delta"]) + ")"
		case "CUSTOM":
			s += "(" + fmt.Sprint(e["name"]) + ")"
		case "RUN_FINISHED":
			if o, ok := e["outcome"].(Event); ok {
				s += "(" + fmt.Sprint(o["type"]) + ")"
			}
		case "RUN_ERROR":
			s += "(" + fmt.Sprint(e["code"]) + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

// TestMapper: what each Baton event becomes, in the context of the events
// of the stream before it.
func TestMapper(t *testing.T) {
	const run = `"run_id":"r"`
	for _, tt := range []struct {
		name   string
		frames []frame
		want   []string // per frame
		done   bool
	}{
		{"planning to the plan's confirmation", []frame{
			ev(1, "plan.start", `{`+run+`,"request":"q"}`),
			ev(2, "plan.step_completed", `{`+run+`,"step":1,"description":"d"}`),
			ev(3, "plan.completed", `{`+run+`,"plan_summary":"s","tasks":[{"id":"t1","title":"T","description":"","depends_on":[]}]}`),
			ev(4, "agent.user_confirm", `{`+run+`,"step_id":"c1","kind":"plan_confirm","plan_summary":"s"}`),
		}, []string{
			"STATE_DELTA STEP_STARTED(planning)",
			"STEP_STARTED(plan step 1) STEP_FINISHED(plan step 1)",
			"STATE_DELTA STEP_FINISHED(planning)",
			"STATE_DELTA RUN_FINISHED(interrupt)",
		}, true},
		{"a question while tasks run closes their steps first", []frame{
			ev(5, "solver.start", `{`+run+`,"task_id":"t1","attempt":1}`),
			ev(6, "solver.start", `{`+run+`,"task_id":"t2","attempt":1}`),
			ev(7, "agent.user_confirm", `{`+run+`,"step_id":"c2","kind":"tool_confirm","task_id":"t1","tool":"x"}`),
		}, []string{
			"STATE_DELTA STEP_STARTED(task t1)",
			"STATE_DELTA STEP_STARTED(task t2)",
			"STEP_FINISHED(task t1) STEP_FINISHED(task t2) RUN_FINISHED(interrupt)",
		}, true},
		{"a task started before the stream is not finished in it", []frame{
			ev(8, "solver.completed", `{`+run+`,"task_id":"t1","attempt":1,"result":"ok"}`),
		}, []string{"STATE_DELTA"}, false},
		{"a chat run streams its answer once", []frame{
			ev(1, "solver.start", `{`+run+`,"task_id":"t1","attempt":1,"mode":"chat","task":{"id":"t1","title":"q","description":"q","depends_on":[]}}`),
			ev(2, "solver.progress", `{`+run+`,"task_id":"t1","attempt":1,"progress":0.5,"message":"Hel"}`),
			ev(3, "solver.progress", `{`+run+`,"task_id":"t1","attempt":1,"progress":0.5,"message":""}`),
			ev(4, "solver.progress", `{`+run+`,"task_id":"t1","attempt":1,"progress":0.9,"message":"lo"}`),
			ev(5, "solver.completed", `{`+run+`,"task_id":"t1","attempt":1,"result":"Hello"}`),
			ev(6, "agent.final_answer", `{`+run+`,"content":"Hello","status":"succeeded"}`),
		}, []string{
			"STATE_DELTA STEP_STARTED(task t1)",
			"TEXT_MESSAGE_START(text-r-t1-2) TEXT_MESSAGE_CONTENT(Hel)",
			"",
			"TEXT_MESSAGE_CONTENT(lo)",
			"STATE_DELTA TEXT_MESSAGE_END(text-r-t1-2) STEP_FINISHED(task t1)",
			"STATE_DELTA RUN_FINISHED",
		}, true},
		{"a plan run's progress is not text, its answer is", []frame{
			ev(1, "solver.start", `{`+run+`,"task_id":"t1","attempt":1}`),
			ev(2, "solver.progress", `{`+run+`,"task_id":"t1","attempt":1,"progress":0.5,"message":"working"}`),
			ev(3, "agent.final_answer", `{`+run+`,"content":"A","status":"succeeded"}`),
		}, []string{
			"STATE_DELTA STEP_STARTED(task t1)",
			"CUSTOM(baton.solver.progress)",
			"STATE_DELTA STEP_FINISHED(task t1) TEXT_MESSAGE_START(answer-r) TEXT_MESSAGE_CONTENT(A) TEXT_MESSAGE_END(answer-r) RUN_FINISHED",
		}, true},
		{"a tool call and its result", []frame{
			ev(1, "agent.tool_call", `{`+run+`,"task_id":"t1","step_id":"tool_1","tool":"read_file","arguments":{"path":"a"}}`),
			ev(2, "agent.tool_result", `{`+run+`,"task_id":"t1","step_id":"tool_1","tool":"read_file","ok":true,"result":""}`),
		}, []string{
			`TOOL_CALL_START TOOL_CALL_ARGS({"path":"a"}) TOOL_CALL_END`,
			"TOOL_CALL_RESULT",
		}, false},
		{"aggregation streams", []frame{
			ev(1, "aggregate.start", `{`+run+`}`),
			ev(2, "aggregate.progress", `{`+run+`,"message":"Sum"}`),
			ev(3, "aggregate.completed", `{`+run+`,"summary":"Sum"}`),
		}, []string{
			"STATE_DELTA STEP_STARTED(aggregate)",
			"TEXT_MESSAGE_START(aggregate-r) TEXT_MESSAGE_CONTENT(Sum)",
			"TEXT_MESSAGE_END(aggregate-r) STEP_FINISHED(aggregate)",
		}, false},
		{"a failed plan is a run error", []frame{
			ev(1, "plan.start", `{`+run+`,"request":"q"}`),
			ev(2, "plan.cancelled", `{`+run+`,"reason":"plan_failed","error":"model down"}`),
		}, []string{"STATE_DELTA STEP_STARTED(planning)", "STATE_DELTA STEP_FINISHED(planning) RUN_ERROR(plan_failed)"}, true},
		{"a declined plan is a cancelled run", []frame{
			ev(1, "plan.cancelled", `{`+run+`,"reason":"user_reject"}`),
		}, []string{"STATE_DELTA RUN_FINISHED(cancelled)"}, true},
		{"a cancelled pipeline is a cancelled run", []frame{
			ev(1, "pipeline.cancelled", `{`+run+`,"reason":"user_cancel"}`),
		}, []string{"STATE_DELTA RUN_FINISHED(cancelled)"}, true},
		{"the rest is CUSTOM", []frame{
			ev(1, "pipeline.completed", `{`+run+`,"status":"succeeded"}`),
			ev(2, "plan.decision", `{`+run+`,"after_task":"t1","action":"continue","reason":""}`),
		}, []string{"CUSTOM(baton.pipeline.completed)", "CUSTOM(baton.plan.decision)"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMapper("th", "run1")
			for i, f := range tt.frames {
				if got := brief(m.event(f)); got != tt.want[i] {
					t.Errorf("%s:\n got %s\nwant %s", f.Event, got, tt.want[i])
				}
			}
			if m.done != tt.done {
				t.Errorf("done %v, want %v", m.done, tt.done)
			}
		})
	}
}

// TestMapperDeterministic: the same events make the same AG-UI events,
// encoded byte for byte — what an exact resume relies on.
func TestMapperDeterministic(t *testing.T) {
	frames := []frame{
		ev(1, "solver.start", `{"run_id":"r","task_id":"t1","attempt":1}`),
		ev(2, "solver.start", `{"run_id":"r","task_id":"t2","attempt":1}`),
		ev(3, "solver.start", `{"run_id":"r","task_id":"t3","attempt":1}`),
		ev(4, "agent.user_confirm", `{"run_id":"r","step_id":"c","kind":"input_request","question":"why?"}`),
	}
	encode := func() string {
		m := newMapper("th", "run1")
		var b strings.Builder
		for _, f := range frames {
			j, err := json.Marshal(m.event(f))
			if err != nil {
				t.Fatal(err)
			}
			b.Write(j)
		}
		return b.String()
	}
	first := encode()
	for range 20 {
		if again := encode(); again != first {
			t.Fatalf("mapped differently:\n%s\n%s", first, again)
		}
	}
}
