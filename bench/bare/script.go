package main

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"unicode/utf8"
)

// The metadata shapes below mirror wsproto's (field names, order and
// omitempty), so that a frame here is byte for byte the size of Baton's.
// They are copied rather than imported: the yardstick must not share
// Baton's code.

type task struct {
	ID          string   `json:"id"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	DependsOn   []string `json:"depends_on"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type planStart struct {
	RunID   string `json:"run_id"`
	Request string `json:"request"`
}

type planStep struct {
	RunID       string `json:"run_id"`
	Step        int    `json:"step"`
	Description string `json:"description"`
}

type planCompleted struct {
	RunID       string `json:"run_id"`
	PlanSummary string `json:"plan_summary"`
	Tasks       []task `json:"tasks"`
}

type planCancelled struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
}

// userConfirm is a plan_confirm's. ExpiresAt is a time.Time, or a
// placeholder string while a template is compiled.
type userConfirm struct {
	RunID       string `json:"run_id"`
	StepID      string `json:"step_id"`
	Kind        string `json:"kind"`
	PlanSummary string `json:"plan_summary,omitempty"`
	Tasks       []task `json:"tasks,omitempty"`
	ExpiresAt   any    `json:"expires_at"`
}

type solverStart struct {
	RunID   string `json:"run_id"`
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
}

type solverProgress struct {
	RunID    string  `json:"run_id"`
	TaskID   string  `json:"task_id"`
	Attempt  int     `json:"attempt"`
	Progress float64 `json:"progress"`
	Message  string  `json:"message"`
}

type solverCompleted struct {
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id"`
	Attempt    int    `json:"attempt"`
	Result     string `json:"result"`
	DurationMS int64  `json:"duration_ms"`
	Usage      usage  `json:"usage"`
}

type toolCall struct {
	RunID     string `json:"run_id"`
	TaskID    string `json:"task_id"`
	Attempt   int    `json:"attempt"`
	Round     int    `json:"round"`
	StepID    string `json:"step_id"`
	Tool      string `json:"tool"`
	Arguments any    `json:"arguments"`
}

type toolResult struct {
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id"`
	Attempt    int    `json:"attempt"`
	Round      int    `json:"round"`
	StepID     string `json:"step_id"`
	Tool       string `json:"tool"`
	OK         bool   `json:"ok"`
	Result     string `json:"result"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
}

// todoArg is an item of todo_write's arguments, in the key order of the
// simulated model's (a map's, sorted).
type todoArg struct {
	Content string `json:"content"`
	ID      string `json:"id"`
}

type todoUpdateArgs struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

type todoItem struct {
	ID        string `json:"id"`
	Content   string `json:"content"`
	Status    string `json:"status"`
	ToolCalls int    `json:"tool_calls"`
}

type todoUpdated struct {
	RunID   string     `json:"run_id"`
	TaskID  string     `json:"task_id"`
	Version int        `json:"version"`
	Items   []todoItem `json:"items"`
}

type todoItemProgress struct {
	RunID   string   `json:"run_id"`
	TaskID  string   `json:"task_id"`
	Version int      `json:"version"`
	Item    todoItem `json:"item"`
}

type todoCompleted struct {
	RunID   string `json:"run_id"`
	TaskID  string `json:"task_id"`
	Version int    `json:"version"`
}

type aggregateStart struct {
	RunID     string `json:"run_id"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Skipped   int    `json:"skipped"`
	Cancelled int    `json:"cancelled"`
}

type aggregateProgress struct {
	RunID   string `json:"run_id"`
	Message string `json:"message"`
}

type aggregateCompleted struct {
	RunID   string `json:"run_id"`
	Summary string `json:"summary"`
}

type pipelineCompleted struct {
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Skipped    int    `json:"skipped"`
	Cancelled  int    `json:"cancelled"`
	DurationMS int64  `json:"duration_ms"`
	Usage      usage  `json:"usage"`
}

type finalAnswer struct {
	RunID   string `json:"run_id"`
	Content string `json:"content"`
}

// event is one sequenced event of a run before it is framed.
type event struct {
	name    string
	stepID  string // agent.tool_call/tool_result's pair, agent.user_confirm's answer
	content string
	meta    any
}

// ids names what a run's events refer to: real ids when a run is written
// naively, placeholders when its template is compiled.
type ids interface {
	run() string
	toolStep(k int) string // the k-th tool call's step id, k from 0
	confirmStep() string
	expiresAt() any
}

