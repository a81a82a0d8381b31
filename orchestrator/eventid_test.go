package orchestrator

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestIDClock: ids are UUIDv7s of the time given, as uuid parses them,
// and sort in the order they were made whatever the clock does.
func TestIDClock(t *testing.T) {
	base := time.Now()
	tests := []struct {
		name  string
		times []time.Time
	}{
		{"the clock moving on", []time.Time{base, base.Add(time.Microsecond), base.Add(time.Millisecond), base.Add(2 * time.Second)}},
		{"the clock standing still", slices.Repeat([]time.Time{base.Add(3 * time.Second)}, 5000)},
		{"the clock stepping back", []time.Time{base.Add(4 * time.Second), base.Add(3 * time.Second), base, base.Add(-time.Hour)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c idClock
			var prev string
			var latest time.Time
			for i, now := range tt.times {
				id := c.id(now)
				u, err := uuid.Parse(id)
				if err != nil || u.String() != id {
					t.Fatalf("id %q: %v", id, err)
				}
				if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
					t.Fatalf("id %s: version %d, variant %v", id, u.Version(), u.Variant())
				}
				if id <= prev {
					t.Fatalf("id %d %s is not after %s", i, id, prev)
				}
				// An id's time never runs behind the clock, nor ahead of
				// the latest time seen by more than the ids made since
				// (a 4096th of a millisecond each).
				if now.After(latest) {
					latest = now
				}
				sec, nsec := u.Time().UnixTime()
				if at := time.Unix(sec, nsec); at.Before(now.Truncate(time.Millisecond)) || at.After(latest.Add(2*time.Millisecond)) {
					t.Fatalf("id %s holds %v, made at %v", id, at, now)
				}
				prev = id
			}
		})
	}
}

func TestIDClockConcurrent(t *testing.T) {
	var c idClock
	const goroutines, each = 4, 2000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range ids {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], c.id(time.Now()))
			}
		})
	}
	wg.Wait()
	for g := range ids {
		if !slices.IsSorted(ids[g]) {
			t.Errorf("goroutine %d's ids are out of order", g)
		}
	}
	all := slices.Concat(ids...)
	slices.Sort(all)
	if all = slices.Compact(all); len(all) != goroutines*each {
		t.Errorf("%d distinct ids of %d", len(all), goroutines*each)
	}
}

func BenchmarkNewEventID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		newEventID(time.Now())
	}
}
