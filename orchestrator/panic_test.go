package orchestrator

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// panicWord in a request or a task makes the panicky models panic.
const panicWord = "PANIC"

type panickyPlanner struct{ *planner.Sim }

func (p panickyPlanner) Plan(ctx context.Context, req planner.Request, step func(string)) (planner.Plan, error) {
	if strings.Contains(req.Text, panicWord+" plan") {
		panic("the planner panicked")
	}
	return p.Sim.Plan(ctx, req, step)
}

func (p panickyPlanner) Decide(ctx context.Context, in planner.DecideInput) (planner.Decision, error) {
	if strings.Contains(in.Request, panicWord+" decide") {
		panic("the decide step panicked")
	}
	return p.Sim.Decide(ctx, in)
}

type panickySolver struct{ *solver.Sim }

func (s panickySolver) Turn(ctx context.Context, t *solver.Turn, progress func(float64, string)) (solver.Reply, error) {
	if strings.Contains(t.Task.Description, panicWord+" task") {
		var m map[string]int
		//lint:ignore SA5000 the point: a runtime error, as a bug would make
		m["nil map"]++
	}
	return s.Sim.Turn(ctx, t, progress)
}

type panickyAggregator struct{ *aggregator.Sim }

func (a panickyAggregator) Aggregate(ctx context.Context, in aggregator.Input, stream func(string)) (aggregator.Output, error) {
	for _, r := range in.Tasks {
		if strings.Contains(r.Task.Description, panicWord+" aggregate") {
			panic("the aggregator panicked")
		}
	}
	return a.Sim.Aggregate(ctx, in, stream)
}

// syncBuffer is a log the server writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestModelPanic: a panic in a model — the solver's turn, the planner, the
// decide step or the aggregator — is the failure of what called it, sent
// to the client as any failure is and logged with its stack; the process
// lives on, and another session's run on the same server completes.
func TestModelPanic(t *testing.T) {
	tests := []struct {
		name  string
		start func(ctx context.Context, cl *client.Client) error
		// failed says whether the client saw the failure.
		failed func(v client.View, errs []wsproto.ExecutionError) bool
		stage  string // of the "model call failed" log line
	}{
		{
			name: "solver",
			start: func(ctx context.Context, cl *client.Client) error {
				return cl.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A", Description: panicWord + " task", DependsOn: []string{}}})
			},
			failed: func(_ client.View, errs []wsproto.ExecutionError) bool {
				for _, e := range errs {
					if e.TaskID == "a" && e.ErrorType == "permanent" && !e.Recoverable && strings.Contains(e.Message, "panic") {
						return true // the run then asks what to do with the task
					}
				}
				return false
			},
		},
		{
			name:  "planner",
			start: func(ctx context.Context, cl *client.Client) error { return cl.Message(ctx, panicWord+" plan") },
			failed: func(_ client.View, errs []wsproto.ExecutionError) bool {
				for _, e := range errs {
					if e.Stage == "plan" && e.ErrorType == "permanent" && strings.Contains(e.Message, "panic") {
						return true
					}
				}
				return false
			},
			stage: "plan",
		},
		{
			name: "decide step",
			start: func(ctx context.Context, cl *client.Client) error {
				return cl.MessageAdaptive(ctx, panicWord+" decide")
			},
			failed: func(v client.View, _ []wsproto.ExecutionError) bool {
				return v.Run != nil && v.Run.FinalAnswer != nil
			},
			stage: "decide",
		},
		{
			name: "aggregator",
			start: func(ctx context.Context, cl *client.Client) error {
				return cl.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A", Description: panicWord + " aggregate", DependsOn: []string{}}})
			},
			failed: func(v client.View, _ []wsproto.ExecutionError) bool {
				return v.Run != nil && v.Run.FinalAnswer != nil && strings.Contains(*v.Run.FinalAnswer, "could not be summarised")
			},
			stage: "aggregate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			srv, err := New(Models{panickyPlanner{&planner.Sim{}}, panickySolver{&solver.Sim{}}, panickyAggregator{&aggregator.Sim{}}},
				&Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			defer srv.Close(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			url := "ws" + strings.TrimPrefix(hs.URL, "http")
			yes := true
			confirm := func(wsproto.UserConfirm) *client.Answer { return &client.Answer{Confirmed: &yes} }

			var mu sync.Mutex
			var errs []wsproto.ExecutionError
			cl, err := client.Dial(ctx, url, &client.Options{OnConfirm: confirm, OnEvent: func(f client.Frame) {
				if f.Event != wsproto.EventExecutionError {
					return
				}
				if m, err := f.Meta(); err == nil {
					if e, ok := m.(*wsproto.ExecutionError); ok {
						mu.Lock()
						errs = append(errs, *e)
						mu.Unlock()
					}
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := tt.start(ctx, cl); err != nil {
				t.Fatal(err)
			}
			if err := cl.Wait(ctx, func(v client.View) bool {
				mu.Lock()
				defer mu.Unlock()
				return tt.failed(v, errs)
			}); err != nil {
				t.Fatalf("the client did not see the panic's failure: %v; errors %+v", err, errs)
			}

			// The server lives on: another session's run completes.
			other, err := client.Dial(ctx, url, &client.Options{OnConfirm: confirm})
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := other.Message(ctx, "Write a haiku"); err != nil {
				t.Fatal(err)
			}
			if err := other.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
				t.Fatalf("another session's run: %v", err)
			}
			log := logs.String()
			if !strings.Contains(log, `"msg":"model call failed"`) || !strings.Contains(log, `"stack":"goroutine `) ||
				!strings.Contains(log, `"session":"sess_`) || !strings.Contains(log, `"run":"run_`) {
				t.Errorf("no \"model call failed\" line with the panic's stack, session and run:\n%s", log)
			}
			if tt.stage != "" && !strings.Contains(log, `"stage":"`+tt.stage+`"`) {
				t.Errorf("no \"model call failed\" line of stage %s:\n%s", tt.stage, log)
			}
		})
	}
}