// request is a run to answer: a user.solve_tasks list, or a
// user.message's request, planned into a fixed diamond and confirmed.
type request struct {
	message string // "" for user.solve_tasks
	tasks   []task
	// waves are the tasks in the order they run: every task of a wave
	// depends only on tasks of earlier waves.
	waves [][]task
	key   string // what tells one request's events from another's
}

// planTasks is the plan of a user.message: the diamond baton-load's tasks
// workload sends, titled for the request.
func planTasks(req string) []task {
	t := func(id, title string, deps ...string) task {
		return task{ID: id, Title: title + " for " + topic(req, 40), Description: "Part " + id + " of the work.", DependsOn: append([]string{}, deps...)}
	}
	return []task{t("a", "Research"), t("b", "Collect examples"), t("c", "Compare", "a", "b"), t("d", "Write the answer", "c")}
}

// newRequest checks tasks as far as running them needs: unique ids,
// dependencies that exist and no cycle.
func newRequest(message string, tasks []task, key string) (request, error) {
	if len(tasks) == 0 || len(tasks) > 50 {
		return request{}, errors.New("a run needs 1 to 50 tasks")
	}
	done := map[string]bool{}
	seen := map[string]bool{}
	for _, t := range tasks {
		if t.ID == "" || seen[t.ID] {
			return request{}, fmt.Errorf("task id %q is empty or repeated", t.ID)
		}
		seen[t.ID] = true
	}
	var waves [][]task
	for len(done) < len(tasks) {
		var wave []task
		for _, t := range tasks {
			ready := !done[t.ID]
			for _, d := range t.DependsOn {
				ready = ready && done[d]
			}
			if ready {
				wave = append(wave, t)
			}
		}
		if wave == nil {
			return request{}, errors.New("the tasks' dependencies are unknown or form a cycle")
		}
		for _, t := range wave {
			done[t.ID] = true
		}
		waves = append(waves, wave)
	}
	return request{message: message, tasks: tasks, waves: waves, key: key}, nil
}

// planEvents are a user.message run's events up to its confirmation.
func planEvents(req request, id ids) []event {
	run := id.run()
	summary := fmt.Sprintf("Plan ready for %q", req.message) // as the simulated planner words it
	steps := []string{
		fmt.Sprintf("Read the request (%d characters)", utf8.RuneCountInString(req.message)),
		fmt.Sprintf("Split the work into %d tasks", len(req.tasks)),
		fmt.Sprintf("Ordered the tasks: %d can start at once", len(req.waves[0])),
	}
	evs := []event{{name: "plan.start", content: "Planning", meta: planStart{RunID: run, Request: req.message}}}
	for i, s := range steps {
		evs = append(evs, event{name: "plan.step_completed", content: s, meta: planStep{RunID: run, Step: i + 1, Description: s}})
	}
	step := id.confirmStep()
	return append(evs,
		event{name: "plan.completed", content: summary, meta: planCompleted{RunID: run, PlanSummary: summary, Tasks: req.tasks}},
		event{name: "agent.user_confirm", stepID: step, content: "Confirm the plan",
			meta: userConfirm{RunID: run, StepID: step, Kind: "plan_confirm", PlanSummary: summary, Tasks: req.tasks, ExpiresAt: id.expiresAt()}})
}

// rejectedEvent ends a run whose plan the user rejected.
func rejectedEvent(id ids) event {
	return event{name: "plan.cancelled", content: "Plan rejected", meta: planCancelled{RunID: id.run(), Reason: "rejected"}}
}

