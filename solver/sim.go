package solver

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/internal/sim"
	"github.com/baton-run/baton/wsproto"
)

// Sim is the simulated model: no network, no key. It runs the agent loop
// deterministically (§12): in round 1 it writes a todo list of 2–3 items,
// then calls the tools its task's description names ([sim:tool=NAME {json}],
// one a round, in order), list_files once when a workspace is offered, and
// ask_user for a [sim:ask=QUESTION]; then it marks the remaining items
// completed with todo_update and answers, quoting each tool's result.
//
// Fault directives as in §9: [sim:sleep=<duration>] sets how long an
// execution takes, [sim:fail=<error_type>*<n>] makes the first n executions
// fail with that type after one step ([sim:retry_after=<duration>] adds a
// Retry-After to the failure); [sim:result_bytes=<n>] makes the answer
// exactly n bytes long, or, past the run's limit (Turn.MaxReplyBytes), a
// byte longer than the limit with n as its length (Reply.TextBytes), so
// the result is cut and marked as a real one would be, without n bytes
// ever being built.
type Sim struct {
	// Delay paces each round when no directive says otherwise. Defaults
	// to 0.
	Delay time.Duration
}

var (
	_ Model       = (*Sim)(nil)
	_ TaskChecker = (*Sim)(nil)
)

// CheckTask implements TaskChecker: every [sim:…] in the description must
// be a task directive with a well-formed value.
func (m *Sim) CheckTask(t wsproto.Task) []string {
	return sim.Check(t.Description, sim.TaskDirectives)
}

// simQuote is how much of each tool result the simulated answer quotes.
const simQuote = 200

// Turn implements Model.
func (m *Sim) Turn(ctx context.Context, t *Turn, progress func(float64, string)) (Reply, error) {
	desc := t.Task.Description
	work := simWork(t)
	rounds := len(work) + 3 // todo_write, the work, todo_update, the answer
	step := m.Delay
	if d, ok := sim.Sleep(desc); ok {
		step = d / time.Duration(rounds)
	}
	if err := failure.Wait(ctx, step); err != nil {
		return Reply{}, err
	}
	if typ, n, ok := sim.Fail(desc); ok && t.Round == 1 && t.Attempt <= n {
		return Reply{}, &failure.Error{Type: typ, RetryAfter: sim.RetryAfter(desc),
			Message: fmt.Sprintf("simulated failure of execution %d (the first %d fail)", t.Attempt, n)}
	}
	done := 0 // rounds of tool calls so far
	for _, msg := range t.Messages {
		if msg.Role == RoleAssistant && len(msg.ToolCalls) > 0 {
			done++
		}
	}
	var calls []ToolCall
	if len(t.Tools) > 0 {
		switch {
		case done == 0:
			calls = []ToolCall{simCall(t.Round, 0, todoWrite, map[string]any{"items": simTodo(t.Task)})}
		case done <= len(work):
			calls = []ToolCall{simCall(t.Round, 0, work[done-1].Name, work[done-1].Args)}
			if t.Round+1 >= t.MaxRounds {
				calls = append(calls, simTodoDone(t, 1)...) // no round left for it later
			}
		default:
			calls = simTodoDone(t, 0)
		}
	}
	if len(calls) > 0 {
		msg := "Calling " + calls[0].Name
		if t.Chat {
			msg = "" // a chat run's progress is the reply's text: none before a tool call
		}
		progress(min(float64(done+1)/float64(rounds), 0.95), msg)
		return Reply{ToolCalls: calls}, nil
	}
	answer := simAnswer(t)
	if !t.Chat {
		progress(1, "Answering")
	}
	if n, ok := sim.ResultBytes(desc); ok {
		// Like a model whose reply streams past the limit: no more than
		// a byte past what the run keeps is built, and the whole length
		// is reported.
		if limit := t.MaxReplyBytes; limit > 0 && n > limit {
			return Reply{Text: padTo(answer, limit+1), TextBytes: n}, nil
		}
		answer = padTo(answer, n)
	}
	if t.Chat {
		if err := simStream(ctx, answer, step, float64(rounds-1)/float64(rounds), progress); err != nil {
			return Reply{}, err
		}
	}
	return Reply{Text: answer}, nil
}

// simStreamPieces is how many pieces a chat run's answer is written in.
const simStreamPieces = 4

// simStream reports a chat run's answer as a model streams it: in pieces
// that together are the answer, a quarter of step apart (the round has
// waited its step already), progress going from base to 1.
func simStream(ctx context.Context, answer string, step time.Duration, base float64, progress func(float64, string)) error {
	pieces := splitPieces(answer, simStreamPieces)
	for i, p := range pieces {
		if i > 0 {
			if err := failure.Wait(ctx, step/simStreamPieces); err != nil {
				return err
			}
		}
		progress(base+(1-base)*float64(i+1)/float64(len(pieces)), p)
	}
	return nil
}

