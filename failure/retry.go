package failure

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy is how failed work is retried.
type Policy struct {
	// MaxRetries is how many retries follow the first execution. 0 means
	// no retry.
	MaxRetries int
	// Base is the first backoff delay; retry k waits about Base×2^(k−1),
	// ±50% jitter. Defaults to 1s.
	Base time.Duration
	// Max caps a delay before jitter, and a model's Retry-After: a
	// Retry-After of a day does not park a task for a day. Defaults to 30s.
	Max time.Duration
}

// Backoff returns the delays of one retry budget.
func (p Policy) Backoff() *Delays {
	base, maxDelay := p.Base, p.Max
	if base <= 0 {
		base = time.Second
	}
	if maxDelay <= 0 {
		maxDelay = 30 * time.Second
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     base,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         maxDelay,
		MaxElapsedTime:      0, // the budget is counted in attempts, not time
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	return &Delays{b: b, max: maxDelay}
}

// Delays hands out the successive delays of one retry budget. Not safe for
// concurrent use.
type Delays struct {
	b   *backoff.ExponentialBackOff
	max time.Duration // caps a Retry-After
}

// Next returns how long to wait before the next retry of a failure of this
// class: none for validation errors (the model is told what was wrong and
// tries again at once), the model's own Retry-After for rate limits when it
// gave one, capped at the policy's Max, and the next exponential delay
// otherwise. The exponential sequence advances only when it is used.
func (d *Delays) Next(c Class) time.Duration {
	switch {
	case c.Type == Validation:
		return 0
	case c.Type == RateLimit && c.RetryAfter > 0:
		return min(c.RetryAfter, d.max)
	}
	return d.b.NextBackOff()
}

// Wait waits for d or until ctx is done, and returns ctx's error then.
func Wait(ctx context.Context, d time.Duration) error {
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
