package main

// These tests hold the yardstick to Baton: a run's frames must be Baton's
// (the same events, about the same bytes), and Baton's own client must
// find nothing wrong with them. The tests use Baton's packages; the server
// itself does not.

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// diamond is baton-load's tasks workload.
var diamond = []wsproto.Task{
	{ID: "a", Title: "Load task a", DependsOn: []string{}},
	{ID: "b", Title: "Load task b", DependsOn: []string{}},
	{ID: "c", Title: "Load task c", DependsOn: []string{"a", "b"}},
	{ID: "d", Title: "Load task d", DependsOn: []string{"c"}},
}

func serveBare(t *testing.T, m mode) string {
	t.Helper()
	s := &server{mode: m}
	srv := httptest.NewServer(s.routes())
	t.Cleanup(func() {
		srv.Close()
		s.conns.Wait()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
}

func serveBaton(t *testing.T) string {
	t.Helper()
	orch, err := orchestrator.New(orchestrator.Models{Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{}},
		&orchestrator.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(orch)
	t.Cleanup(func() {
		srv.Close()
		orch.Close(context.Background())
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// record runs the diamond on a fresh session and returns the run's raw
// frames, system.connected first.
func record(t *testing.T, url string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	start, _ := json.Marshal(map[string]any{"event": "user.solve_tasks", "metadata": map[string]any{"tasks": diamond}})
	var frames [][]byte
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("after %d frames: %v", len(frames), err)
		}
		frames = append(frames, b)
		var f struct{ Event string }
		json.Unmarshal(b, &f)
		switch f.Event {
		case wsproto.EventConnected:
			if err := ws.Write(ctx, websocket.MessageText, start); err != nil {
				t.Fatal(err)
			}
		case wsproto.EventFinalAnswer:
			ws.Close(websocket.StatusNormalClosure, "")
			return frames
		}
	}
}

func TestFramesAreBatons(t *testing.T) {
	want := record(t, serveBaton(t))
	events := func(frames [][]byte) (names []string, size int) {
		for _, b := range frames {
			var f struct{ Event string }
			json.Unmarshal(b, &f)
			names = append(names, f.Event)
			size += len(b)
		}
		slices.Sort(names)
		return names, size
	}
	wantNames, wantSize := events(want)
	for _, tc := range []struct {
		name string
		mode mode
	}{
		{"naive", naive{}},
		{"preencoded", newPreencoded()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, size := events(record(t, serveBare(t, tc.mode)))
			if !slices.Equal(names, wantNames) {
				t.Errorf("events:\n%v\nBaton's:\n%v", names, wantNames)
			}
			// Ids, timestamps and durations differ by a few bytes a run.
			if diff := size - wantSize; diff < -wantSize/100 || diff > wantSize/100 {
				t.Errorf("a run is %d bytes, Baton's %d", size, wantSize)
			}
		})
	}
}

func TestClientFindsNoViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   mode
		plan   bool
		events int
	}{
		{"naive tasks", naive{}, false, 74},
		{"naive plan", naive{}, true, 80},
		{"preencoded tasks", newPreencoded(), false, 74},
		{"preencoded plan", newPreencoded(), true, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			yes := true
			c, err := client.Dial(ctx, serveBare(t, tc.mode), &client.Options{AckEvery: 10,
				OnConfirm: func(wsproto.UserConfirm) *client.Answer { return &client.Answer{Confirmed: &yes} }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for run := 1; run <= 2; run++ {
				if tc.plan {
					err = c.Message(ctx, "Plan a weekend")
				} else {
					err = c.SolveTasks(ctx, diamond)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Wait(ctx, func(v client.View) bool {
					return v.Stats.Events == run*tc.events && v.Run != nil && v.Run.FinalAnswer != nil
				}); err != nil {
					t.Fatalf("run %d: %v; view %+v", run, err, c.View().Stats)
				}
			}
			if v := c.View(); len(v.Stats.Violations) > 0 || v.Stats.Errors > 0 || v.Phase != wsproto.PhaseIdle {
				t.Errorf("violations %v, %d errors, phase %s", v.Stats.Violations, v.Stats.Errors, v.Phase)
			}
		})
	}
}
