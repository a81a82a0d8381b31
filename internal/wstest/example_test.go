package wstest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// A test's run on an in-process Baton: connect, start a run, refuse its
// plan, and see what the server sent. (A Conn needs the test's t, so this
// example compiles but is not run; TestExample runs the same body.)
func Example() {
	var t *testing.T // the test's own
	exampleRun(t)
}

func exampleRun(t *testing.T) {
	orch, err := orchestrator.New(orchestrator.Models{
		Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{},
	}, &orchestrator.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(orch)
	t.Cleanup(func() { srv.Close(); orch.Close(context.Background()) })
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	c, hello := wstest.Connect(t, url, nil)
	c.Message("Plan a weekend in Lisbon")
	frames := c.Until(wsproto.EventUserConfirm)
	confirm := frames[len(frames)-1]
	c.Respond(confirm.StepID, map[string]any{"confirmed": false})
	c.Until(wsproto.EventPlanCancelled)

	// A resume with a wrong token is answered with an error, and the
	// connection stays open.
	again := wstest.Dial(t, url, nil)
	again.Expect(wsproto.EventConnected)
	again.Send(wsproto.EventUserReconnect, map[string]any{"session_id": hello.SessionID, "resume_token": "wrong", "last_seq": 0})
	again.ExpectError(wsproto.CodeResumeRejected)
}

// A refused handshake: TryDial returns the response instead of failing.
func ExampleTryDial() {
	var t *testing.T // the test's own
	url := "ws://127.0.0.1:8080/ws"
	c, resp, err := wstest.TryDial(t, url, &wstest.Options{HTTPHeader: http.Header{"Authorization": {"Bearer expired"}}})
	if err == nil {
		c.WS().CloseNow()
		t.Fatal("upgraded with an expired token")
	}
	if resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused with %v, want 401", resp)
	}
}

// How a connection ended: a frame past the server's read limit (64 KiB by
// default) closes it with 1009.
func ExampleConn_CloseCode() {
	var t *testing.T // the test's own
	c, _ := wstest.Connect(t, "ws://127.0.0.1:8080/ws", nil)
	c.SendRaw(websocket.MessageText, []byte(`{"event":"user.message","content":"`+strings.Repeat("x", 70<<10)+`"}`))
	if code := c.CloseCode(); code != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %d, want 1009", code)
	}
}

// TestExample runs Example's body.
func TestExample(t *testing.T) { exampleRun(t) }
