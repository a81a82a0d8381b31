package solver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// scripted is a Model that answers each turn with a function of the turn,
// and keeps every turn it was given.
type scripted struct {
	next  func(ctx context.Context, t *Turn) (Reply, error)
	mu    sync.Mutex // guards turns
	turns []*Turn
}

func (m *scripted) Turn(ctx context.Context, t *Turn, _ func(float64, string)) (Reply, error) {
	m.mu.Lock()
	m.turns = append(m.turns, t)
	m.mu.Unlock()
	return m.next(ctx, t)
}

// calls is a reply that calls tools; each call is "name {json}".
func calls(round int, specs ...string) Reply {
	var r Reply
	for k, s := range specs {
		name, args, _ := strings.Cut(s, " ")
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: fmt.Sprintf("c%d_%d", round, k), Name: name, Arguments: args})
	}
	return r
}

// byRound answers round r with replies[r-1], and with "answer" past them.
func byRound(replies ...Reply) func(context.Context, *Turn) (Reply, error) {
	return func(_ context.Context, t *Turn) (Reply, error) {
		if t.Round <= len(replies) {
			return replies[t.Round-1], nil
		}
		return Reply{Text: "answer"}, nil
	}
}

// fakeTool is a tool.Tool made of a function.
type fakeTool struct {
	name    string
	confirm bool
	call    func(ctx context.Context, args json.RawMessage) (string, error)
}

func (f fakeTool) Spec() tool.Spec {
	return tool.Spec{Name: f.name, Description: "test tool " + f.name, Confirm: f.confirm}
}
func (f fakeTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	return f.call(ctx, args)
}

func echo(name string) fakeTool {
	return fakeTool{name: name, call: func(_ context.Context, args json.RawMessage) (string, error) {
		return name + " got " + string(args), nil
	}}
}

func failingTool(name string) fakeTool {
	return fakeTool{name: name, call: func(context.Context, json.RawMessage) (string, error) {
		return "", errors.New(name + " broke")
	}}
}

func toolSet(t *testing.T, tools ...tool.Tool) *tool.Set {
	t.Helper()
	var s tool.Set
	if err := s.Add(tools...); err != nil {
		t.Fatal(err)
	}
	return &s
}

// loopLines are the recorder's lines about the loop, without the
// scheduler's.
func loopLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "tool_") || strings.HasPrefix(l, "todo.") || strings.HasPrefix(l, "ask ") || strings.HasPrefix(l, "confirm ") {
			out = append(out, l)
		}
	}
	return out
}

