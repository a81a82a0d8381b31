package solver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

var (
	errBadArguments  = errors.New("the arguments are not a JSON object")
	errLongArguments = errors.New("the arguments are too long")
)

// askUser is the built-in tool through which a task asks the user.
var (
	askUser     = tool.AskUser()
	askUserName = askUser.Spec().Name
)

// builtinSpecs are the tools every task is offered besides Loop.Tools.
var builtinSpecs = append(append([]tool.Spec(nil), todoSpecs...), askUser.Spec())

// decodeArgs reads a built-in tool's arguments into v.
func decodeArgs(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	return nil
}

// agent runs one execution of a task as an agent loop (§10): rounds of
// model turns and tool calls until the model answers. A model error ends
// the execution (the caller retries it); a tool's failure is its result.
// It runs on the task's goroutine.
//
// The rounds of x.journal, a resumed task's, are replayed first: their
// replies and the results their calls got go into the conversation
// without the model or the tool being asked again; a call that began and
// never returned is made again as a retry, and the calls after it as
// usual. Every reply the model gives is journaled (replied) before the
// loop acts on it.
func (s *scheduler) agent(ctx context.Context, x execution, in Input, progress func(float64, string)) (Result, error) {
	todo := x.todo
	specs := append(append([]tool.Spec(nil), builtinSpecs...), s.specs...)
	msgs := append(append([]Message{{Role: RoleSystem}}, priorMessages(in.History)...),
		Message{Role: RoleUser, Content: taskPrompt(in, s.opts.Loop.MaxContextBytes/4)})
	var usage wsproto.Usage
	finalRound := false // the todo list was completed: one last round without tools
	journal := x.journal
	for round := 1; ; round++ {
		last := finalRound || round >= s.opts.Loop.MaxRounds
		var reply Reply
		var replayed *Round
		var calls []ToolCall // the calls to make: as the model gave them, or as journaled
		if len(journal) > 0 && journal[0].Number == round {
			replayed, journal = &journal[0], journal[1:]
			reply, last, calls = replayed.Reply, replayed.Final, replayed.Reply.ToolCalls
		} else {
			journal = nil // a journal with a hole in it is not to be trusted past it
			turn := &Turn{Input: in, Round: round, MaxRounds: s.opts.Loop.MaxRounds, Todo: todo.snapshot(), Answers: s.Answers(),
				MaxReplyBytes: s.opts.MaxResultBytes}
			if view := s.view.Load(); view != nil {
				turn.Tasks = *view // statuses as they are now
			}
			if !last {
				turn.Tools = specs
			}
			msgs[0].Content = systemPrompt(turn) // replaces the last round's, never stacks
			turn.Messages = fit(msgs, s.opts.Loop.MaxContextBytes)
			s.settled(ctx) // the results it is asked with are journaled
			var err error
			reply, err = s.model.Turn(ctx, turn, progress)
			if err != nil {
				return Result{Usage: usage.Add(reply.Usage)}, err
			}
			last = last || len(reply.ToolCalls) == 0
			calls = reply.ToolCalls // arguments too long included: callTool refuses them
			reply = s.keptReply(reply, last)
			s.replied(in.Task.ID, Round{Number: round, Reply: reply, Final: last})
		}
		usage = usage.Add(reply.Usage)
		if last {
			if strings.TrimSpace(reply.Text) == "" {
				return Result{Usage: usage}, failure.New(failure.Validation, "the model gave no answer in round %d", round)
			}
			res := Result{Text: reply.Text, Usage: usage}
			if n := max(len(reply.Text), reply.TextBytes); n > s.opts.MaxResultBytes || reply.TextBytes > len(reply.Text) {
				res.Text, res.Truncated, res.OriginalBytes = Truncate(reply.Text, s.opts.MaxResultBytes), true, n
				if !strings.HasSuffix(res.Text, wsproto.CutMarker) { // the model cut it short of the limit
					res.Text += wsproto.CutMarker
				}
			}
			return res, nil
		}
		msgs = append(msgs, Message{Role: RoleAssistant, Content: reply.Text, ToolCalls: reply.ToolCalls})
		for k, call := range calls {
			var text string
			if replayed != nil && k < len(replayed.Results) && !replayed.Results[k].Retry {
				text = replayed.Results[k].Text
			} else {
				retry := replayed != nil && k < len(replayed.Results)
				text = s.callTool(ctx, x, in, round, call, retry)
			}
			msgs = append(msgs, Message{Role: RoleTool, ToolCallID: call.ID, Content: text})
			if ctx.Err() != nil {
				return Result{Usage: usage}, ctx.Err()
			}
		}
		finalRound = todo.allDone()
	}
}

// keptReply is what the loop keeps of a reply, and journals. An answer
// (last) keeps its text up to a byte past the limit, with the length it
// had, so that it is cut and marked as it would have been; a reply with
// tool calls keeps its text cut to the limit, as the conversation does,
// and its calls as kept.
func (s *scheduler) keptReply(r Reply, last bool) Reply {
	limit := s.opts.MaxResultBytes
	if last {
		r.ToolCalls = nil
		if len(r.Text) > limit+1 {
			r.TextBytes = max(r.TextBytes, len(r.Text))
			r.Text = Truncate(r.Text, limit+1)
		}
		return r
	}
	// What the conversation keeps of the reply is bounded like an
	// answer: the loop's context stays within MaxRounds of them.
	r.Text, r.TextBytes = Truncate(r.Text, limit), 0
	r.ToolCalls = s.kept(r.ToolCalls)
	return r
}

