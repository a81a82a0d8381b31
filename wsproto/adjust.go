package wsproto

import "fmt"

// Problem codes of an adjustment of a running plan (§11) besides those of
// ValidateTasks.
const (
	// ProblemUnknownTask: a removed id names no task of the run.
	ProblemUnknownTask = "unknown_task"
	// ProblemNotPending: a removed task has started (or ended); only
	// pending tasks can be removed.
	ProblemNotPending = "not_pending"
	// ProblemTaskChanged: an edited list changes a task already in the
	// run; an edit may only add tasks and leave pending ones out.
	ProblemTaskChanged = "task_changed"
	// ProblemNoChange: the adjustment adds and removes nothing.
	ProblemNoChange = "no_change"
)

// ValidateAdjustment checks a change to a run's task list (§11) against
// the whole run: run is its tasks as they stand (each with its status),
// retired the ids of tasks removed earlier, which stay taken. Added tasks
// are checked as in ValidateTasks against the list after the change (they
// may depend on any task of it; ids unique across the run; at most
// maxTasks in all); only pending tasks may be removed, and no task left
// may depend on a removed one. It returns the list after the change —
// the run's tasks without the removed ones, in order, then the added ones
// — or the problems (with Index a position in that list).
func ValidateAdjustment(run []TaskState, retired []string, add []Task, remove []string, maxTasks int) ([]Task, []TaskProblem) {
	var probs []TaskProblem
	if len(add) == 0 && len(remove) == 0 {
		return nil, []TaskProblem{{Code: ProblemNoChange, Message: "the adjustment adds and removes nothing"}}
	}
	status := make(map[string]string, len(run))
	for _, t := range run {
		status[t.ID] = t.Status
	}
	gone := make(map[string]bool, len(remove))
	for _, id := range remove {
		st, ok := status[id]
		switch {
		case !ok:
			probs = append(probs, TaskProblem{Code: ProblemUnknownTask, TaskID: id,
				Message: fmt.Sprintf("removed task %q is not in the run", id)})
		case st != TaskPending:
			probs = append(probs, TaskProblem{Code: ProblemNotPending, TaskID: id,
				Message: fmt.Sprintf("task %q is %s: only pending tasks can be removed", id, st)})
		default:
			gone[id] = true
		}
	}
	after := make([]Task, 0, len(run)+len(add))
	for _, t := range run {
		if gone[t.ID] {
			continue
		}
		for _, d := range t.DependsOn {
			if gone[d] {
				i := len(after)
				probs = append(probs, problem(ProblemUnknownDependency, i, t.ID,
					"task %d (%q) depends on %q, which would be removed", i, t.ID, d))
			}
		}
		after = append(after, t.Task)
	}
	kept := len(after)
	after = append(after, NormalizeTasks(append([]Task(nil), add...))...)
	for _, p := range ValidateTasks(after, maxTasks) {
		if p.Code == ProblemUnknownDependency && p.Index != nil && *p.Index < kept {
			continue // a task of the run: reported above, with the removal named
		}
		probs = append(probs, p)
	}
	isRetired := make(map[string]bool, len(retired)+len(gone))
	for _, id := range retired {
		isRetired[id] = true
	}
	for id := range gone { // an id stays with the task it named
		isRetired[id] = true
	}
	for k, t := range add {
		if isRetired[t.ID] {
			i := kept + k
			probs = append(probs, problem(ProblemDuplicateID, i, t.ID,
				"task %d: id %q was used by a task removed earlier", i, t.ID))
		}
	}
	if probs != nil {
		return nil, probs
	}
	return after, nil
}

// DiffTasks turns an edited whole list (a user's answer to plan_adjust)
// into the adjustment it amounts to: the tasks it adds, in its order, and
// the run's tasks it leaves out. A task of the run it keeps must be
// unchanged, and an id may appear once.
func DiffTasks(run []TaskState, edited []Task) (add []Task, remove []string, probs []TaskProblem) {
	current := make(map[string]Task, len(run))
	for _, t := range run {
		current[t.ID] = t.Task
	}
	seen := make(map[string]bool, len(edited))
	for i, t := range edited {
		if seen[t.ID] {
			probs = append(probs, problem(ProblemDuplicateID, i, t.ID, "task %d: id %q is used more than once", i, t.ID))
			continue
		}
		seen[t.ID] = true
		old, ok := current[t.ID]
		switch {
		case !ok:
			add = append(add, t)
		case !sameTask(old, t):
			probs = append(probs, problem(ProblemTaskChanged, i, t.ID,
				"task %d (%q) differs from the run's: an edit may only add tasks and leave pending ones out", i, t.ID))
		}
	}
	for _, t := range run {
		if !seen[t.ID] {
			remove = append(remove, t.ID)
		}
	}
	return add, remove, probs
}

func sameTask(a, b Task) bool {
	if a.ID != b.ID || a.Title != b.Title || a.Description != b.Description || len(a.DependsOn) != len(b.DependsOn) {
		return false
	}
	for i := range a.DependsOn {
		if a.DependsOn[i] != b.DependsOn[i] {
			return false
		}
	}
	return true
}
