package sim

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/failure"
)

// The directives each kind of text may carry.
var (
	// TaskDirectives are read from a task's description by the solver
	// (and decide by the planner's decide step, a Baton extension).
	TaskDirectives = []string{"fail", "sleep", "retry_after", "tool", "ask", "decide", "result_bytes"}
	// RequestDirectives are read from a user.message's text by the planner.
	RequestDirectives = []string{"plan_fail", "retry_after", "decide"}
)

// anyDirective matches everything that looks like a directive, well
// formed or not, so a typo is reported rather than read as plain text.
var anyDirective = regexp.MustCompile(`\[sim:([^\]]*)\]`)

// Check returns one problem for each directive in text that is not one of
// allowed or whose value is malformed — a typo must fail loudly, not be
// silently taken as no directive.
func Check(text string, allowed []string) []string {
	var probs []string
	if slices.Contains(allowed, "tool") {
		_, probs = Tools(text)
		text = withoutTools(text)
	}
	for _, m := range anyDirective.FindAllStringSubmatch(text, -1) {
		name, value, hasValue := strings.Cut(m[1], "=")
		if !slices.Contains(allowed, name) {
			probs = append(probs, fmt.Sprintf("unknown directive %s (here: %s)", m[0], strings.Join(allowed, ", ")))
			continue
		}
		if !hasValue {
			probs = append(probs, fmt.Sprintf("directive %s has no value", m[0]))
			continue
		}
		if err := checkValue(name, value); err != nil {
			probs = append(probs, fmt.Sprintf("directive %s: %v", m[0], err))
		}
	}
	return probs
}

var errorTypes = []string{failure.Validation, failure.Timeout, failure.Network, failure.RateLimit, failure.Internal, failure.Permanent}

func checkValue(name, value string) error {
	switch name {
	case "fail", "plan_fail":
		typ, count, found := strings.Cut(value, "*")
		if !slices.Contains(errorTypes, typ) {
			return fmt.Errorf("%q is not an error type (%s)", typ, strings.Join(errorTypes, ", "))
		}
		if n, err := strconv.Atoi(count); found && (err != nil || n < 0) {
			return fmt.Errorf("%q is not a count (a whole number ≥ 0 after '*')", count)
		}
	case "tool":
		return fmt.Errorf("want [sim:tool=NAME {json arguments}]")
	case "ask":
		if strings.TrimSpace(value) == "" {
			return fmt.Errorf("the question is empty")
		}
	case "decide":
		return checkDecide(value)
	case "result_bytes":
		if n, err := strconv.Atoi(value); err != nil || n < 0 || n > MaxResultBytes {
			return fmt.Errorf("%q is not a size (a whole number of bytes, 0 to %d)", value, MaxResultBytes)
		}
	case "sleep", "retry_after":
		if d, err := time.ParseDuration(value); err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration (e.g. 250ms, 2s)", value)
		}
	}
	return nil
}
