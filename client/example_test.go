package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"

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

	ctx := context.Background()
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

	c.Message(ctx, "Plan a weekend in Lisbon")
	c.Wait(ctx, func(v client.View) bool { return v.Phase == wsproto.PhaseSolving })
	c.Drop() // the network goes away; the client resumes
	c.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil })

	v := c.View()
	fmt.Println("phase:", v.Phase)
	fmt.Println("answer:", strings.SplitN(*v.Run.FinalAnswer, "\n", 2)[0])
	fmt.Println("violations:", len(v.Stats.Violations))
	// Output:
	// phase: idle
	// answer: Answer to "Plan a weekend in Lisbon":
	// violations: 0
}