// splitPieces cuts s into at most n pieces at spaces (each space kept at
// the start of the piece that follows it), which concatenated are s.
func splitPieces(s string, n int) []string {
	var pieces []string
	for k := n; k > 1 && len(s) > 0; k-- {
		cut := strings.IndexByte(s[min(len(s)/k, len(s)-1)+1:], ' ')
		if cut < 0 {
			break
		}
		cut += min(len(s)/k, len(s)-1) + 1
		pieces, s = append(pieces, s[:cut]), s[cut:]
	}
	return append(pieces, s)
}

// padTo is s cut or padded with filler text to exactly n bytes, for
// [sim:result_bytes=n].
func padTo(s string, n int) string {
	const filler = " Lorem ipsum dolor sit amet, consectetur adipiscing elit."
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") // a rune cut in two goes
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(s)
	for b.Len() < n {
		b.WriteString(filler[:min(len(filler), n-b.Len())])
	}
	return b.String()
}

// simTodoDone marks every item not completed yet completed, its calls
// numbered from k.
func simTodoDone(t *Turn, k int) []ToolCall {
	var calls []ToolCall
	for _, it := range t.Todo {
		if it.Status != wsproto.TodoStatusCompleted {
			calls = append(calls, simCall(t.Round, k+len(calls), todoUpdate,
				map[string]any{"id": it.ID, "status": wsproto.TodoStatusCompleted}))
		}
	}
	return calls
}

// simWork is the tool calls the task's description asks for, then
// list_files when a workspace is offered, then ask_user for a question.
func simWork(t *Turn) []sim.ToolCall {
	work, _ := sim.Tools(t.Task.Description)
	for _, s := range t.Tools {
		if s.Name == "list_files" {
			work = append(work, sim.ToolCall{Name: "list_files", Args: json.RawMessage(`{}`)})
		}
	}
	if q, ok := sim.Ask(t.Task.Description); ok {
		args, _ := json.Marshal(map[string]string{"question": q})
		work = append(work, sim.ToolCall{Name: "ask_user", Args: args})
	}
	return work
}

func simCall(round, k int, name string, args any) ToolCall {
	raw, ok := args.(json.RawMessage)
	if !ok {
		raw, _ = json.Marshal(args)
	}
	return ToolCall{ID: fmt.Sprintf("call_%d_%d", round, k), Name: name, Arguments: string(raw)}
}

// simTodo is the task's todo list: 2 or 3 items, chosen by the task's id.
func simTodo(task wsproto.Task) []map[string]string {
	h := fnv.New32a()
	h.Write([]byte(task.ID))
	topic := sim.Topic(task.Title, 60)
	items := []map[string]string{
		{"id": "1", "content": "Gather material for " + topic},
		{"id": "2", "content": "Work through " + topic},
		{"id": "3", "content": "Check the result"},
	}
	return items[:2+h.Sum32()%2]
}

// priorRuns counts the earlier runs in a turn's conversation: the user
// turns before the task's (the last user message that is not a tool's).
func priorRuns(msgs []Message) int {
	users := 0
	for _, m := range msgs {
		if m.Role == RoleUser {
			users++
		}
	}
	return max(users-1, 0)
}

// simAnswer is the task's result: its topic, the earlier runs it was shown
// (counted from the conversation it got, so tests see them reach the
// loop), what it built on, and a quote of every tool result other than the
// todo tools'.
func simAnswer(t *Turn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: done", sim.Topic(t.Task.Title, 80))
	if n := priorRuns(t.Messages); n > 0 {
		fmt.Fprintf(&b, " (with %d earlier runs in view)", n)
	}
	if len(t.Dependencies) > 0 {
		deps := make([]string, 0, len(t.Dependencies))
		for id := range t.Dependencies {
			deps = append(deps, id)
		}
		sort.Strings(deps)
		fmt.Fprintf(&b, ", building on %s", strings.Join(deps, ", "))
	}
	b.WriteString(".")
	names := map[string]string{} // call id → tool
	for _, msg := range t.Messages {
		for _, c := range msg.ToolCalls {
			names[c.ID] = c.Name
		}
		if name := names[msg.ToolCallID]; msg.Role == RoleTool && name != "" && !isTodoTool(name) {
			fmt.Fprintf(&b, " %s: %q.", name, Truncate(msg.Content, simQuote))
		}
	}
	return b.String()
}
