// Package solver runs a plan's tasks as a DAG: a task starts when all its
// dependencies have completed, at most MaxParallel run at once, a task that
// does not complete takes its dependents down with it (skipped, with the
// dependency named), single tasks or the whole run can be cancelled, and a
// finished task can be restarted with its dependents. In an adaptive run
// the decide step (Events.Adapt) follows each completed task, before any
// new task starts, and may change the task list or end the run early (§11).
//
// A tool call never holds its task past the tool timeout or a cancel: the
// agent loop waits for the call only until then and goes on with that as
// the call's result, leaving a tool that does not obey its context to run
// on. Such an abandoned call is owned by Loop.Calls (a tool.Group), which
// its creator waits on before closing the tools (cmd/baton does at
// shutdown); without one the Run owns them and Execute returns only once
// they have ended. The task's parallel slot is free as soon as the loop
// goes on.
//
// A run can continue one another process left (NewResumed): a running
// task's journal of rounds (Journal, Round) is replayed into its
// conversation, so no model reply and no tool result in it is asked for
// again; a call that began and never returned is made again with
// tool.WithRetry.
//
// It defines the Model interface that executes one task and holds the
// built-in simulated model (§9 of the contract). It reports what happens
// through the Events interface and knows nothing of sessions, connections
// or the wire format beyond the Task type.
package solver
