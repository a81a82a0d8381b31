package web

import (
	"bufio"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestJSClientLive runs baton-client.mjs against a real server
// (testdata/live.mjs): a run whose network is cut in the middle, a reload
// that resumes the session from storage, and a stored session the server
// no longer knows. The script asks for the cut by printing "CUT"; this side
// cuts every connection and answers on its stdin.
func TestJSClientLive(t *testing.T) { runLive(t, "testdata/live.mjs") }

// TestJSClientFollowLive runs testdata/follow.mjs against a real server: a
// laptop and a phone following one session through a cut, the phone
// approving the plan, both ending with every event once and the same
// state; then a plain resume replacing both (4000).
func TestJSClientFollowLive(t *testing.T) { runLive(t, "testdata/follow.mjs") }

// runLive runs a live script: it answers each "CUT" by cutting every
// connection, and wants "OK" and exactly one cut.
func runLive(t *testing.T, script string) {
	nodeBin(t) // skip before starting anything when there is no node
	srv := startServer(t, 10*time.Millisecond, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := nodeCommand(ctx, t, []string{"BATON_WS=" + srv.WS()}, "--experimental-websocket", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cuts, ok := 0, false
	lines := bufio.NewScanner(stdout)
	for lines.Scan() { // until the script exits (or ctx kills it)
		line := lines.Text()
		t.Log(line)
		switch line {
		case "CUT":
			cuts++
			fmt.Fprintf(stdin, "CUT-DONE %d\n", srv.Cut())
		case "OK":
			ok = true
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v (ctx: %v)", script, err, ctx.Err())
	}
	if !ok || cuts != 1 {
		t.Fatalf("%s ended without OK (ok %v) or asked for %d cuts, want 1", script, ok, cuts)
	}
}
