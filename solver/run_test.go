package solver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an Events that logs every call as a line, tracks how many
// tasks execute at once, and answers Decide through a channel.
type recorder struct {
	mu      sync.Mutex // guards the fields below
	lines   []string
	changed chan struct{} // closed at the next line; made by the first waitLine
	running int
	peak    int

	decisions chan Decision // answers to Decide; nil answers Skip at once
	asked     chan string   // receives the task id of each Decide
	retrying  chan string   // receives the task id of each Retrying
	started   chan string   // receives the task id of each Started

	approve bool                                                          // ConfirmTool's answer
	answer  func(ctx context.Context, id, question string) (string, bool) // AskUser's; nil: no answer
	adapt   func(ctx context.Context, in AdaptInput) Adaptation           // Adapt's; nil: continue
}

func (r *recorder) log(format string, args ...any) {
	r.mu.Lock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
}

func (r *recorder) Started(id string, attempt int) {
	r.mu.Lock()
	r.running++
	r.peak = max(r.peak, r.running)
	r.mu.Unlock()
	r.log("start %s %d", id, attempt)
	if r.started != nil {
		r.started <- id
	}
}
func (r *recorder) Progress(string, int, float64, string) {}
func (r *recorder) Completed(id string, attempt int, _ Result, _ time.Duration) {
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	r.log("done %s %d", id, attempt)
}
func (r *recorder) Failed(id string, attempt int, c failure.Class, _ error) {
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	r.log("fail %s %d %s", id, attempt, c.Type)
}
func (r *recorder) Retrying(id string, retry, maxAttempts int, _ string, _ time.Duration) {
	r.log("retry %s %d/%d", id, retry, maxAttempts)
	if r.retrying != nil {
		r.retrying <- id
	}
}
func (r *recorder) Recovered(id string, attempt int) { r.log("recovered %s %d", id, attempt) }
func (r *recorder) GaveUp(id string, attempts int, _ error) {
	r.log("gaveup %s %d", id, attempts)
}
func (r *recorder) Decide(ctx context.Context, id string, _ error) Decision {
	if r.asked != nil {
		r.asked <- id
	}
	if r.decisions == nil {
		return Skip
	}
	select {
	case d := <-r.decisions:
		return d
	case <-ctx.Done():
		return Skip
	}
}
func (r *recorder) Cancelled(id, reason string) { r.log("cancelled %s %s", id, reason) }
func (r *recorder) Skipped(id, reason, dep string) {
	if reason == wsproto.ReasonDependencyFailed {
		r.log("skipped %s %s", id, dep)
	} else {
		r.log("skipped %s %s", id, reason)
	}
}
func (r *recorder) Restarted(id string) { r.log("restarted %s", id) }
func (r *recorder) Adapt(ctx context.Context, in AdaptInput) Adaptation {
	r.log("adapt %d after %s", in.Number, in.AfterTask)
	if r.adapt == nil {
		return Adaptation{}
	}
	return r.adapt(ctx, in)
}
func (r *recorder) PlanUpdated(m *wsproto.PlanUpdated) {
	var ids []string
	for _, t := range m.Tasks {
		ids = append(ids, t.ID)
	}
	r.log("plan v%d +%d -%v %v", m.Version, len(m.Added), m.Removed, ids)
}
func (r *recorder) ToolCall(m *wsproto.ToolCall) {
	r.log("tool_call %s %d %d %s %s", m.TaskID, m.Attempt, m.Round, m.Tool, m.Arguments)
}
func (r *recorder) ToolResult(m *wsproto.ToolResult) {
	r.log("tool_result %s %d %d %s %t %q", m.TaskID, m.Attempt, m.Round, m.Tool, m.OK, m.Result)
}
func (r *recorder) TodoUpdated(m *wsproto.TodoUpdated) {
	r.log("todo.updated %s v%d %d items", m.TaskID, m.Version, len(m.Items))
}
func (r *recorder) TodoItemProgress(m *wsproto.TodoItemProgress) {
	r.log("todo.item_progress %s v%d %s %s %d", m.TaskID, m.Version, m.Item.ID, m.Item.Status, m.Item.ToolCalls)
}
func (r *recorder) TodoCompleted(m *wsproto.TodoCompleted) {
	r.log("todo.completed %s v%d", m.TaskID, m.Version)
}
func (r *recorder) ConfirmTool(ctx context.Context, id, tool string, args json.RawMessage) bool {
	r.log("confirm %s %s", id, tool)
	return r.approve
}
func (r *recorder) AskUser(ctx context.Context, id, question, _ string) (string, bool) {
	r.log("ask %s %s", id, question)
	if r.answer == nil {
		return "", false
	}
	return r.answer(ctx, id, question)
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// fakeModel fails a task's first executions as its description says
// ("fail:<type>:<n>"), blocks tasks named in hold until ctx is done, and
// otherwise completes at once.
type fakeModel struct {
	hold map[string]bool
}

func (m fakeModel) Turn(ctx context.Context, in *Turn, progress func(float64, string)) (Reply, error) {
	if m.hold[in.Task.ID] {
		<-ctx.Done()
		return Reply{}, ctx.Err()
	}
	var typ string
	var n int
	if _, err := fmt.Sscanf(in.Task.Description, "fail:%s %d", &typ, &n); err == nil && in.Attempt <= n {
		return Reply{}, &failure.Error{Type: typ, Err: errors.New("fake failure")}
	}
	progress(1, "done")
	return Reply{Text: "result of " + in.Task.ID, Usage: wsproto.Usage{PromptTokens: 2, CompletionTokens: 1, TotalTokens: 3}}, nil
}

func task(id string, deps ...string) wsproto.Task {
	return wsproto.Task{ID: id, Title: "T " + id, DependsOn: deps}
}

func failing(id, typ string, n int, deps ...string) wsproto.Task {
	t := task(id, deps...)
	t.Description = fmt.Sprintf("fail:%s %d", typ, n)
	return t
}

func index(lines []string, line string) int { return slices.Index(lines, line) }

func TestScheduler(t *testing.T) {
	fast := failure.Policy{MaxRetries: 2, Base: time.Microsecond, Max: time.Microsecond}
	tests := []struct {
		name   string
		tasks  []wsproto.Task
		opts   Options
		status map[string]string
		usage  wsproto.Usage
		check  func(t *testing.T, lines []string, peak int)
	}{
		{
			name:   "dependencies finish before dependents start",
			tasks:  []wsproto.Task{task("a"), task("b"), task("c", "a", "b"), task("d", "c")},
			status: map[string]string{"a": "completed", "b": "completed", "c": "completed", "d": "completed"},
			usage:  wsproto.Usage{PromptTokens: 8, CompletionTokens: 4, TotalTokens: 12},
			check: func(t *testing.T, lines []string, _ int) {
				for _, edge := range [][2]string{{"a", "c"}, {"b", "c"}, {"c", "d"}} {
					if index(lines, "done "+edge[0]+" 1") > index(lines, "start "+edge[1]+" 1") {
						t.Errorf("%s started before %s completed: %q", edge[1], edge[0], lines)
					}
				}
			},
		},
		{
			name:   "a failed task skips its dependents transitively",
			tasks:  []wsproto.Task{failing("a", failure.Permanent, 1), task("b", "a"), task("c", "b"), task("d")},
			opts:   Options{Retry: fast},
			status: map[string]string{"a": "failed", "b": "skipped", "c": "skipped", "d": "completed"},
			check: func(t *testing.T, lines []string, _ int) {
				for _, want := range []string{"fail a 1 permanent", "gaveup a 1", "skipped b a", "skipped c b"} {
					if index(lines, want) < 0 {
						t.Errorf("missing %q in %q", want, lines)
					}
				}
				if index(lines, "retry a 1/2") >= 0 {
					t.Errorf("permanent failure was retried: %q", lines)
				}
			},
		},
		{
			name:   "retry then success",
			tasks:  []wsproto.Task{failing("a", failure.Network, 2)},
			opts:   Options{Retry: fast},
			status: map[string]string{"a": "completed"},
			check: func(t *testing.T, lines []string, _ int) {
				want := []string{"start a 1", "fail a 1 network", "retry a 1/2", "start a 2", "fail a 2 network",
					"retry a 2/2", "start a 3", "done a 3", "recovered a 3"}
				if !slices.Equal(lines, want) {
					t.Errorf("events\n got %q\nwant %q", lines, want)
				}
			},
		},
		{
			name:   "retries exhausted",
			tasks:  []wsproto.Task{failing("a", failure.Timeout, 5), task("b", "a")},
			opts:   Options{Retry: fast},
			status: map[string]string{"a": "failed", "b": "skipped"},
			check: func(t *testing.T, lines []string, _ int) {
				if index(lines, "gaveup a 3") < 0 || index(lines, "start a 4") >= 0 {
					t.Errorf("want 3 executions then give up: %q", lines)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			rep := New(tt.tasks, fakeModel{}, rec, tt.opts).Execute(t.Context())
			for _, ts := range rep.Tasks {
				if want := tt.status[ts.Task.ID]; ts.Status != want {
					t.Errorf("task %s: status %s, want %s", ts.Task.ID, ts.Status, want)
				}
			}
			if tt.usage != (wsproto.Usage{}) && rep.Usage != tt.usage {
				t.Errorf("usage %+v, want %+v", rep.Usage, tt.usage)
			}
			tt.check(t, rec.events(), rec.peak)
		})
	}
}

// gate is a model whose every turn blocks until the test lets one through
// (or ctx ends), and that counts the turns in progress at once.
type gate struct {
	proceed chan struct{}

	mu   sync.Mutex // guards in, peak
	in   int
	peak int
}

func (g *gate) Turn(ctx context.Context, _ *Turn, _ func(float64, string)) (Reply, error) {
	g.mu.Lock()
	g.in++
	g.peak = max(g.peak, g.in)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.in--
		g.mu.Unlock()
	}()
	select {
	case <-g.proceed:
		return Reply{Text: "ok"}, nil
	case <-ctx.Done():
		return Reply{}, ctx.Err()
	}
}

// TestMaxParallel: with a model that holds every task until the test
// releases it, the scheduler starts exactly MaxParallel tasks (or all, when
// fewer) and starts another only when one ends. Since no task can end
// before the test lets it, a scheduler that ignored the limit would start
// them all in its first step: the count is not left to timing.
func TestMaxParallel(t *testing.T) {
	tests := []struct {
		name         string
		limit, tasks int
	}{
		{"one at a time", 1, 4},
		{"two of six", 2, 6},
		{"three of seven", 3, 7},
		{"more slots than tasks", 8, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tasks []wsproto.Task
			for i := range tt.tasks {
				tasks = append(tasks, task(fmt.Sprint("t", i)))
			}
			model := &gate{proceed: make(chan struct{})}
			rec := &recorder{}
			done := make(chan Report, 1)
			go func() { done <- New(tasks, model, rec, Options{MaxParallel: tt.limit}).Execute(t.Context()) }()
			for i := range tt.tasks {
				select {
				case model.proceed <- struct{}{}:
				case <-time.After(10 * time.Second):
					t.Fatalf("turn %d never came; events %q", i+1, rec.events())
				}
			}
			rep := <-done
			if n := rep.Count(wsproto.TaskCompleted); n != tt.tasks {
				t.Errorf("%d tasks completed, want %d", n, tt.tasks)
			}
			want := min(tt.limit, tt.tasks)
			rec.mu.Lock()
			peak := rec.peak
			rec.mu.Unlock()
			if peak != want {
				t.Errorf("%d tasks started at once (solver.start not yet followed by their end), want %d", peak, want)
			}
			if model.peak > tt.limit {
				t.Errorf("%d turns in progress at once, want at most %d", model.peak, tt.limit)
			}
		})
	}
}

