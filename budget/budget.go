// Package budget caps what each subject may spend on one server: how many
// runs it may start a minute, and how many model tokens it may use a day.
// It counts in memory, per process; several servers each keep their own
// counts. It knows nothing of sessions or runs beyond "one started" and
// "these tokens were used".
package budget

import (
	"fmt"
	"sync"
	"time"
)

// Limits are a subject's allowance. Zero means unlimited.
type Limits struct {
	// RunsPerMinute is the most runs a subject may start in any 60
	// seconds (a sliding window).
	RunsPerMinute int
	// TokensPerDay is the most model tokens a subject may use in a UTC
	// day. A subject at or over it cannot start runs until the day ends;
	// a run already going is not stopped, so a day may end a little over.
	TokensPerDay int64
}

// Budget tracks every subject's spending against Limits. A nil *Budget
// allows everything. Its methods may be called concurrently.
type Budget struct {
	limits Limits
	now    func() time.Time

	mu       sync.Mutex // guards subjects, swept
	subjects map[string]*account
	swept    time.Time
}

// account is one subject's spending.
type account struct {
	starts []time.Time // run starts within the last minute, oldest first
	day    int64       // the UTC day tokens counts, in days since the epoch
	tokens int64
}

// New returns a Budget of limits; now is its clock (nil: time.Now). It
// returns nil, which allows everything, when limits are all zero.
func New(limits Limits, now func() time.Time) *Budget {
	if limits.RunsPerMinute <= 0 && limits.TokensPerDay <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	return &Budget{limits: limits, now: now, subjects: map[string]*account{}}
}

// ExceededError says which limit refused a run start, and when a start
// may succeed again.
type ExceededError struct {
	// Limit is "runs_per_minute" or "tokens_per_day".
	Limit      string
	Max        int64
	RetryAfter time.Duration
}

func (e *ExceededError) Error() string {
	wait := e.RetryAfter.Round(time.Second)
	if wait < time.Second {
		wait = time.Second
	}
	if e.Limit == "tokens_per_day" {
		return fmt.Sprintf("the daily budget of %d model tokens is spent; runs may start again at 00:00 UTC, in %s", e.Max, wait)
	}
	return fmt.Sprintf("more than %d runs started in a minute; retry in %s", e.Max, wait)
}

const window = time.Minute

// Start records a run start by subject, or returns an *ExceededError and
// records nothing when the subject's limits refuse it.
func (b *Budget) Start(subject string) error {
	if b == nil {
		return nil
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	a := b.account(subject)
	day := dayOf(now)
	if l := b.limits.TokensPerDay; l > 0 && a.day == day && a.tokens >= l {
		next := time.Unix((day+1)*86400, 0)
		return &ExceededError{Limit: "tokens_per_day", Max: l, RetryAfter: next.Sub(now)}
	}
	if l := b.limits.RunsPerMinute; l > 0 {
		a.trim(now)
		if len(a.starts) >= l {
			return &ExceededError{Limit: "runs_per_minute", Max: int64(l), RetryAfter: a.starts[0].Add(window).Sub(now)}
		}
		a.starts = append(a.starts, now)
	}
	return nil
}

// Spend adds tokens to subject's use today.
func (b *Budget) Spend(subject string, tokens int64) {
	if b == nil || tokens <= 0 || b.limits.TokensPerDay <= 0 {
		return
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.account(subject)
	if day := dayOf(now); a.day != day {
		a.day, a.tokens = day, 0
	}
	a.tokens += tokens
}

// Used returns the tokens subject used today.
func (b *Budget) Used(subject string) int64 {
	if b == nil {
		return 0
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.subjects[subject]; a != nil && a.day == dayOf(now) {
		return a.tokens
	}
	return 0
}

func (b *Budget) account(subject string) *account {
	a := b.subjects[subject]
	if a == nil {
		a = &account{}
		b.subjects[subject] = a
	}
	return a
}

// trim drops the starts that left the window.
func (a *account) trim(now time.Time) {
	i := 0
	for i < len(a.starts) && !now.Before(a.starts[i].Add(window)) {
		i++
	}
	a.starts = append(a.starts[:0], a.starts[i:]...)
}

// sweep forgets, at most once a minute, the subjects with nothing left to
// count: no start in the window and no tokens today.
func (b *Budget) sweep(now time.Time) {
	if now.Sub(b.swept) < window {
		return
	}
	b.swept = now
	day := dayOf(now)
	for s, a := range b.subjects {
		a.trim(now)
		if len(a.starts) == 0 && (a.day != day || a.tokens == 0) {
			delete(b.subjects, s)
		}
	}
}

// dayOf is the UTC day of t, in days since the epoch.
func dayOf(t time.Time) int64 {
	return t.Unix() / 86400
}
