package solver

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// TaskChecker is an optional capability of a Model, found with a type
// assertion: it refuses, before a run starts, tasks it could never run as
// written. Each string is one problem. The simulated model refuses unknown
// or malformed fault directives.
type TaskChecker interface {
	CheckTask(t wsproto.Task) []string
}

// Result is a completed execution's product.
type Result struct {
	Text  string
	Usage wsproto.Usage
	// Truncated is set when the model's answer was longer than
	// Options.MaxResultBytes: Text is then cut, ending in
	// wsproto.CutMarker, and OriginalBytes is the answer's length before.
	Truncated     bool
	OriginalBytes int
}

// Input is what a model gets to execute one task.
type Input struct {
	Request string
	// History is the session's conversation before this run, oldest
	// first, within the server's history budget; the loop gives it to the
	// model as earlier user and assistant turns.
	History     []wsproto.HistoryEntry
	PlanSummary string
	// Chat says the task is a chat run's one task (Options.Chat): the
	// request answered directly, its reply's text streamed to the user as
	// it is written (progress messages are the text, not a status line).
	Chat bool
	Task wsproto.Task
	// Tasks is the whole task list with each task's status at the time
	// this execution starts.
	Tasks []TaskStatus
	// Dependencies holds the results of the task's dependencies by id.
	Dependencies map[string]string
	Attempt      int
}

// TaskStatus is a task and where it stands.
type TaskStatus struct {
	Task   wsproto.Task
	Status string
}

// Events receives what happens to tasks, in order for each task. Progress,
// Failed, Retrying, GaveUp and Started of a retry are called from the
// task's own goroutine; Started of a task's first execution in a budget,
// Completed, Recovered, Cancelled, Skipped, Restarted and PlanUpdated from
// the scheduler's; Decide and Adapt from a goroutine of their own.
// Implementations must be safe for that and must not block for long
// (except Decide, Adapt and the agent loop's questions). Only Adapt may
// call back into the Run (Propose, ProposeList, AddAnswer).
type Events interface {
	// Started: execution number attempt (1 = first) of a task begins.
	Started(taskID string, attempt int)
	Progress(taskID string, attempt int, fraction float64, message string)
	Completed(taskID string, attempt int, result Result, took time.Duration)
	// Failed: an execution failed with an error of this class.
	Failed(taskID string, attempt int, class failure.Class, err error)
	// Retrying: retry number retry (1..maxAttempts) of the current budget
	// starts after delay, for a failure of type errorType (the class's).
	Retrying(taskID string, retry, maxAttempts int, errorType string, delay time.Duration)
	// Recovered: execution attempt succeeded after at least one retry.
	Recovered(taskID string, attempt int)
	// GaveUp: out of retries, or not recoverable, after attempts executions
	// of the current budget.
	GaveUp(taskID string, attempts int, err error)
	// Decide asks what to do with a task that gave up. It blocks until
	// there is an answer or ctx is done (then the answer is ignored).
	Decide(ctx context.Context, taskID string, err error) Decision
	Cancelled(taskID, reason string)
	// Skipped: a pending task will not run, for reason dependency_failed
	// (dependency names the task that did not complete) or synthesized.
	Skipped(taskID, reason, dependency string)
	// Restarted: the user asked a finished task to run again (it, or a
	// task downstream of it); it is pending until it starts.
	Restarted(taskID string)

	// Adapt is the decide step of an adaptive run (§11), after a task
	// completed: called one at a time, and no task starts until it
	// returns (running ones go on). It may ask the user, check a change
	// with Propose or ProposeList and record answers with AddAnswer. ctx
	// is done when the run stops; what it returns then is ignored.
	Adapt(ctx context.Context, in AdaptInput) Adaptation
	// PlanUpdated: a change of the decide step was applied; Tasks is the
	// whole list after it. The metadata comes without RunID.
	PlanUpdated(m *wsproto.PlanUpdated)

	// The agent loop's reports (§10), from the task's goroutine. The
	// metadata comes without RunID, which the receiver knows.
	ToolCall(m *wsproto.ToolCall)
	ToolResult(m *wsproto.ToolResult)
	TodoUpdated(m *wsproto.TodoUpdated)
	TodoItemProgress(m *wsproto.TodoItemProgress)
	TodoCompleted(m *wsproto.TodoCompleted)
	// ConfirmTool asks the user to approve a call of a tool that changes
	// the world (kind tool_confirm); false when declined, expired or ctx
	// is done. It blocks like Decide.
	ConfirmTool(ctx context.Context, taskID, tool string, arguments json.RawMessage) bool
	// AskUser asks the user a question (kind input_request) and returns the
	// answer; ok is false when none came (expired, or ctx done).
	AskUser(ctx context.Context, taskID, question, context string) (answer string, ok bool)
}

