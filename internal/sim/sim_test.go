package sim

import (
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
	}{
		{text: "plain"},
		{text: "[sim:fail=network*2]", failType: "network", failN: 2},
		{text: "x [sim:fail=permanent] y", failType: "permanent", failN: 1},
		{text: "[sim:fail=rate_limit*1][sim:retry_after=250ms]", failType: "rate_limit", failN: 1, retryAfter: 250 * time.Millisecond},
		{text: "[sim:fail=network*x]"}, // bad count: ignored
		{text: "[sim:plan_fail=timeout*3]", planType: "timeout"},
		{text: "[sim:sleep=1.5s]", sleep: 1500 * time.Millisecond},
		{text: "[sim:sleep=soon]"}, // bad duration: ignored
	}
	for _, tt := range tests {
		typ, n, _ := Fail(tt.text)
		ptyp, _, _ := PlanFail(tt.text)
		d, _ := Sleep(tt.text)
		if typ != tt.failType || n != tt.failN || ptyp != tt.planType || d != tt.sleep || RetryAfter(tt.text) != tt.retryAfter {
			t.Errorf("%q: fail %q*%d plan_fail %q sleep %v retry_after %v", tt.text, typ, n, ptyp, d, RetryAfter(tt.text))
		}
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
