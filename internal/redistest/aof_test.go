package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// TestAOFRestart: a server of StartAOF keeps, across a SIGKILL and a
// restart in place, every write it acknowledged (appendfsync always); one
// of Start does not.
func TestAOFRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range []struct {
		name  string
		start func(testing.TB) *redistest.Server
		kept  bool
	}{
		{"aof always", func(t testing.TB) *redistest.Server { return redistest.StartAOF(t, "always") }, true},
		{"no persistence", redistest.Start, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.start(t)
			c := s.Client(t)
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			s.Restart(t)
			n, err := c.Exists(ctx, "k").Result()
			if err != nil {
				t.Fatalf("EXISTS after the restart: %v", err)
			}
			if kept := n == 1; kept != tt.kept {
				t.Errorf("the key kept across the restart: %v, want %v", kept, tt.kept)
			}
		})
	}
}
