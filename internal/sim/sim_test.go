package sim

import (
	"strings"
	"testing"
	"time"
)

func TestDirectives(t *testing.T) {
	tests := []struct {
		text       string
		failType   string
		failN      int
		planType   string
		sleep      time.Duration
		retryAfter time.Duration
		result     int // of a valid result_bytes directive
	}{
		{text: "plain"},
		{text: "[sim:fail=network*2]", failType: "network", failN: 2},
		{text: "x [sim:fail=permanent] y", failType: "permanent", failN: 1},
		{text: "[sim:fail=rate_limit*1][sim:retry_after=250ms]", failType: "rate_limit", failN: 1, retryAfter: 250 * time.Millisecond},
		{text: "[sim:fail=network*x]"}, // bad count: ignored
		{text: "[sim:plan_fail=timeout*3]", planType: "timeout"},
		{text: "[sim:sleep=1.5s]", sleep: 1500 * time.Millisecond},
		{text: "[sim:sleep=soon]"}, // bad duration: ignored
		{text: "[sim:result_bytes=2000000]", result: 2000000},
		{text: "[sim:result_bytes=-1]"},        // ignored
		{text: "[sim:result_bytes=999999999]"}, // over MaxResultBytes: ignored
	}
	for _, tt := range tests {
		typ, n, _ := Fail(tt.text)
		ptyp, _, _ := PlanFail(tt.text)
		d, _ := Sleep(tt.text)
		size, _ := ResultBytes(tt.text)
		if typ != tt.failType || n != tt.failN || ptyp != tt.planType || d != tt.sleep || RetryAfter(tt.text) != tt.retryAfter || size != tt.result {
			t.Errorf("%q: fail %q*%d plan_fail %q sleep %v retry_after %v result_bytes %d", tt.text, typ, n, ptyp, d, RetryAfter(tt.text), size)
		}
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Decision
		ok   bool
	}{
		{"none", "plain", Decision{}, false},
		{"continue", "[sim:decide=continue]", Decision{Action: "continue"}, true},
		{"synthesize", "x [sim:decide=synthesize] y", Decision{Action: "synthesize"}, true},
		{"request input", "[sim:decide=request_input:Which environment?]", Decision{Action: "request_input", Question: "Which environment?"}, true},
		{"add", "[sim:decide=adjust_plan:+Check prices]", Decision{Action: "adjust_plan", Add: "Check prices"}, true},
		{"remove", "[sim:decide=adjust_plan:-t3]", Decision{Action: "adjust_plan", Remove: "t3"}, true},
		{"malformed, then well formed", "[sim:decide=later] [sim:decide=synthesize]", Decision{Action: "synthesize"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := Decide(tt.text); got != tt.want || ok != tt.ok {
				t.Errorf("Decide(%q) = %+v, %v", tt.text, got, ok)
			}
		})
	}
}

func TestTopic(t *testing.T) {
	if got := Topic("  Plan   a\ntrip [sim:sleep=1s] ", 60); got != "Plan a trip" {
		t.Errorf("Topic = %q", got)
	}
	if got := Topic("ééééééééééé", 5); got != "éééé…" {
		t.Errorf("Topic = %q", got)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		allowed []string
		want    []string // substrings, one per expected problem
	}{
		{name: "plain text", text: "Plan a trip", allowed: TaskDirectives},
		{name: "good task directives", text: "[sim:fail=network*2] [sim:sleep=1.5s][sim:retry_after=0s] [sim:fail=permanent]", allowed: TaskDirectives},
		{name: "good request directive", text: "go [sim:plan_fail=timeout*3]", allowed: RequestDirectives},
		{name: "good decide directives", text: "[sim:decide=continue] [sim:decide=synthesize] [sim:decide=request_input:Which one?] " +
			"[sim:decide=adjust_plan:+Check the facts] [sim:decide=adjust_plan:-t3]", allowed: RequestDirectives},
		{name: "bad decide action", text: "[sim:decide=stop]", allowed: RequestDirectives, want: []string{`"stop": want continue`}},
		{name: "decide without a question", text: "[sim:decide=request_input:]", allowed: TaskDirectives, want: []string{"want continue"}},
		{name: "adjust without a sign", text: "[sim:decide=adjust_plan:t3]", allowed: RequestDirectives, want: []string{"want continue"}},
		{name: "unknown directive", text: "[sim:explode=1]", allowed: TaskDirectives, want: []string{"unknown directive [sim:explode=1]"}},
		{name: "plan_fail in a task", text: "[sim:plan_fail=network*1]", allowed: TaskDirectives, want: []string{"unknown directive"}},
		{name: "no value", text: "[sim:fail]", allowed: TaskDirectives, want: []string{"has no value"}},
		{name: "bad error type", text: "[sim:fail=bogus*2]", allowed: TaskDirectives, want: []string{`"bogus" is not an error type`}},
		{name: "bad count", text: "[sim:fail=network*x]", allowed: TaskDirectives, want: []string{`"x" is not a count`}},
		{name: "negative count", text: "[sim:fail=network*-1]", allowed: TaskDirectives, want: []string{"is not a count"}},
		{name: "bad duration", text: "[sim:sleep=banana]", allowed: TaskDirectives, want: []string{`"banana" is not a duration`}},
		{name: "good result size", text: "[sim:result_bytes=1048576]", allowed: TaskDirectives},
		{name: "bad result size", text: "[sim:result_bytes=1MB]", allowed: TaskDirectives, want: []string{`"1MB" is not a size`}},
		{name: "result size over the most", text: "[sim:result_bytes=99999999]", allowed: TaskDirectives, want: []string{"is not a size"}},
		{name: "negative duration", text: "[sim:retry_after=-1s]", allowed: TaskDirectives, want: []string{"is not a duration"}},
		{name: "empty directive", text: "[sim:]", allowed: TaskDirectives, want: []string{"unknown directive [sim:]"}},
		{name: "two problems", text: "[sim:sleep=x] ok [sim:nope=1]", allowed: TaskDirectives, want: []string{"[sim:sleep=x]", "[sim:nope=1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Check(tt.text, tt.allowed)
			if len(got) != len(tt.want) {
				t.Fatalf("Check(%q) = %q, want %d problem(s)", tt.text, got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