func TestDecisionRetryRunsAFreshBudget(t *testing.T) {
	rec := &recorder{decisions: make(chan Decision, 1), asked: make(chan string, 1)}
	rec.decisions <- Retry
	tasks := []wsproto.Task{failing("a", failure.Internal, 2)}
	rep := New(tasks, fakeModel{}, rec, Options{Retry: failure.Policy{MaxRetries: 1, Base: time.Microsecond}}).Execute(t.Context())
	if rep.Tasks[0].Status != wsproto.TaskCompleted {
		t.Fatalf("status %s, want completed; events %q", rep.Tasks[0].Status, rec.events())
	}
	want := []string{"start a 1", "fail a 1 internal", "retry a 1/1", "start a 2", "fail a 2 internal", "gaveup a 2",
		"start a 3", "done a 3"}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Errorf("events\n got %q\nwant %q", got, want)
	}
}

// A task waiting for its decision frees its slot: with one slot, an
// independent task still runs while the question is open.
func TestPendingDecisionDoesNotHoldASlot(t *testing.T) {
	rec := &recorder{decisions: make(chan Decision), asked: make(chan string, 1)}
	tasks := []wsproto.Task{failing("a", failure.Permanent, 1), task("b")}
	done := make(chan Report, 1)
	go func() {
		done <- New(tasks, fakeModel{}, rec, Options{MaxParallel: 1}).Execute(t.Context())
	}()
	<-rec.asked
	// b can only complete while a's question is open if a freed its slot.
	for !slices.Contains(rec.events(), "done b 1") {
		select {
		case rep := <-done:
			t.Fatalf("run ended before the decision: %v", rep)
		case <-time.After(time.Millisecond):
		}
	}
	rec.decisions <- Skip
	rep := <-done
	if rep.Tasks[0].Status != wsproto.TaskFailed || rep.Tasks[1].Status != wsproto.TaskCompleted {
		t.Errorf("statuses %v", rep.Tasks)
	}
}

