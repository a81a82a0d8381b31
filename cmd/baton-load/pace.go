package main

import (
	"context"
	"sync"
	"time"
)

// pacer offers a fixed rate of events (-pace) by pacing run starts rather
// than events: each start takes a slot of the schedule as long as its
// run's expected events last at the rate, and waits for it.
//
// A run's events are learned, not known beforehand (they depend on the
// server's model and version): they are expected to be the mean of the
// runs of the same kind that have ended, or of the runs of any kind while
// none of its kind has. The load's first run is a probe: it starts alone,
// and the next start waits until it has ended and its count is known; its
// slot then stretches from its start over what its events last at the
// rate.
//
// Slots are never made up: a start asked for after its slot's time takes
// the present instead, and the schedule moves on from there. So the rate
// is never exceeded (as far as runs of a kind bring the same number of
// events), and falls short only when no session is free to take a slot:
// -sessions must cover rate × run duration ÷ events per run.
type pacer struct {
	rate  float64   // events per second
	start time.Time // the schedule's time 0

	mu sync.Mutex // guards the fields below
	// next is when the next slot begins, from start; once the probe has
	// ended, also when the last slot given ends.
	next  time.Duration
	probe chan struct{} // made when the probe starts, closed when it ends
	ended bool          // the probe has ended
	// probeAt is when the probe started.
	probeAt time.Duration
	kinds   map[string]tally // the ended runs of each kind
	all     tally            // the ended runs of every kind
}

// tally is a count of runs and of their events.
type tally struct{ runs, events int }

func newPacer(rate float64, start time.Time) *pacer {
	return &pacer{rate: rate, start: start, kinds: map[string]tally{}}
}

// slot waits until a run of kind may start, and says whether it may: not
// when ctx ends first, nor when its slot would begin after deadline (zero
// for none).
func (p *pacer) slot(ctx context.Context, kind string, deadline time.Time) bool {
	var last time.Duration // none
	if !deadline.IsZero() {
		last = max(deadline.Sub(p.start), 1)
	}
	for {
		at, wait, ok := p.reserve(kind, time.Since(p.start), last)
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return false
			}
		}
		if !ok {
			return false
		}
		t := time.NewTimer(time.Until(p.start.Add(at)))
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// reserve takes the next slot for a run of kind asked for at now (from
// start): it returns when the run is to start, or a channel to wait on
// before asking again (the probe has not ended), or false when the slot
// would begin after last (0 for no limit).
func (p *pacer) reserve(kind string, now, last time.Duration) (at time.Duration, wait <-chan struct{}, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.probe == nil: // the first run: the probe
		if last > 0 && now > last {
			return 0, nil, false
		}
		p.probe, p.probeAt, p.next = make(chan struct{}), now, now
		return now, nil, true
	case !p.ended:
		return 0, p.probe, false
	}
	at = max(p.next, now)
	if last > 0 && at > last {
		return 0, nil, false
	}
	p.next = at + p.lasts(p.expect(kind))
	return at, nil, true
}

// done records that a run of kind has ended with events events.
func (p *pacer) done(kind string, events int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.kinds[kind]
	t.runs, t.events = t.runs+1, t.events+events
	p.kinds[kind] = t
	p.all.runs, p.all.events = p.all.runs+1, p.all.events+events
	if !p.ended { // the probe: its slot is now known
		p.ended = true
		p.next = max(p.next, p.probeAt+p.lasts(float64(max(events, 1))))
		close(p.probe)
	}
}

// expect is how many events a run of kind is expected to bring: at least
// one, so that a slot is never empty.
func (p *pacer) expect(kind string) float64 {
	t := p.kinds[kind]
	if t.runs == 0 {
		t = p.all
	}
	return max(float64(t.events)/float64(t.runs), 1)
}

// lasts is how long events take at the rate.
func (p *pacer) lasts(events float64) time.Duration {
	return time.Duration(events / p.rate * float64(time.Second))
}

// end is when the last slot given is over, from start.
func (p *pacer) end() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}
