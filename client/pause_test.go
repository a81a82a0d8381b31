package client

import (
	"testing"
	"time"
)

// TestResumePause: the pause before each reconnection attempt doubles
// from ResumeDelay up to MaxResumeDelay, spread ±50 %; a server's retry
// hint replaces it.
func TestResumePause(t *testing.T) {
	o := Options{ResumeDelay: 100 * time.Millisecond, MaxResumeDelay: time.Second}
	o.defaults()
	for _, c := range []struct {
		attempt  int
		hint     time.Duration
		min, max time.Duration
	}{
		{0, 0, 50 * time.Millisecond, 150 * time.Millisecond},
		{1, 0, 100 * time.Millisecond, 300 * time.Millisecond},
		{3, 0, 400 * time.Millisecond, 1200 * time.Millisecond},
		{4, 0, 500 * time.Millisecond, 1500 * time.Millisecond}, // capped at 1 s, then spread
		{80, 0, 500 * time.Millisecond, 1500 * time.Millisecond},
		{1 << 40, 0, 500 * time.Millisecond, 1500 * time.Millisecond}, // no overflow, however many attempts
		{5, 2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := o.resumePause(c.attempt, c.hint)
			if d < c.min || d > c.max {
				t.Fatalf("attempt %d, hint %v: pause %v; want within [%v, %v]", c.attempt, c.hint, d, c.min, c.max)
			}
			seen[d] = true
		}
		if spread := len(seen) > 1; spread != (c.hint == 0) {
			t.Errorf("attempt %d, hint %v: %d distinct pauses in 200; want them spread only without a hint", c.attempt, c.hint, len(seen))
		}
	}
}
