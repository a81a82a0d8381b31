package wsproto

import "fmt"

// Problem codes of an invalid task list, carried in system.error details.
const (
	ProblemEmpty             = "empty"
	ProblemTooMany           = "too_many"
	ProblemEmptyID           = "empty_id"
	ProblemDuplicateID       = "duplicate_id"
	ProblemEmptyTitle        = "empty_title"
	ProblemUnknownDependency = "unknown_dependency"
	ProblemCycle             = "cycle"
	// ProblemInvalidDirective: the model refuses the task as written (the
	// simulated model: an unknown or malformed fault directive).
	ProblemInvalidDirective = "invalid_directive"
)

// TaskProblem names one reason a task list is invalid. Index is the task's
// position in the list, nil for problems of the list as a whole.
type TaskProblem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Index   *int   `json:"index,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
}

// ValidateTasks checks a task list against §5.1 and returns every problem it
// finds, or nil when the list is valid. maxTasks ≤ 0 means no limit.
func ValidateTasks(tasks []Task, maxTasks int) []TaskProblem {
	if len(tasks) == 0 {
		return []TaskProblem{{Code: ProblemEmpty, Message: "the task list is empty"}}
	}
	var probs []TaskProblem
	if maxTasks > 0 && len(tasks) > maxTasks {
		probs = append(probs, TaskProblem{Code: ProblemTooMany,
			Message: fmt.Sprintf("%d tasks, at most %d allowed", len(tasks), maxTasks)})
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		switch {
		case t.ID == "":
			probs = append(probs, problem(ProblemEmptyID, i, "", "task %d has an empty id", i))
		case hasIndex(index, t.ID):
			probs = append(probs, problem(ProblemDuplicateID, i, t.ID, "task %d: id %q is used more than once", i, t.ID))
		default:
			index[t.ID] = i
		}
		if t.Title == "" {
			probs = append(probs, problem(ProblemEmptyTitle, i, t.ID, "task %d (%q) has an empty title", i, t.ID))
		}
	}
	for i, t := range tasks {
		for _, d := range t.DependsOn {
			if !hasIndex(index, d) {
				probs = append(probs, problem(ProblemUnknownDependency, i, t.ID, "task %d (%q) depends on unknown task %q", i, t.ID, d))
			}
		}
	}
	if id, ok := findCycle(tasks, index); ok {
		probs = append(probs, problem(ProblemCycle, index[id], id, "task %q is part of a dependency cycle", id))
	}
	return probs
}

func hasIndex(m map[string]int, id string) bool { _, ok := m[id]; return ok }

func problem(code string, i int, id, format string, args ...any) TaskProblem {
	return TaskProblem{Code: code, Message: fmt.Sprintf(format, args...), Index: &i, TaskID: id}
}

// findCycle reports a task on a dependency cycle, if any. Unknown
// dependencies are ignored (reported elsewhere). Iterative DFS: a client can
// send a 50-task chain, and recursion depth should not depend on input.
func findCycle(tasks []Task, index map[string]int) (string, bool) {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(tasks))
	type frame struct{ node, next int }
	for root := range tasks {
		if color[root] != white || index[tasks[root].ID] != root {
			continue
		}
		stack := []frame{{root, 0}}
		color[root] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := tasks[top.node].DependsOn
			if top.next == len(deps) {
				color[top.node] = black
				stack = stack[:len(stack)-1]
				continue
			}
			d, ok := index[deps[top.next]]
			top.next++
			if !ok {
				continue
			}
			switch color[d] {
			case grey:
				return tasks[d].ID, true
			case white:
				color[d] = grey
				stack = append(stack, frame{d, 0})
			}
		}
	}
	return "", false
}
