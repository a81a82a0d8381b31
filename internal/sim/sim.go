// Package sim holds what the simulated planner, solver and aggregator share:
// pacing that gives way to cancellation, one-line topics, and the fault
// directives of §9 of the contract ([sim:sleep=…] and, later, [sim:fail=…]).
package sim

import (
	"context"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// Pause waits for d or until ctx is done, whichever comes first, and
// returns ctx's error in the second case.
func Pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

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

// Sleep returns the duration of a [sim:sleep=<duration>] directive in text,
// and whether there was a valid one.
func Sleep(text string) (time.Duration, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if m[1] != "sleep" {
			continue
		}
		if d, err := time.ParseDuration(m[2]); err == nil && d >= 0 {
			return d, true
		}
	}
	return 0, false
}
