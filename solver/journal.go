package solver

import "context"

// A task's execution can be journaled round by round, so that a run taken
// over by another process (NewResumed) goes on with each running task from
// its last completed round instead of from scratch: the model replies and
// the tool results already in are replayed into the conversation, and
// neither the model nor the tools are asked again for them.
//
// The journal itself is the receiver's business: the loop tells it each
// reply (Journal.Replied, before acting on it), and the tool results reach
// it as the ToolCall and ToolResult events (every round's call has both,
// in the reply's order). The receiver hands back the rounds of a running
// task in ResumeTask.Journal.

// Journal is an optional capability of Events: Events that implement it
// are told every model reply of every execution, from the task's
// goroutine, before the loop acts on the reply (before its tool calls'
// events, or the execution's end). It must not block for long.
//
// Settled returns once everything reported so far is journaled where a
// takeover would find it, or ctx is done. The loop calls it before it runs
// a tool (so that a takeover knows the call began, and retries it as
// such) and before it asks the model (so that no result it is asked with
// is lost to a takeover, and its call made again).
type Journal interface {
	Replied(taskID string, r Round)
	Settled(ctx context.Context)
}

// Round is one round of a task's agent loop: the model's reply, and what
// the reply's tool calls returned, as far as they got.
//
// Reply is what the conversation keeps of the reply: its text cut to
// Options.MaxResultBytes (TextBytes then says how long it was), and the
// arguments of a call past MaxResultBytes kept as {} (the loop refuses to
// run such a call). A round therefore holds at most MaxResultBytes of
// text, MaxResultBytes per call's arguments and Loop.ToolResultLimit per
// call's result: a task's journal is bounded by Loop.MaxRounds of them.
type Round struct {
	// Number is the round's number in its execution, from 1.
	Number int
	Reply  Reply
	// Final says the reply was taken as the task's answer: it had no tool
	// calls, or the round offered none.
	Final bool
	// Results are what the first len(Results) calls of Reply.ToolCalls
	// returned, in order; the calls after them had not begun.
	Results []CallResult
}

// CallResult is a journaled call's outcome.
type CallResult struct {
	// Text is what the model was shown as the call's result.
	Text string
	// Retry says the call began and its result never came back (the
	// process running it died): it is made again, with tool.WithRetry,
	// and Text is unused.
	Retry bool
}

// settled waits for the journal to hold everything reported so far, if
// the events keep one.
func (s *scheduler) settled(ctx context.Context) {
	if j, ok := s.events.(Journal); ok {
		j.Settled(ctx)
	}
}

// replied tells the journal a reply of round, if the events keep one.
func (s *scheduler) replied(taskID string, r Round) {
	if j, ok := s.events.(Journal); ok {
		j.Replied(taskID, r)
	}
}