func TestCancel(t *testing.T) {
	slow := failure.Policy{MaxRetries: 3, Base: time.Hour, Max: time.Hour}
	tests := []struct {
		name string
		// setup returns the recorder; wait blocks until the moment to cancel.
		tasks    []wsproto.Task
		hold     map[string]bool
		rec      func() *recorder
		wait     func(r *recorder)
		cancel   func(ctx context.CancelFunc, run *Run) error
		status   map[string]string
		wantLine string
	}{
		{
			name:  "user.cancel_task during a backoff wait",
			tasks: []wsproto.Task{failing("a", failure.Network, 9), task("b", "a")},
			rec:   func() *recorder { return &recorder{retrying: make(chan string, 1)} },
			wait:  func(r *recorder) { <-r.retrying },
			cancel: func(_ context.CancelFunc, run *Run) error {
				return run.CancelTask(context.Background(), "a")
			},
			status:   map[string]string{"a": "cancelled", "b": "skipped"},
			wantLine: "cancelled a user_cancel_task",
		},
		{
			name:  "run cancelled during a backoff wait",
			tasks: []wsproto.Task{failing("a", failure.Network, 9), task("b", "a")},
			rec:   func() *recorder { return &recorder{retrying: make(chan string, 1)} },
			wait:  func(r *recorder) { <-r.retrying },
			cancel: func(cancel context.CancelFunc, _ *Run) error {
				cancel()
				return nil
			},
			status:   map[string]string{"a": "cancelled", "b": "pending"},
			wantLine: "cancelled a pipeline_cancelled",
		},
		{
			name:  "user.cancel_task during a pending decision",
			tasks: []wsproto.Task{failing("a", failure.Permanent, 1), task("b", "a")},
			rec: func() *recorder {
				return &recorder{decisions: make(chan Decision), asked: make(chan string, 1)}
			},
			wait: func(r *recorder) { <-r.asked },
			cancel: func(_ context.CancelFunc, run *Run) error {
				return run.CancelTask(context.Background(), "a")
			},
			status:   map[string]string{"a": "cancelled", "b": "skipped"},
			wantLine: "cancelled a user_cancel_task",
		},
		{
			name:  "run cancelled during a pending decision",
			tasks: []wsproto.Task{failing("a", failure.Permanent, 1), task("b", "a")},
			rec: func() *recorder {
				return &recorder{decisions: make(chan Decision), asked: make(chan string, 1)}
			},
			wait: func(r *recorder) { <-r.asked },
			cancel: func(cancel context.CancelFunc, _ *Run) error {
				cancel()
				return nil
			},
			status: map[string]string{"a": "failed", "b": "pending"},
		},
		{
			name:  "user.cancel_task of a running task and of a pending one",
			tasks: []wsproto.Task{task("a"), task("b", "a"), task("c")},
			hold:  map[string]bool{"a": true, "c": true},
			rec:   func() *recorder { return &recorder{started: make(chan string, 2)} },
			wait:  func(r *recorder) { <-r.started; <-r.started },
			cancel: func(_ context.CancelFunc, run *Run) error {
				if err := run.CancelTask(context.Background(), "b"); err != nil {
					return err
				}
				if err := run.CancelTask(context.Background(), "b"); !errors.Is(err, ErrUnknownTask) {
					return fmt.Errorf("second cancel of b: %v, want ErrUnknownTask", err)
				}
				if err := run.CancelTask(context.Background(), "nope"); !errors.Is(err, ErrUnknownTask) {
					return fmt.Errorf("cancel of unknown task: %v", err)
				}
				if err := run.CancelTask(context.Background(), "a"); err != nil {
					return err
				}
				return run.CancelTask(context.Background(), "c")
			},
			status:   map[string]string{"a": "cancelled", "b": "cancelled", "c": "cancelled"},
			wantLine: "cancelled b user_cancel_task",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.rec()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			run := New(tt.tasks, fakeModel{hold: tt.hold}, rec, Options{Retry: slow})
			done := make(chan Report, 1)
			go func() { done <- run.Execute(ctx) }()
			tt.wait(rec)
			if err := tt.cancel(cancel, run); err != nil {
				t.Fatal(err)
			}
			rep := <-done
			for _, ts := range rep.Tasks {
				if want := tt.status[ts.Task.ID]; ts.Status != want {
					t.Errorf("task %s: status %s, want %s (events %q)", ts.Task.ID, ts.Status, want, rec.events())
				}
			}
			if tt.wantLine != "" && index(rec.events(), tt.wantLine) < 0 {
				t.Errorf("missing %q in %q", tt.wantLine, rec.events())
			}
			if err := run.CancelTask(context.Background(), "a"); !errors.Is(err, ErrUnknownTask) {
				t.Errorf("CancelTask after the run: %v, want ErrUnknownTask", err)
			}
		})
	}
}