func TestAgentLoop(t *testing.T) {
	fast := failure.Policy{MaxRetries: 1, Base: time.Microsecond, Max: time.Microsecond}
	tests := []struct {
		name   string
		model  func(ctx context.Context, t *Turn) (Reply, error)
		tools  []tool.Tool
		loop   Loop
		rec    *recorder // nil: one that approves nothing and answers nothing
		status string    // the task's final status; completed when empty
		want   []string
		check  func(t *testing.T, rep Report, turns []*Turn)
	}{
		{
			name:  "tool calls run in the order given, each answered once",
			model: byRound(calls(1, `a {"x":1}`, `b {}`), calls(2, `a {"x":2}`)),
			tools: []tool.Tool{echo("a"), echo("b")},
			want: []string{
				`tool_call t 1 1 a {"x":1}`, `tool_result t 1 1 a true "a got {\"x\":1}"`,
				`tool_call t 1 1 b {}`, `tool_result t 1 1 b true "b got {}"`,
				`tool_call t 1 2 a {"x":2}`, `tool_result t 1 2 a true "a got {\"x\":2}"`,
			},
			check: func(t *testing.T, rep Report, turns []*Turn) {
				if rep.Results["t"] != "answer" || len(turns) != 3 {
					t.Errorf("result %q after %d turns", rep.Results["t"], len(turns))
				}
				m := turns[2].Messages
				if len(m) != 7 || m[3].Role != RoleTool || m[3].ToolCallID != "c1_0" || m[3].Content != `a got {"x":1}` ||
					m[6].ToolCallID != "c2_0" || m[2].Role != RoleAssistant || len(m[2].ToolCalls) != 2 {
					t.Errorf("conversation of round 3: %+v", m)
				}
			},
		},
		{
			name:  "a failing, unknown, badly called or panicking tool is a result, not a task failure",
			model: byRound(calls(1, `broken {}`, `nosuch {}`, `a [1,2]`, `a not json`, `boom {}`)),
			tools: []tool.Tool{echo("a"), failingTool("broken"), fakeTool{name: "boom", call: func(context.Context, json.RawMessage) (string, error) {
				panic("kaboom")
			}}},
			want: []string{
				`tool_call t 1 1 broken {}`, `tool_result t 1 1 broken false "broken broke"`,
				`tool_call t 1 1 nosuch {}`, `tool_result t 1 1 nosuch false "there is no tool \"nosuch\"; the tools are: todo_write, todo_update, ask_user, a, broken, boom"`,
				`tool_call t 1 1 a {}`, `tool_result t 1 1 a false "the arguments are not a JSON object: [1,2]"`,
				`tool_call t 1 1 a {}`, `tool_result t 1 1 a false "the arguments are not a JSON object: not json"`,
				`tool_call t 1 1 boom {}`, `tool_result t 1 1 boom false "the tool failed: kaboom"`,
			},
		},
		{
			name:  "a slow tool times out as a result",
			model: byRound(calls(1, `slow {}`)),
			tools: []tool.Tool{fakeTool{name: "slow", call: func(ctx context.Context, _ json.RawMessage) (string, error) {
				<-ctx.Done()
				return "", ctx.Err()
			}}},
			loop: Loop{ToolTimeout: 20 * time.Millisecond},
			want: []string{`tool_call t 1 1 slow {}`, `tool_result t 1 1 slow false "the tool did not answer within 20ms"`},
		},
		{
			name:  "a long result is cut at the limit, and the model sees the cut",
			model: byRound(calls(1, `long {}`)),
			tools: []tool.Tool{fakeTool{name: "long", call: func(context.Context, json.RawMessage) (string, error) {
				return strings.Repeat("x", 100), nil
			}}},
			loop: Loop{ToolResultLimit: 40},
			want: []string{`tool_call t 1 1 long {}`, `tool_result t 1 1 long true "` + strings.Repeat("x", 34) + ` […]"`},
			check: func(t *testing.T, _ Report, turns []*Turn) {
				if got := turns[1].Messages[3].Content; got != strings.Repeat("x", 34)+" […]" {
					t.Errorf("the model saw %q", got)
				}
			},
		},
		{
			name: "the last round offers no tools and its text is the answer",
			model: func(_ context.Context, t *Turn) (Reply, error) {
				r := calls(t.Round, `a {}`)
				r.Text = fmt.Sprintf("text of round %d", t.Round)
				return r, nil
			},
			tools: []tool.Tool{echo("a")},
			loop:  Loop{MaxRounds: 3},
			check: func(t *testing.T, rep Report, turns []*Turn) {
				if len(turns) != 3 || len(turns[0].Tools) != 4 || len(turns[1].Tools) != 4 || len(turns[2].Tools) != 0 {
					t.Fatalf("%d turns; tools offered %d, %d, …", len(turns), len(turns[0].Tools), len(turns[1].Tools))
				}
				if rep.Results["t"] != "text of round 3" {
					t.Errorf("result %q", rep.Results["t"])
				}
				if !strings.Contains(turns[2].Messages[0].Content, "No tools this round: answer now.") {
					t.Errorf("last system prompt: %q", turns[2].Messages[0].Content)
				}
			},
		},
		{
			name:   "no answer in the last round is a validation failure, retried",
			model:  func(_ context.Context, t *Turn) (Reply, error) { return calls(t.Round, `a {}`), nil },
			tools:  []tool.Tool{echo("a")},
			loop:   Loop{MaxRounds: 2},
			status: wsproto.TaskFailed,
			check: func(t *testing.T, rep Report, turns []*Turn) {
				if !strings.Contains(rep.Errors["t"], "no answer in round 2") || len(turns) != 4 {
					t.Errorf("error %q after %d turns (2 attempts of 2 rounds)", rep.Errors["t"], len(turns))
				}
			},
		},
		{
			name:  "the oldest tool results are elided past the budget, never the system prompt or the task",
			model: byRound(calls(1, `big {"n":1}`), calls(2, `big {"n":2}`), calls(3, `big {"n":3}`)),
			tools: []tool.Tool{fakeTool{name: "big", call: func(_ context.Context, args json.RawMessage) (string, error) {
				return string(args) + strings.Repeat("y", 3000), nil
			}}},
			loop: Loop{MaxContextBytes: 9000},
			check: func(t *testing.T, _ Report, turns []*Turn) {
				m := turns[3].Messages
				if !strings.HasPrefix(m[3].Content, "[elided: 3") || !strings.HasPrefix(m[5].Content, `{"n":2}`) ||
					!strings.HasPrefix(m[7].Content, `{"n":3}`) {
					t.Errorf("round 4 tool results: %.30q / %.30q / %.30q", m[3].Content, m[5].Content, m[7].Content)
				}
				if !strings.Contains(m[1].Content, "Your task: t") || !strings.Contains(m[0].Content, "Round 4 of at most 8") {
					t.Errorf("system or task touched: %.80q / %.80q", m[0].Content, m[1].Content)
				}
				if strings.HasPrefix(turns[2].Messages[3].Content, "[elided") {
					t.Errorf("round 3 was within the budget but lost a result")
				}
			},
		},
		{
			name: "the todo list: written, tracked by tool calls, completed, then one round without tools",
			model: byRound(
				calls(1, `todo_write {"items":[{"content":"find"},{"content":"check"}]}`),
				calls(2, `a {}`, `a {}`, `a {}`),
				calls(3, `broken {}`, `broken {}`),
				calls(4, `todo_update {"id":"2","status":"completed","note":"done by hand"}`),
				Reply{Text: "answer", ToolCalls: calls(5, `a {}`).ToolCalls}, // round 5 offers no tools: the calls are not run
			),
			tools: []tool.Tool{echo("a"), failingTool("broken")},
			want: []string{
				`tool_call t 1 1 todo_write {"items":[{"content":"find"},{"content":"check"}]}`,
				`tool_result t 1 1 todo_write true "Todo list written: 2 items."`,
				`todo.updated t v1 2 items`,
				`tool_call t 1 2 a {}`, `tool_result t 1 2 a true "a got {}"`, `todo.item_progress t v2 1 in_progress 1`,
				`tool_call t 1 2 a {}`, `tool_result t 1 2 a true "a got {}"`, `todo.item_progress t v3 1 in_progress 2`,
				`tool_call t 1 2 a {}`, `tool_result t 1 2 a true "a got {}"`, `todo.item_progress t v4 1 completed 3`,
				`tool_call t 1 3 broken {}`, `tool_result t 1 3 broken false "broken broke"`, `todo.item_progress t v5 2 in_progress 1`,
				`tool_call t 1 3 broken {}`, `tool_result t 1 3 broken false "broken broke"`, `todo.item_progress t v6 2 blocked 2`,
				`tool_call t 1 4 todo_update {"id":"2","status":"completed","note":"done by hand"}`,
				`tool_result t 1 4 todo_update true "Item 2 is now completed."`,
				`todo.item_progress t v7 2 completed 2`, `todo.completed t v8`,
			},
			check: func(t *testing.T, rep Report, turns []*Turn) {
				if len(turns) != 5 || len(turns[4].Tools) != 0 || rep.Results["t"] != "answer" {
					t.Fatalf("%d turns, last offered %d tools, result %q", len(turns), len(turns[len(turns)-1].Tools), rep.Results["t"])
				}
				sys := turns[4].Messages[0].Content
				if !strings.Contains(sys, "- [completed] 2: check (done by hand)") || strings.Count(sys, "Your todo list") != 1 {
					t.Errorf("system prompt of round 5: %q", sys)
				}
				if !strings.Contains(turns[0].Messages[0].Content, "no todo list yet") {
					t.Errorf("round 1 system prompt: %q", turns[0].Messages[0].Content)
				}
			},
		},
		{
			name: "todo versions go on across attempts",
			model: func(_ context.Context, t *Turn) (Reply, error) {
				if t.Round == 1 {
					return calls(1, `todo_write {"items":[{"id":"x","content":"only"}]}`), nil
				}
				if t.Attempt == 1 {
					return Reply{}, &failure.Error{Type: failure.Network, Err: errors.New("down")}
				}
				return Reply{Text: "answer"}, nil
			},
			loop: Loop{},
			want: []string{
				`tool_call t 1 1 todo_write {"items":[{"id":"x","content":"only"}]}`, `tool_result t 1 1 todo_write true "Todo list written: 1 items."`,
				`todo.updated t v1 1 items`,
				`tool_call t 2 1 todo_write {"items":[{"id":"x","content":"only"}]}`, `tool_result t 2 1 todo_write true "Todo list written: 1 items."`,
				`todo.updated t v2 1 items`,
			},
		},
		{
			name:  "bad todo calls are results that change nothing",
			model: byRound(calls(1, `todo_write {"items":[]}`, `todo_write {"items":[{"content":" "}]}`, `todo_update {"id":"9","status":"completed"}`, `todo_write {"items":[{"content":"a","status":"done"}]}`)),
			want: []string{
				`tool_call t 1 1 todo_write {"items":[]}`, `tool_result t 1 1 todo_write false "\"items\" must hold 1 to 50 items"`,
				`tool_call t 1 1 todo_write {"items":[{"content":" "}]}`, `tool_result t 1 1 todo_write false "item 1 has no content"`,
				`tool_call t 1 1 todo_update {"id":"9","status":"completed"}`, `tool_result t 1 1 todo_update false "no todo item has id \"9\""`,
				`tool_call t 1 1 todo_write {"items":[{"content":"a","status":"done"}]}`,
				`tool_result t 1 1 todo_write false "item 1: status \"done\" is not pending, in_progress, completed or blocked"`,
			},
		},
		{
			name:  "a tool that changes the world runs only when approved",
			model: byRound(calls(1, `rm {"path":"x"}`), calls(2, `rm {"path":"y"}`)),
			tools: []tool.Tool{fakeTool{name: "rm", confirm: true, call: func(context.Context, json.RawMessage) (string, error) { return "removed", nil }}},
			rec:   &recorder{approve: false},
			want: []string{
				`tool_call t 1 1 rm {"path":"x"}`, `confirm t rm`, `tool_result t 1 1 rm false "declined by the user"`,
				`tool_call t 1 2 rm {"path":"y"}`, `confirm t rm`, `tool_result t 1 2 rm false "declined by the user"`,
			},
		},
		{
			name:  "approved, it runs",
			model: byRound(calls(1, `rm {"path":"x"}`)),
			tools: []tool.Tool{fakeTool{name: "rm", confirm: true, call: func(context.Context, json.RawMessage) (string, error) { return "removed", nil }}},
			rec:   &recorder{approve: true},
			want:  []string{`tool_call t 1 1 rm {"path":"x"}`, `confirm t rm`, `tool_result t 1 1 rm true "removed"`},
		},
		{
			name:  "ask_user: the answer is the result and joins every later prompt",
			model: byRound(calls(1, `ask_user {"question":"Which city?"}`), calls(2, `ask_user {"question":"When?"}`)),
			rec: &recorder{answer: func(_ context.Context, _, q string) (string, bool) {
				if q == "When?" {
					return "", false // expired
				}
				return "Lisbon", true
			}},
			want: []string{
				`tool_call t 1 1 ask_user {"question":"Which city?"}`, `ask t Which city?`, `tool_result t 1 1 ask_user true "The user answered: Lisbon"`,
				`tool_call t 1 2 ask_user {"question":"When?"}`, `ask t When?`,
				`tool_result t 1 2 ask_user true "The user did not answer in time; go on with your best judgement and say what you assumed."`,
			},
			check: func(t *testing.T, _ Report, turns []*Turn) {
				if len(turns[0].Answers) != 0 || len(turns[2].Answers) != 1 || turns[2].Answers[0] != (Answer{"Which city?", "Lisbon"}) {
					t.Errorf("answers: %v then %v", turns[0].Answers, turns[2].Answers)
				}
				if sys := turns[2].Messages[0].Content; strings.Count(sys, "Q: Which city?\n  A: Lisbon") != 1 {
					t.Errorf("system prompt of round 3: %q", sys)
				}
			},
		},
		{
			name:  "a tool can wait for the user, and the wait does not count against its timeout",
			model: byRound(calls(1, `deploy {}`)),
			tools: []tool.Tool{fakeTool{name: "deploy", call: func(ctx context.Context, _ json.RawMessage) (string, error) {
				answer, ok, err := tool.Ask(ctx, "Which environment?", "")
				if err != nil || !ok {
					return "", fmt.Errorf("no answer: %v", err)
				}
				return "deployed to " + answer, nil
			}}},
			loop: Loop{ToolTimeout: 20 * time.Millisecond},
			rec: &recorder{answer: func(ctx context.Context, _, _ string) (string, bool) {
				select { // the user takes longer than the tool may
				case <-time.After(100 * time.Millisecond):
					return "staging", true
				case <-ctx.Done():
					return "", false
				}
			}},
			want: []string{`tool_call t 1 1 deploy {}`, `ask t Which environment?`, `tool_result t 1 1 deploy true "deployed to staging"`},
			check: func(t *testing.T, _ Report, turns []*Turn) {
				if len(turns[1].Answers) != 1 || turns[1].Answers[0].Text != "staging" {
					t.Errorf("answers of round 2: %v", turns[1].Answers)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := &scripted{next: tt.model}
			loop := tt.loop
			loop.Tools = toolSet(t, tt.tools...)
			rec := tt.rec
			if rec == nil {
				rec = &recorder{}
			}
			tasks := []wsproto.Task{task("t")}
			rep := New(tasks, model, rec, Options{Retry: fast, Loop: loop}).Execute(t.Context())
			want := tt.status
			if want == "" {
				want = wsproto.TaskCompleted
			}
			if got := rep.Tasks[0].Status; got != want {
				t.Errorf("status %s (%s), want %s", got, rep.Errors["t"], want)
			}
			if tt.want != nil {
				if got := loopLines(rec.events()); !slices.Equal(got, tt.want) {
					t.Errorf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
				}
			}
			if tt.check != nil {
				tt.check(t, rep, model.turns)
			}
		})
	}
}

// stepIDs checks that every tool_call and tool_result pair up.
func TestToolEventsPairByStepID(t *testing.T) {
	var mu sync.Mutex
	open := map[string]string{}
	var problems []string
	ev := &pairing{onCall: func(m *wsproto.ToolCall) {
		mu.Lock()
		defer mu.Unlock()
		if !regexp.MustCompile(`^tool_[0-9a-f-]{36}$`).MatchString(m.StepID) || open[m.StepID] != "" {
			problems = append(problems, "bad or reused step id "+m.StepID)
		}
		open[m.StepID] = m.Tool
	}, onResult: func(m *wsproto.ToolResult) {
		mu.Lock()
		defer mu.Unlock()
		if open[m.StepID] != m.Tool {
			problems = append(problems, "result without its call: "+m.StepID)
		}
		delete(open, m.StepID)
	}}
	model := &scripted{next: byRound(calls(1, `a {}`, `b {}`), calls(2, `nosuch {}`))}
	tasks := []wsproto.Task{task("x"), task("y")}
	New(tasks, model, ev, Options{Loop: Loop{Tools: toolSet(t, echo("a"), echo("b"))}}).Execute(t.Context())
	if len(problems) > 0 || len(open) > 0 {
		t.Errorf("problems %v, unanswered %v", problems, open)
	}
}

type pairing struct {
	nopEvents
	onCall   func(*wsproto.ToolCall)
	onResult func(*wsproto.ToolResult)
}

func (p *pairing) ToolCall(m *wsproto.ToolCall)     { p.onCall(m) }
func (p *pairing) ToolResult(m *wsproto.ToolResult) { p.onResult(m) }

// A task cancelled while its tool runs gets the tool's result "cancelled"
// at once, then solver.cancelled.
func TestCancelAbortsATool(t *testing.T) {
	entered := make(chan struct{})
	slow := fakeTool{name: "slow", call: func(ctx context.Context, _ json.RawMessage) (string, error) {
		close(entered)
		<-ctx.Done()
		return "", ctx.Err()
	}}
	rec := &recorder{}
	r := New([]wsproto.Task{task("t")}, &scripted{next: byRound(calls(1, `slow {}`))}, rec,
		Options{Loop: Loop{Tools: toolSet(t, slow), ToolTimeout: time.Hour}})
	done := make(chan Report, 1)
	go func() { done <- r.Execute(t.Context()) }()
	<-entered
	if err := r.CancelTask(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	rep := <-done
	lines := rec.events()
	call, result, cancelled := index(lines, `tool_call t 1 1 slow {}`), index(lines, `tool_result t 1 1 slow false "cancelled"`), index(lines, "cancelled t user_cancel_task")
	if rep.Tasks[0].Status != wsproto.TaskCancelled || call < 0 || result < call || cancelled < result {
		t.Errorf("status %s, events %q", rep.Tasks[0].Status, lines)
	}
}

// While a task waits for the user its parallel slot is free: with one
// slot, a second task runs to the end while the first waits for an
// answer, and the first finishes after the answer.
func TestWaitingOnTheUserFreesTheSlot(t *testing.T) {
	answer := make(chan string)
	rec := &recorder{answer: func(ctx context.Context, _, _ string) (string, bool) {
		select {
		case a := <-answer:
			return a, true
		case <-ctx.Done():
			return "", false
		}
	}}
	model := &scripted{next: func(_ context.Context, t *Turn) (Reply, error) {
		if t.Task.ID == "asks" && t.Round == 1 {
			return calls(1, `ask_user {"question":"ok?"}`), nil
		}
		return Reply{Text: "done " + t.Task.ID}, nil
	}}
	r := New([]wsproto.Task{task("asks"), task("other")}, model, rec, Options{MaxParallel: 1})
	done := make(chan Report, 1)
	go func() { done <- r.Execute(t.Context()) }()
	deadline := time.After(10 * time.Second)
	for index(rec.events(), "done other 1") < 0 { // "other" can only run in the slot "asks" gave back
		select {
		case rep := <-done:
			t.Fatalf("run ended early: %+v", rep)
		case <-deadline:
			t.Fatalf("the other task never ran while the first waited; events %q", rec.events())
		case <-time.After(time.Millisecond):
		}
	}
	answer <- "yes"
	rep := <-done
	if rep.Count(wsproto.TaskCompleted) != 2 || index(rec.events(), "done asks 1") < index(rec.events(), "done other 1") {
		t.Errorf("report %+v, events %q", rep, rec.events())
	}
	if rec.peak > 2 {
		t.Errorf("peak %d", rec.peak)
	}
}

// BenchmarkAgentRound measures the loop's own cost per round: the prompt,
// the budget, a tool call with its events and the todo tracking, with a
// model and a tool that take no time. Reported per round.
func BenchmarkAgentRound(b *testing.B) {
	const rounds = 8
	replies := make([]Reply, rounds-1)
	replies[0] = calls(1, `todo_write {"items":[{"content":"one"},{"content":"two"},{"content":"three"}]}`)
	for r := 2; r < rounds; r++ {
		replies[r-1] = calls(r, `echo {"q":"x"}`)
	}
	next := byRound(replies...)
	model := modelFunc(func(ctx context.Context, t *Turn) (Reply, error) { return next(ctx, t) })
	var set tool.Set
	set.Add(echo("echo"))
	tasks := []wsproto.Task{{ID: "t", Title: "Benchmark", Description: "a task", DependsOn: []string{}}}
	b.ReportAllocs()
	for b.Loop() {
		New(tasks, model, nopEvents{}, Options{Loop: Loop{Tools: &set, MaxRounds: rounds}}).Execute(context.Background())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rounds, "ns/round")
}

// modelFunc is a Model that keeps nothing.
type modelFunc func(ctx context.Context, t *Turn) (Reply, error)

func (f modelFunc) Turn(ctx context.Context, t *Turn, _ func(float64, string)) (Reply, error) {
	return f(ctx, t)
}
