package mcptool

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const base, ceiling = time.Second, 10 * time.Second
	tests := []struct {
		name     string
		failures int
		want     time.Duration
	}{
		{name: "no failure", failures: 0, want: 0},
		{name: "first failure restarts at once", failures: 1, want: 0},
		{name: "second", failures: 2, want: time.Second},
		{name: "third doubles", failures: 3, want: 2 * time.Second},
		{name: "fourth", failures: 4, want: 4 * time.Second},
		{name: "capped", failures: 6, want: 10 * time.Second},
		{name: "many", failures: 1000, want: 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoff(tt.failures, base, ceiling); got != tt.want {
				t.Fatalf("backoff(%d) = %s, want %s", tt.failures, got, tt.want)
			}
		})
	}
}
