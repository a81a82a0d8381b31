package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts an in-process Baton on the simulated model with no delays.
func serve(t *testing.T) string { return serveWith(t, orchestrator.Options{}) }

// serveWith is serve with options (the logger is set here).
func serveWith(t *testing.T, opts orchestrator.Options) string {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	orch, err := orchestrator.New(orchestrator.Models{
		Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{},
	}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(orch)
	t.Cleanup(func() {
		orch.Close(context.Background())
		srv.Close()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// A waiter whose condition reads what OnEvent records must see the last
// frame's effect: waiters are woken after the callback, not before it.
// With a slow OnEvent and no frame after the final answer, waking first
// left the waiter blocked until its deadline.
func TestWaitSeesWhatOnEventRecorded(t *testing.T) {
	url := serve(t)
	for _, pause := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run(pause.String(), func(t *testing.T) {
			var mu sync.Mutex
			answers := 0
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, url, &client.Options{OnEvent: func(f client.Frame) {
				time.Sleep(pause) // a slow application callback, the case under test
				if f.Event == wsproto.EventFinalAnswer {
					mu.Lock()
					answers++
					mu.Unlock()
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}}); err != nil {
				t.Fatal(err)
			}
			err = c.Wait(ctx, func(client.View) bool {
				mu.Lock()
				defer mu.Unlock()
				return answers == 1
			})
			if err != nil {
				t.Fatalf("the final answer was applied but the waiter did not see OnEvent's record: %v", err)
			}
		})
	}
}

// Wait reports the client stopping for good instead of blocking.
func TestWaitEndsWhenTheClientStops(t *testing.T) {
	url := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, nil) // no Resume: a drop is the end
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Drop()
	err = c.Wait(ctx, func(v client.View) bool { return v.Run != nil })
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Wait = %v (ctx %v), want an error saying the client stopped", err, ctx.Err())
	}
}

// The task list a client chose — its user.solve_tasks list, or its edit of
// the plan — is in its view from the run's first solver.start, as it is in
// the server's state (no event carries it).
func TestViewHasTheChosenTasks(t *testing.T) {
	url := serve(t)
	yes := true
	edit := []wsproto.Task{{ID: "x", Title: "X", DependsOn: []string{}}, {ID: "y", Title: "Y", DependsOn: []string{"x"}}}
	for _, tt := range []struct {
		name  string
		start func(context.Context, *client.Client) error
		// answer is the plan's answer (nil for a user.solve_tasks run)
		answer *client.Answer
	}{
		{name: "solve_tasks", start: func(ctx context.Context, c *client.Client) error { return c.SolveTasks(ctx, edit) }},
		{name: "edited plan", start: func(ctx context.Context, c *client.Client) error { return c.Message(ctx, "Plan a trip") },
			answer: &client.Answer{Confirmed: &yes, Tasks: edit}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := client.Dial(ctx, url, &client.Options{OnConfirm: func(wsproto.UserConfirm) *client.Answer { return tt.answer }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := tt.start(ctx, c); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
				t.Fatal(err)
			}
			v := c.View()
			if len(v.Run.Tasks) != 2 || v.Run.Tasks[0].ID != "x" || v.Run.Tasks[1].ID != "y" {
				t.Fatalf("tasks in the view: %+v, want x and y", v.Run.Tasks)
			}
			for _, task := range v.Run.Tasks {
				if task.Status != wsproto.TaskCompleted || task.Attempt != 1 {
					t.Errorf("task %s: %s attempt %d, want completed at 1", task.ID, task.Status, task.Attempt)
				}
			}
		})
	}
}
