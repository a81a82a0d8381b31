package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/npmtest"
)

// TestAGUINode runs testdata/agui.mjs: AG-UI's own client (@ag-ui/client's
// HttpAgent, pinned in internal/npmtest) through a plan-mode run with its
// interrupt and resume and a chat-mode run, verifyEvents on every stream,
// and a fetch client cutting a stream mid-run and resuming it with
// Last-Event-ID.
func TestAGUINode(t *testing.T) {
	modules := npmtest.Modules(t) // skips (or fails under CI) without node and npm
	base := startServer(t, "--sim-delay", "10ms")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	cmd := exec.CommandContext(ctx, "node", "testdata/agui.mjs")
	cmd.Env = append(os.Environ(), "BATON_URL="+base, "BATON_NODE_MODULES="+modules)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	t.Log(out.String())
	if err != nil || !strings.HasSuffix(out.String(), "OK\n") {
		t.Fatalf("testdata/agui.mjs: %v (ctx: %v)", err, ctx.Err())
	}
}