// Decision is the user's answer for a task that gave up.
type Decision int

const (
	// Skip marks the task failed and skips its dependents.
	Skip Decision = iota
	// Retry runs the task again with a fresh retry budget.
	Retry
	// Abort marks the task failed; the caller cancels the run.
	Abort
)

// Options tune a Run. The zero value is usable.
type Options struct {
	// MaxParallel is how many tasks may execute at once. Tasks waiting for
	// a retry delay count; tasks waiting for a Decide do not. Defaults to 4.
	MaxParallel int
	// Retry is the retry policy of every task.
	Retry failure.Policy
	// TaskTimeout bounds one execution; an execution that runs longer
	// fails with a timeout. 0 means no bound.
	TaskTimeout time.Duration
	// Request, History and PlanSummary are passed on to the model.
	Request     string
	History     []wsproto.HistoryEntry
	PlanSummary string
	// Adaptive runs the decide step (Events.Adapt) after each task
	// completes. Defaults to false.
	Adaptive bool
	// Chat marks a chat run: one task, the request itself, answered
	// directly (Input.Chat). Defaults to false.
	Chat bool
	// MaxTasks bounds the task list a change may make. Defaults to 50.
	MaxTasks int
	// MaxResultBytes bounds what the run keeps of a model's text: a
	// task's answer longer than it is cut (Result.Truncated), and so is
	// the text of a reply with tool calls, kept in the conversation; tool
	// call arguments longer than it are refused as bad arguments. Models
	// are told it (Turn.MaxReplyBytes). Defaults to DefaultMaxResultBytes.
	MaxResultBytes int

	// Loop tunes each execution's agent loop.
	Loop Loop
}

// Loop tunes the agent loop (§10). The zero value is usable.
type Loop struct {
	// Tools are offered to every task besides the built-in ones
	// (todo_write, todo_update, ask_user). Nil means none.
	Tools *tool.Set
	// MaxRounds bounds the model calls of one execution; the last round
	// offers no tools. Defaults to 8.
	MaxRounds int
	// ToolResultLimit cuts a tool's result, in bytes. Defaults to 16 KiB.
	ToolResultLimit int
	// MaxContextBytes is the conversation's budget: past it the oldest
	// tool results are elided. Defaults to 128 KiB.
	MaxContextBytes int
	// ToolTimeout bounds one tool call (not the user's answer to ask_user
	// or to a tool confirmation). Defaults to 60s.
	ToolTimeout time.Duration
	// Calls runs the tool calls. A call still running when its timeout
	// fires or its task is cancelled is abandoned to it: the loop goes on
	// at once with the timeout (or the cancel) as the call's result, and
	// Calls owns the call's goroutine until the tool returns. Whoever sets
	// it waits on it (Group.Wait) before closing the tools. Nil means a
	// Group of the Run's own, which Execute waits on before it returns.
	Calls *tool.Group
	// TodoCompleteAfter and TodoBlockAfter are the automatic tracking
	// thresholds: successful calls that complete the active todo item, and
	// consecutive failed ones that block it. Default to 3 and 2.
	TodoCompleteAfter, TodoBlockAfter int
}

func (o *Options) withDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxParallel, 4)
	def(&o.MaxTasks, 50)
	def(&o.MaxResultBytes, DefaultMaxResultBytes)
	l := &o.Loop
	def(&l.MaxRounds, 8)
	def(&l.ToolResultLimit, 16<<10)
	def(&l.MaxContextBytes, 128<<10)
	def(&l.TodoCompleteAfter, 3)
	def(&l.TodoBlockAfter, 2)
	if l.ToolTimeout <= 0 {
		l.ToolTimeout = time.Minute
	}
	if l.Tools == nil {
		l.Tools = &tool.Set{}
	}
	if l.Calls == nil {
		l.Calls = &tool.Group{}
	}
}

// DefaultMaxResultBytes is Options.MaxResultBytes when unset: 128 KiB,
// some 32k tokens, twice what a 16k-token output holds, and the default
// conversation budget (Loop.MaxContextBytes): a result longer than the
// context a task can be given is never read whole by a later stage.
const DefaultMaxResultBytes = 128 << 10

// Report is the outcome of a run: each task's final status and the results
// of those that completed.
type Report struct {
	Tasks   []TaskStatus
	Results map[string]string
	// Errors holds what a client may be told (failure.Public) of the last
	// error of each task that failed.
	Errors map[string]string
	// Usage is the total of the completed executions.
	Usage wsproto.Usage
}

// Count returns how many tasks ended in the given status.
func (r Report) Count(status string) int {
	n := 0
	for _, t := range r.Tasks {
		if t.Status == status {
			n++
		}
	}
	return n
}
