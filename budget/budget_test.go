package budget

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time for a Budget.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// step is one thing done to a budget in a scenario: time passes, then
// subject starts a run (want: "" allowed, else the refusing limit) or
// spends tokens.
type step struct {
	after   time.Duration
	subject string
	spend   int64  // tokens to spend instead of a start
	want    string // for a start: "", "runs_per_minute" or "tokens_per_day"
	retry   time.Duration
}

func TestBudget(t *testing.T) {
	start := time.Date(2026, 3, 1, 23, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"runs per minute, per subject", Limits{RunsPerMinute: 2}, []step{
			{subject: "alice"},
			{after: 10 * time.Second, subject: "alice"},
			{after: 10 * time.Second, subject: "alice", want: "runs_per_minute", retry: 40 * time.Second},
			{subject: "bob"}, // another subject has its own
			{after: 39 * time.Second, subject: "alice", want: "runs_per_minute", retry: time.Second},
			{after: time.Second, subject: "alice"}, // the first start left the window
			{subject: "alice", want: "runs_per_minute", retry: 10 * time.Second},
		}},
		{"a refused start does not count", Limits{RunsPerMinute: 1}, []step{
			{subject: "alice"},
			{after: 30 * time.Second, subject: "alice", want: "runs_per_minute", retry: 30 * time.Second},
			{after: 30 * time.Second, subject: "alice"},
		}},
		{"tokens per day", Limits{TokensPerDay: 1000}, []step{
			{subject: "alice"},
			{subject: "alice", spend: 600},
			{subject: "alice"}, // 600 < 1000: allowed, and may go over
			{subject: "alice", spend: 600},
			{subject: "alice", want: "tokens_per_day", retry: time.Hour},
			{subject: "bob"},
			{after: 59 * time.Minute, subject: "alice", want: "tokens_per_day", retry: time.Minute},
			{after: time.Minute, subject: "alice"}, // a new UTC day
			{subject: "alice", spend: 999},
			{subject: "alice"},
		}},
		{"both", Limits{RunsPerMinute: 1, TokensPerDay: 10}, []step{
			{subject: "alice"},
			{subject: "alice", spend: 10},
			{after: time.Minute, subject: "alice", want: "tokens_per_day", retry: 59 * time.Minute},
		}},
		{"the anonymous subject", Limits{RunsPerMinute: 1}, []step{
			{subject: ""},
			{subject: "", want: "runs_per_minute", retry: time.Minute},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: start}
			b := New(tt.limits, c.now)
			for i, s := range tt.steps {
				c.advance(s.after)
				if s.spend > 0 {
					b.Spend(s.subject, s.spend)
					continue
				}
				err := b.Start(s.subject)
				var ex *ExceededError
				switch {
				case s.want == "" && err != nil:
					t.Fatalf("step %d: %s refused: %v", i, s.subject, err)
				case s.want == "":
				case !errors.As(err, &ex) || ex.Limit != s.want || ex.RetryAfter != s.retry:
					t.Fatalf("step %d: %s: %v (%+v), want %s, retry after %s", i, s.subject, err, ex, s.want, s.retry)
				}
			}
		})
	}
}

func TestUnlimited(t *testing.T) {
	var b *Budget = New(Limits{}, nil)
	if b != nil {
		t.Fatalf("New of no limits = %v, want nil", b)
	}
	for range 1000 {
		if err := b.Start("alice"); err != nil {
			t.Fatal(err)
		}
	}
	b.Spend("alice", 1<<40)
	if b.Used("alice") != 0 {
		t.Fatal("a nil budget counted")
	}
}

func TestMessages(t *testing.T) {
	tests := []struct {
		err  *ExceededError
		want string
	}{
		{&ExceededError{Limit: "runs_per_minute", Max: 5, RetryAfter: 12400 * time.Millisecond}, "more than 5 runs started in a minute; retry in 12s"},
		{&ExceededError{Limit: "runs_per_minute", Max: 5, RetryAfter: time.Millisecond}, "retry in 1s"},
		{&ExceededError{Limit: "tokens_per_day", Max: 1000, RetryAfter: 3*time.Hour + 2*time.Minute}, "daily budget of 1000 model tokens is spent; runs may start again at 00:00 UTC, in 3h2m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.err.Error(); !strings.Contains(got, tt.want) {
				t.Fatalf("%q, want it to contain %q", got, tt.want)
			}
		})
	}
}

// TestSweep: subjects with nothing to count are forgotten, so a server
// seeing many subjects does not keep them all.
func TestSweep(t *testing.T) {
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	b := New(Limits{RunsPerMinute: 10, TokensPerDay: 100}, c.now)
	b.Start("alice")
	b.Start("bob")
	b.Spend("bob", 5)
	c.advance(2 * time.Minute)
	b.Start("carol") // sweeps: alice has nothing left, bob has tokens today
	b.mu.Lock()
	_, alice := b.subjects["alice"]
	_, bob := b.subjects["bob"]
	b.mu.Unlock()
	if alice || !bob || b.Used("bob") != 5 {
		t.Fatalf("after the sweep: alice kept %v, bob kept %v with %d tokens", alice, bob, b.Used("bob"))
	}
}

func TestConcurrent(t *testing.T) {
	c := &clock{t: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)} // never advanced: read concurrently
	b := New(Limits{RunsPerMinute: 50, TokensPerDay: 1 << 30}, c.now)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if b.Start("alice") == nil {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				b.Spend("alice", 1)
			}
		})
	}
	wg.Wait()
	if allowed != 50 || b.Used("alice") != 160 {
		t.Fatalf("%d starts allowed (want 50), %d tokens (want 160)", allowed, b.Used("alice"))
	}
}