// solveEvents are the events of solving req's tasks, as Baton's simulated
// model sends them: each task's agent loop writes a todo list of 2 or 3
// items, completes them one tool call at a time, and answers; then the
// results are aggregated into the final answer.
func solveEvents(req request, id ids) []event {
	run := id.run()
	var evs []event
	results := map[string]string{}
	step := 0
	for _, wave := range req.waves {
		for _, t := range wave {
			evs = append(evs, event{name: "solver.start", content: "Started " + t.ID, meta: solverStart{RunID: run, TaskID: t.ID, Attempt: 1}})
		}
		for _, t := range wave {
			items := todo(t)
			progress := func(p float64, msg string) event {
				return event{name: "solver.progress", content: msg, meta: solverProgress{RunID: run, TaskID: t.ID, Attempt: 1, Progress: p, Message: msg}}
			}
			args := make([]todoArg, len(items))
			list := make([]todoItem, len(items))
			for i, it := range items {
				args[i] = todoArg{Content: it.Content, ID: it.ID}
				list[i] = it
			}
			s := id.toolStep(step)
			step++
			evs = append(evs, progress(1.0/3, "Calling todo_write"),
				event{name: "agent.tool_call", stepID: s, content: "Calling todo_write",
					meta: toolCall{RunID: run, TaskID: t.ID, Attempt: 1, Round: 1, StepID: s, Tool: "todo_write", Arguments: map[string]any{"items": args}}},
				event{name: "agent.tool_result", stepID: s, content: "todo_write answered",
					meta: toolResult{RunID: run, TaskID: t.ID, Attempt: 1, Round: 1, StepID: s, Tool: "todo_write", OK: true,
						Result: fmt.Sprintf("Todo list written: %d items.", len(items))}},
				event{name: "todo.updated", content: "Todo list of " + t.ID, meta: todoUpdated{RunID: run, TaskID: t.ID, Version: 1, Items: list}},
				progress(2.0/3, "Calling todo_update"))
			for i, it := range items {
				s := id.toolStep(step)
				step++
				it.Status = "completed"
				evs = append(evs,
					event{name: "agent.tool_call", stepID: s, content: "Calling todo_update",
						meta: toolCall{RunID: run, TaskID: t.ID, Attempt: 1, Round: 2, StepID: s, Tool: "todo_update", Arguments: todoUpdateArgs{ID: it.ID, Status: "completed"}}},
					event{name: "agent.tool_result", stepID: s, content: "todo_update answered",
						meta: toolResult{RunID: run, TaskID: t.ID, Attempt: 1, Round: 2, StepID: s, Tool: "todo_update", OK: true,
							Result: "Item " + it.ID + " is now completed."}},
					event{name: "todo.item_progress", content: it.Content + ": completed",
						meta: todoItemProgress{RunID: run, TaskID: t.ID, Version: i + 2, Item: it}})
			}
			result := topic(t.Title, 80) + ": done"
			if len(t.DependsOn) > 0 {
				result += ", building on " + strings.Join(slices.Sorted(slices.Values(t.DependsOn)), ", ")
			}
			result += "."
			results[t.ID] = result
			evs = append(evs,
				event{name: "todo.completed", content: "Todo list of " + t.ID + " completed", meta: todoCompleted{RunID: run, TaskID: t.ID, Version: len(items) + 2}},
				progress(1, "Answering"),
				event{name: "solver.completed", content: "Completed " + t.ID, meta: solverCompleted{RunID: run, TaskID: t.ID, Attempt: 1, Result: result}})
		}
	}

	n := len(req.tasks)
	evs = append(evs, event{name: "aggregate.start", content: "Aggregating results", meta: aggregateStart{RunID: run, Completed: n}})
	var answer strings.Builder
	what := "your tasks"
	if req.message != "" {
		what = fmt.Sprintf("%q", req.message)
	}
	fmt.Fprintf(&answer, "Answer to %s:\n", what)
	for _, t := range req.tasks {
		line := "- " + results[t.ID]
		answer.WriteString(line + "\n")
		evs = append(evs, event{name: "aggregate.progress", content: line, meta: aggregateProgress{RunID: run, Message: line}})
	}
	summary := fmt.Sprintf("%d of %d tasks completed for %s.", n, n, what)
	return append(evs,
		event{name: "aggregate.completed", content: summary, meta: aggregateCompleted{RunID: run, Summary: summary}},
		event{name: "pipeline.completed", content: "Run succeeded", meta: pipelineCompleted{RunID: run, Status: "succeeded", Completed: n}},
		event{name: "agent.final_answer", content: answer.String(), meta: finalAnswer{RunID: run, Content: answer.String()}})
}

// todo is a task's todo list: 2 or 3 items chosen by the task's id, as
// the simulated model's.
func todo(t task) []todoItem {
	h := fnv.New32a()
	h.Write([]byte(t.ID))
	items := []todoItem{
		{ID: "1", Content: "Gather material for " + topic(t.Title, 60), Status: "pending"},
		{ID: "2", Content: "Work through " + topic(t.Title, 60), Status: "pending"},
		{ID: "3", Content: "Check the result", Status: "pending"},
	}
	return items[:2+h.Sum32()%2]
}

// topic is text with its whitespace collapsed, cut to max runes.
func topic(text string, max int) string {
	s := strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return strings.TrimSpace(string([]rune(s)[:max-1])) + "…"
}