// kept is what the conversation keeps of a reply's tool calls: arguments
// too long to run (callTool refuses them) are kept as {}.
func (s *scheduler) kept(calls []ToolCall) []ToolCall {
	var out []ToolCall // a copy, made at the first call to change
	for i, c := range calls {
		if len(c.Arguments) > s.opts.MaxResultBytes {
			if out == nil {
				out = append([]ToolCall(nil), calls...)
			}
			out[i].Arguments = "{}"
		}
	}
	if out == nil {
		return calls
	}
	return out
}

// callTool runs one tool call with its events: agent.tool_call, then
// exactly one agent.tool_result, whatever happens (a bad name or bad
// arguments, a refusal, a timeout, a cancel, a panic). It returns the text
// the model sees.
//
// retry says the call was made before, by a process that died before its
// result came back: the tool is told (tool.WithRetry).
func (s *scheduler) callTool(ctx context.Context, x execution, in Input, round int, call ToolCall, retry bool) string {
	todo := x.todo
	stepID := "tool_" + uuid.NewString()
	args, aerr := call.argsObject()
	if len(call.Arguments) > s.opts.MaxResultBytes {
		args, aerr = nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", errLongArguments, len(call.Arguments), s.opts.MaxResultBytes)
	}
	shown := args
	if aerr != nil {
		shown = json.RawMessage("{}")
	}
	id := in.Task.ID
	s.events.ToolCall(&wsproto.ToolCall{TaskID: id, Attempt: in.Attempt, Round: round, StepID: stepID, Tool: call.Name, Arguments: shown})
	began := time.Now()
	var text string
	var err error
	var ev todoEvents
	t, known := s.opts.Loop.Tools.Get(call.Name)
	if call.Name == askUserName {
		t, known = askUser, true
	}
	switch {
	case aerr != nil:
		err = fmt.Errorf("%w: %s", aerr, Truncate(call.Arguments, 200))
	case call.Name == todoWrite:
		text, ev, err = todo.write(args)
	case call.Name == todoUpdate:
		text, ev, err = todo.update(args)
	case !known:
		err = fmt.Errorf("there is no tool %q; the tools are: %s", call.Name, s.toolNames())
	case t.Spec().Confirm && !s.confirm(ctx, x, call.Name, args):
		err = errors.New("declined by the user")
	default:
		s.settled(ctx) // the call's beginning is journaled: a takeover retries it, told so
		tctx := tool.WithLogAttrs(ctx, "task_id", id, "attempt", in.Attempt, "step_id", stepID)
		if retry {
			tctx = tool.WithRetry(tctx)
		}
		text, err = s.runTool(tctx, x, t, args)
	}
	if ctx.Err() != nil {
		text, err = "", errors.New("cancelled")
	}
	ok := err == nil
	if !ok {
		text = err.Error()
	}
	res := &wsproto.ToolResult{TaskID: id, Attempt: in.Attempt, Round: round, StepID: stepID, Tool: call.Name,
		OK: ok, Result: text, DurationMS: time.Since(began).Milliseconds()}
	if len(text) > s.opts.Loop.ToolResultLimit {
		res.Result, res.Truncated = Truncate(text, s.opts.Loop.ToolResultLimit), true
	}
	s.events.ToolResult(res)
	if !isTodoTool(call.Name) && ctx.Err() == nil {
		ev = todo.track(ok)
	}
	s.reportTodo(id, ev)
	return res.Result
}

var errToolTimeout = errors.New("tool timeout")

// runTool calls an offered tool within the tool timeout, turning a panic
// into the tool's error. Through tool.Ask the tool can wait for the user:
// with the task's parallel slot free meanwhile, and without the wait
// counting against the timeout. It returns when the timeout fires or ctx
// is done, even if the tool goes on: the call is then abandoned to
// Loop.Calls, and the task's slot is never held by it.
func (s *scheduler) runTool(ctx context.Context, x execution, t tool.Tool, args json.RawMessage) (text string, err error) {
	limit := s.opts.Loop.ToolTimeout
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(limit, func() { cancel(errToolTimeout) })
	defer timer.Stop()
	cctx = tool.WithAsk(cctx, func(actx context.Context, question, context string) (string, bool) {
		if actx.Err() != nil || !timer.Stop() {
			return "", false // out of time already, or abandoned
		}
		defer timer.Reset(limit)
		var answer string
		var ok bool
		s.waitingOnUser(actx, x.index, func() { answer, ok = s.events.AskUser(actx, x.id, question, context) })
		if !ok || actx.Err() != nil {
			return "", false
		}
		s.AddAnswer(Answer{Question: question, Text: answer})
		return answer, true
	})
	text, err = s.opts.Loop.Calls.Call(cctx, t, args)
	if err != nil && ctx.Err() == nil && context.Cause(cctx) == errToolTimeout {
		err = fmt.Errorf("the tool did not answer within %s", limit)
	}
	return text, err
}

// confirm asks the user to approve a call of a tool that changes the
// world, with the task's parallel slot free meanwhile.
func (s *scheduler) confirm(ctx context.Context, x execution, name string, args json.RawMessage) bool {
	approved := false
	s.waitingOnUser(ctx, x.index, func() { approved = s.events.ConfirmTool(ctx, x.id, name, args) })
	return approved && ctx.Err() == nil
}

func (s *scheduler) reportTodo(taskID string, ev todoEvents) {
	if ev.updated != nil {
		ev.updated.TaskID = taskID
		s.events.TodoUpdated(ev.updated)
	}
	for k := range ev.progress {
		ev.progress[k].TaskID = taskID
		s.events.TodoItemProgress(&ev.progress[k])
	}
	if ev.completed != nil {
		ev.completed.TaskID = taskID
		s.events.TodoCompleted(ev.completed)
	}
}

func (s *scheduler) toolNames() string {
	var names []string
	for _, sp := range append(builtinSpecs, s.specs...) {
		names = append(names, sp.Name)
	}
	return strings.Join(names, ", ")
}
