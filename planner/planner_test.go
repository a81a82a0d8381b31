package planner_test

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/wsproto"
)

// The simulated plan's promises (§9) hold for any request.
func TestSimPlanShape(t *testing.T) {
	p := &planner.Sim{}
	sizes := map[int]bool{}
	for i := range 200 {
		req := planner.Request{Text: fmt.Sprintf("request number %d", i), Attempt: 1}
		var steps []string
		plan, err := p.Plan(t.Context(), req, func(s string) { steps = append(steps, s) })
		if err != nil {
			t.Fatal(err)
		}
		again, _ := p.Plan(t.Context(), req, func(string) {})
		if !reflect.DeepEqual(plan, again) {
			t.Fatalf("%q: not deterministic", req.Text)
		}
		n := len(plan.Tasks)
		sizes[n] = true
		if probs := wsproto.ValidateTasks(plan.Tasks, 50); probs != nil || n < 3 || n > 6 || len(steps) == 0 {
			t.Fatalf("%q: %d tasks, problems %v, %d steps", req.Text, n, probs, len(steps))
		}
		independent := 0
		for _, task := range plan.Tasks {
			if len(task.DependsOn) == 0 {
				independent++
			}
		}
		if last := plan.Tasks[n-1]; independent < 2 || len(last.DependsOn) != n-1 {
			t.Fatalf("%q: %d independent tasks, final depends on %v", req.Text, independent, last.DependsOn)
		}
	}
	if len(sizes) != 4 {
		t.Errorf("plan sizes seen %v, want all of 3..6", sizes)
	}
}

// A plan sent back is planned again with the user's feedback: another
// plan for another feedback, the same for the same.
func TestSimPlanWithFeedback(t *testing.T) {
	p := &planner.Sim{}
	plan := func(feedback ...string) planner.Plan {
		req := planner.Request{Text: "Plan a trip to Lisbon", Attempt: 1}
		for _, f := range feedback {
			req.Rejected = append(req.Rejected, planner.Rejection{Feedback: f})
		}
		got, err := p.Plan(t.Context(), req, func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	first, revised := plan(), plan("fewer museums")
	if first.Summary == revised.Summary || !strings.Contains(revised.Summary, "(revised: fewer museums)") {
		t.Errorf("summaries %q and %q", first.Summary, revised.Summary)
	}
	if again := plan("something else", "fewer museums"); !reflect.DeepEqual(again, revised) {
		t.Errorf("the last feedback decides: %+v vs %+v", again, revised)
	}
}

// The summary stays the run's plan_summary after the user edits the plan
// or an adjustment changes it, so it must not count the tasks: "Plan
// ready: 6 tasks" read untrue beside the 4 a user kept.
func TestSimPlanSummaryStatesNoCount(t *testing.T) {
	count := regexp.MustCompile(`\b\d+ tasks?\b`)
	p := &planner.Sim{}
	for _, tc := range []struct {
		name     string
		request  string
		feedback []string
	}{
		{name: "a request", request: "Plan a weekend trip to Lisbon"},
		{name: "a request with numbers", request: "Compare 3 laptops under 1000 euros"},
		{name: "planned again", request: "Plan a weekend trip to Lisbon", feedback: []string{"fewer museums"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := planner.Request{Text: tc.request, Attempt: 1}
			for _, f := range tc.feedback {
				req.Rejected = append(req.Rejected, planner.Rejection{Feedback: f})
			}
			plan, err := p.Plan(t.Context(), req, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			if m := count.FindString(plan.Summary); m != "" {
				t.Errorf("the summary %q counts the tasks (%q): an edit of the plan makes that untrue", plan.Summary, m)
			}
			if !strings.Contains(plan.Summary, sim.Topic(tc.request, 60)) {
				t.Errorf("the summary %q does not say what the plan is for", plan.Summary)
			}
		})
	}
}

func TestSimPlanFailDirective(t *testing.T) {
	p := &planner.Sim{}
	for attempt, wantErr := range map[int]bool{1: true, 2: true, 3: false} {
		_, err := p.Plan(t.Context(), planner.Request{Text: "x [sim:plan_fail=network*2]", Attempt: attempt}, func(string) {})
		if (err != nil) != wantErr || (err != nil && failure.Classify(err).Type != failure.Network) {
			t.Errorf("attempt %d: %v", attempt, err)
		}
	}
}

func TestSimDecide(t *testing.T) {
	done := wsproto.TaskState{Task: wsproto.Task{ID: "t1", Title: "One", DependsOn: []string{}}, Status: wsproto.TaskCompleted}
	steered := wsproto.TaskState{Task: wsproto.Task{ID: "t2", Title: "Two", Description: "[sim:decide=synthesize]", DependsOn: []string{}},
		Status: wsproto.TaskCompleted}
	taken := wsproto.TaskState{Task: wsproto.Task{ID: "adj1", Title: "Taken", DependsOn: []string{}}, Status: wsproto.TaskPending}
	tests := []struct {
		name    string
		request string
		number  int
		after   string
		tasks   []wsproto.TaskState
		want    planner.Decision
	}{
		{"no directive", "Plan", 1, "t1", []wsproto.TaskState{done}, planner.Decision{Action: "continue"}},
		{"the request's, first decision", "Plan [sim:decide=request_input:Which city?]", 1, "t1", []wsproto.TaskState{done},
			planner.Decision{Action: "request_input", Question: "Which city?"}},
		{"the request's, later decision", "Plan [sim:decide=synthesize]", 2, "t1", []wsproto.TaskState{done}, planner.Decision{Action: "continue"}},
		{"the task's wins", "Plan [sim:decide=continue]", 1, "t2", []wsproto.TaskState{done, steered}, planner.Decision{Action: "synthesize"}},
		{"the task's, any decision", "Plan", 7, "t2", []wsproto.TaskState{done, steered}, planner.Decision{Action: "synthesize"}},
		{"remove", "[sim:decide=adjust_plan:-t9]", 1, "t1", []wsproto.TaskState{done}, planner.Decision{Action: "adjust_plan", Remove: []string{"t9"}}},
		{"add, with a free id", "[sim:decide=adjust_plan:+Check prices]", 1, "t1", []wsproto.TaskState{done, taken},
			planner.Decision{Action: "adjust_plan", Add: []wsproto.Task{{ID: "adj2", Title: "Check prices",
				Description: "Added after t1.", DependsOn: []string{"t1"}}}}},
	}
	p := &planner.Sim{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Decide(t.Context(), planner.DecideInput{Request: tt.request, Number: tt.number, AfterTask: tt.after, Tasks: tt.tasks})
			if err != nil || got.Reason == "" {
				t.Fatalf("Decide: %+v, %v", got, err)
			}
			got.Reason = ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}
