package openai

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/wsproto"
)

var decideInput = planner.DecideInput{
	Request: "Deploy the app", PlanSummary: "Build then ship", Number: 1, AfterTask: "build",
	Tasks: []wsproto.TaskState{
		{Task: wsproto.Task{ID: "build", Title: "Build it", DependsOn: []string{}}, Status: wsproto.TaskCompleted, Result: "built v1.2"},
		{Task: wsproto.Task{ID: "ship", Title: "Ship it", DependsOn: []string{"build"}}, Status: wsproto.TaskPending},
	},
	Answers:  []wsproto.AnswerState{{Question: "Which region?", Text: "eu-west"}},
	Feedback: "task 2 (\"x\") depends on unknown task \"nope\"",
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name       string
		reply      string
		refuse     bool // the server refuses json_schema
		want       planner.Decision
		validation bool
	}{
		{name: "structured adjust", reply: `{"action":"adjust_plan","reason":"needs a check","add":[{"id":"check","title":"Check it",` +
			`"description":"d","depends_on":["build"]}],"remove":["ship"],"question":""}`,
			want: planner.Decision{Action: "adjust_plan", Reason: "needs a check", Remove: []string{"ship"},
				Add: []wsproto.Task{{ID: "check", Title: "Check it", Description: "d", DependsOn: []string{"build"}}}}},
		{name: "plain JSON in a fence", refuse: true, reply: "Sure:\n```json\n" +
			`{"action":"request_input","reason":"unclear","question":"Which cluster?"}` + "\n```",
			want: planner.Decision{Action: "request_input", Reason: "unclear", Question: "Which cluster?"}},
		{name: "no JSON", reply: "Keep going.", validation: true},
		{name: "no action", reply: `{"reason":"x"}`, validation: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, req chatRequest) {
				if tt.refuse && req.ResponseFormat != nil {
					apiError(w, 400, "response_format json_schema is not supported")
					return
				}
				stream(w, split(tt.reply, 9)...)
			})
			d, err := f.client(t).Decide(t.Context(), decideInput)
			if tt.validation {
				if failure.Classify(err).Type != failure.Validation {
					t.Fatalf("Decide = %+v, %v; want a validation error", d, err)
				}
				return
			}
			if err != nil || d.Usage.TotalTokens != 18 {
				t.Fatalf("Decide: %+v, %v", d, err)
			}
			d.Usage = wsproto.Usage{}
			if !reflect.DeepEqual(d, tt.want) {
				t.Errorf("Decide = %+v, want %+v", d, tt.want)
			}
			reqs := f.seen()
			last := reqs[len(reqs)-1]
			if (last.ResponseFormat != nil) == tt.refuse {
				t.Errorf("response format %+v on the last request", last.ResponseFormat)
			}
			for _, want := range []string{"Deploy the app", "- build [completed] Build it", "Result: built v1.2",
				"- ship [pending] Ship it (after build)", "just completed: build", "Q: Which region?", "A: eu-west", "could not be used: task 2"} {
				if !strings.Contains(last.Text(), want) {
					t.Errorf("prompt lacks %q:\n%s", want, last.Text())
				}
			}
		})
	}
}
