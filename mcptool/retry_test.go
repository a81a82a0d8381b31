//go:build unix

package mcptool

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/mcptest"
	"github.com/baton-run/baton/tool"
)

// TestRetryInMeta: a call made with tool.WithRetry reaches the server with
// RetryMetaKey true in its request's _meta; any other call without it.
func TestRetryInMeta(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	cmd, args := mcptest.Command(t, "-tools", "count", "-ran", ran)
	m := startManager(t, []Spec{{Name: "ct", Command: cmd, Args: args}}, Options{})
	count := findTool(t, m, "ct__count")
	for _, retry := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		if retry {
			ctx = tool.WithRetry(ctx)
		}
		_, err := count.Call(ctx, []byte(`{"n":7}`))
		cancel()
		if err != nil {
			t.Fatalf("call (retry %t): %v", retry, err)
		}
	}
	if got, err := os.ReadFile(ran); err != nil || string(got) != "7 false\n7 true\n" {
		t.Errorf("the server saw %q (%v), want a plain call, then a retry", got, err)
	}
}
