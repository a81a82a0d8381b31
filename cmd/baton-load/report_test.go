package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogramBuckets: every value falls in the bucket whose range holds
// it, and buckets are at most 1/2^subBits of their values wide.
func TestHistogramBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 129, 191, 192, 1000, 1 << 20, 123456789, 1<<62 + 5, 1<<63 - 1} {
		i := bucket(v)
		lo, hi := lowest(i), lowest(i+1)
		if v < lo || v >= hi && hi != 0 {
			t.Errorf("%d in bucket %d, [%d, %d)", v, i, lo, hi)
		}
		if lo >= 128 && float64(hi-lo)/float64(lo) > 1.0/(1<<subBits) {
			t.Errorf("bucket %d [%d, %d) is too wide", i, lo, hi)
		}
	}
}

// TestHistogramQuantiles: quantiles read from the histogram are within
// its precision of those of the sorted samples, and the max is exact.
func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		sample func(*rand.Rand) time.Duration
	}{
		{"uniform", func(r *rand.Rand) time.Duration { return time.Duration(r.Int64N(int64(10 * time.Millisecond))) }},
		{"long-tailed", func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(time.Millisecond)) }},
		{"tiny", func(r *rand.Rand) time.Duration { return time.Duration(r.IntN(100)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var h histogram
			var all []time.Duration
			for range 20000 {
				d := tt.sample(rng)
				h.record(d)
				all = append(all, d)
			}
			slices.Sort(all)
			for _, q := range []float64{0.5, 0.95, 0.99} {
				want := all[int(q*float64(len(all)))]
				got := h.quantile(q)
				if diff := (got - want).Abs(); float64(diff) > float64(want)/(1<<subBits)+1 {
					t.Errorf("p%v = %v, want %v", q*100, got, want)
				}
			}
			if time.Duration(h.max.Load()) != all[len(all)-1] {
				t.Errorf("max %v, want %v", time.Duration(h.max.Load()), all[len(all)-1])
			}
		})
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Errorf("an empty histogram's median is %v", empty.quantile(0.5))
	}
}
