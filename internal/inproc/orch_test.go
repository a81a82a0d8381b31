package inproc_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/internal/inproc"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
)

// TestOrchestrator: the orchestrator's /ws serves a run over an
// in-process connection as over a socket — with a client that sends its
// first frame the moment the handshake's answer arrives, which a pipe
// makes likely to reach the server before it has taken the connection
// over from net/http (one run in three lost the frame's first byte, and
// the connection, before orchestrator's upgrader kept it buffered).
func TestOrchestrator(t *testing.T) {
	orch, err := orchestrator.New(orchestrator.Models{Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{}},
		&orchestrator.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := inproc.Serve(orch)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer orch.Close(ctx)
	defer s.Close()
	ws, _, err := s.Dial(ctx, "/ws", "198.51.100.1:40000", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.Write(ctx, websocket.MessageText, []byte(`{"event":"user.solve_tasks","metadata":{"tasks":[{"id":"a","title":"A"}]}}`))
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var f struct{ Event string }
		json.Unmarshal(b, &f)
		if f.Event == "agent.final_answer" {
			return
		}
	}
}
