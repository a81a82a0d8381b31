// Package sim holds what the simulated planner, solver and aggregator share:
// one-line topics and the fault directives of §9 of the contract:
// [sim:sleep=<duration>], [sim:fail=<error_type>*<n>],
// [sim:plan_fail=<error_type>*<n>], and Baton's [sim:retry_after=<duration>],
// which makes a simulated rate_limit failure carry a Retry-After, and
// [sim:result_bytes=<n>], which makes a task's result n bytes long; the agent
// loop's [sim:tool=…] and [sim:ask=…], and the decide step's [sim:decide=…]
// (§12).
package sim

import (
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-run/baton/wsproto"
)

// Topic is text reduced to one line of at most max runes, with directives
// removed, for titles and summaries.
func Topic(text string, max int) string {
	s := strings.Join(strings.Fields(directive.ReplaceAllString(text, "")), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:max-1])) + "…"
}

var directive = regexp.MustCompile(`\[sim:([a-z_]+)=([^\]]*)\]`)

// Fail returns the error type and count of a [sim:fail=<type>*<n>]
// directive in text: the first n executions fail with that type.
func Fail(text string) (errorType string, n int, ok bool) { return fault(text, "fail") }

// PlanFail is Fail for [sim:plan_fail=<type>*<n>] in a request.
func PlanFail(text string) (errorType string, n int, ok bool) { return fault(text, "plan_fail") }

// RetryAfter returns the duration of a [sim:retry_after=<duration>] directive.
func RetryAfter(text string) time.Duration {
	d, _ := duration(text, "retry_after")
	return d
}

// Sleep returns the duration of a [sim:sleep=<duration>] directive in text,
// and whether there was a valid one.
func Sleep(text string) (time.Duration, bool) { return duration(text, "sleep") }

// MaxResultBytes is the longest result [sim:result_bytes=<n>] may ask for.
const MaxResultBytes = 16 << 20

// ResultBytes returns the n of a [sim:result_bytes=<n>] directive in text:
// the task's result is then exactly n bytes long.
func ResultBytes(text string) (int, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if n, err := strconv.Atoi(m[2]); m[1] == "result_bytes" && err == nil && n >= 0 && n <= MaxResultBytes {
			return n, true
		}
	}
	return 0, false
}

func duration(text, name string) (time.Duration, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if m[1] != name {
			continue
		}
		if d, err := time.ParseDuration(m[2]); err == nil && d >= 0 {
			return d, true
		}
	}
	return 0, false
}

func fault(text, name string) (string, int, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if m[1] != name {
			continue
		}
		typ, count, found := strings.Cut(m[2], "*")
		n := 1
		if found {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 0 {
				continue
			}
		}
		if typ != "" {
			return typ, n, true
		}
	}
	return "", 0, false
}

// Earlier is how the simulated models show the conversation before a run,
// so that tests can see it reach them: the earlier requests, oldest first,
// each as a quoted topic — ` (following "Plan a weekend in Lisbon"; "Now
// make it cheaper")` — or "" when there are none.
func Earlier(history []wsproto.HistoryEntry) string {
	if len(history) == 0 {
		return ""
	}
	quoted := make([]string, len(history))
	for i, h := range history {
		quoted[i] = strconv.Quote(Topic(h.Request, 60))
	}
	return " (following " + strings.Join(quoted, "; ") + ")"
}
