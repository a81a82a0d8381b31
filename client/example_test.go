package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// A whole run: send a request, confirm the plan from the callback, drop
// the connection half-way, and let the client resume by itself.
func Example() {
	// An in-process Baton on the simulated model.
	orch, _ := orchestrator.New(orchestrator.Models{
		Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{},
	}, &orchestrator.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(orch)
	defer orch.Close(context.Background())
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http")

	// Every wait has a deadline: a run that never ends fails the example
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, url, &client.Options{
		Resume:   true,
		AckEvery: 10,
		OnConfirm: func(q wsproto.UserConfirm) *client.Answer {
			yes := true
			return &client.Answer{Confirmed: &yes} // accept the plan as drafted
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	if err := c.Message(ctx, "Plan a weekend in Lisbon"); err != nil {
		fmt.Println(err)
		return
	}
	// Wait for conditions that stay true once reached: a phase like
	// "solving" can pass between two looks.
	if err := c.Wait(ctx, taskStarted); err != nil {
		fmt.Println(err)
		return
	}
	c.Drop() // the network goes away; the client resumes
	if err := c.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
		fmt.Println(err)
		return
	}

	v := c.View()
	fmt.Println("phase:", v.Phase)
	fmt.Println("answer:", strings.SplitN(*v.Run.FinalAnswer, "\n", 2)[0])
	fmt.Println("violations:", len(v.Stats.Violations))
	// Output:
	// phase: idle
	// answer: Answer to "Plan a weekend in Lisbon":
	// violations: 0
}

// taskStarted holds once any task of the run has started, and stays true
// for the rest of the run.
func taskStarted(v client.View) bool {
	if v.Run == nil {
		return false
	}
	for _, t := range v.Run.Tasks {
		if t.Status != wsproto.TaskPending {
			return true
		}
	}
	return false
}