func TestTaskTimeout(t *testing.T) {
	rec := &recorder{}
	tasks := []wsproto.Task{task("a")}
	rep := New(tasks, fakeModel{hold: map[string]bool{"a": true}}, rec,
		Options{TaskTimeout: time.Millisecond}).Execute(t.Context())
	if rep.Tasks[0].Status != wsproto.TaskFailed || index(rec.events(), "fail a 1 timeout") < 0 {
		t.Errorf("status %s, events %q; want a timeout failure", rep.Tasks[0].Status, rec.events())
	}
}

type nopEvents struct{}

func (nopEvents) Started(string, int)                              {}
func (nopEvents) Progress(string, int, float64, string)            {}
func (nopEvents) Completed(string, int, Result, time.Duration)     {}
func (nopEvents) Failed(string, int, failure.Class, error)         {}
func (nopEvents) Retrying(string, int, int, string, time.Duration) {}
func (nopEvents) Recovered(string, int)                            {}
func (nopEvents) GaveUp(string, int, error)                        {}
func (nopEvents) Decide(context.Context, string, error) Decision   { return Skip }
func (nopEvents) Cancelled(string, string)                         {}
func (nopEvents) Skipped(string, string, string)                   {}
func (nopEvents) Adapt(context.Context, AdaptInput) Adaptation     { return Adaptation{} }
func (nopEvents) PlanUpdated(*wsproto.PlanUpdated)                 {}
func (nopEvents) Restarted(string)                                 {}
func (nopEvents) ToolCall(*wsproto.ToolCall)                       {}
func (nopEvents) ToolResult(*wsproto.ToolResult)                   {}
func (nopEvents) TodoUpdated(*wsproto.TodoUpdated)                 {}
func (nopEvents) TodoItemProgress(*wsproto.TodoItemProgress)       {}
func (nopEvents) TodoCompleted(*wsproto.TodoCompleted)             {}
func (nopEvents) ConfirmTool(context.Context, string, string, json.RawMessage) bool {
	return false
}
func (nopEvents) AskUser(context.Context, string, string, string) (string, bool) { return "", false }

type instant struct{}

func (instant) Turn(context.Context, *Turn, func(float64, string)) (Reply, error) {
	return Reply{Text: "ok"}, nil
}

// BenchmarkScheduler50 measures the scheduler's overhead per task: a
// 50-task DAG (ten layers of five, each task depending on the whole layer
// before) of tasks that take no time. Reported per task.
func BenchmarkScheduler50(b *testing.B) {
	var tasks []wsproto.Task
	for layer := range 10 {
		for k := range 5 {
			t := wsproto.Task{ID: fmt.Sprintf("t%d_%d", layer, k), Title: "x", DependsOn: []string{}}
			if layer > 0 {
				for p := range 5 {
					t.DependsOn = append(t.DependsOn, fmt.Sprintf("t%d_%d", layer-1, p))
				}
			}
			tasks = append(tasks, t)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		New(tasks, instant{}, nopEvents{}, Options{}).Execute(context.Background())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/50, "ns/task")
}
