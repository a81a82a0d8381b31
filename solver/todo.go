package solver

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// The todo tools, always offered (§10). The loop runs them itself: they
// change the task's todo list, which lives as long as the task.
const (
	todoWrite  = "todo_write"
	todoUpdate = "todo_update"
)

// maxTodoItems bounds a todo list a model can write.
const maxTodoItems = 50

var todoSpecs = []tool.Spec{
	{
		Name: todoWrite,
		Description: "Write (or replace) your todo list for this task: the steps you will take, in order. " +
			"Each item is {id?, content, status?}; status is pending (default), in_progress, completed or blocked.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"object",` +
			`"properties":{"id":{"type":"string"},"content":{"type":"string"},"status":{"type":"string",` +
			`"enum":["pending","in_progress","completed","blocked"]}},"required":["content"]}}},"required":["items"]}`),
	},
	{
		Name:        todoUpdate,
		Description: "Change the status of one item of your todo list, with an optional note.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"status":{"type":"string",` +
			`"enum":["pending","in_progress","completed","blocked"]},"note":{"type":"string"}},"required":["id","status"]}`),
	},
}

func isTodoTool(name string) bool { return name == todoWrite || name == todoUpdate }

// todoList is one task's todo list and its automatic tracking. Only the
// task's goroutine touches it; it outlives attempts, and so does its
// version.
type todoList struct {
	version int
	items   []wsproto.TodoItem
	// successes and failures (consecutive) of the tool calls counted by
	// each item, by id.
	successes, failures map[string]int
	// completeAfter and blockAfter are the tracking thresholds.
	completeAfter, blockAfter int
}

// todoEvents collects what a change to the list must report, in order.
type todoEvents struct {
	updated   *wsproto.TodoUpdated
	progress  []wsproto.TodoItemProgress
	completed *wsproto.TodoCompleted
}

func newTodoList(completeAfter, blockAfter int) *todoList {
	return &todoList{successes: map[string]int{}, failures: map[string]int{}, completeAfter: completeAfter, blockAfter: blockAfter}
}

func (l *todoList) snapshot() []wsproto.TodoItem { return append([]wsproto.TodoItem(nil), l.items...) }

func (l *todoList) next() int { l.version++; return l.version }

// allDone reports whether the list has items and every one is completed.
func (l *todoList) allDone() bool {
	for _, it := range l.items {
		if it.Status != wsproto.TodoStatusCompleted {
			return false
		}
	}
	return len(l.items) > 0
}

func (l *todoList) finish(ev *todoEvents) {
	if l.allDone() {
		ev.completed = &wsproto.TodoCompleted{Version: l.next()}
	}
}

func validTodoStatus(s string) bool {
	switch s {
	case wsproto.TodoStatusPending, wsproto.TodoStatusInProgress, wsproto.TodoStatusCompleted, wsproto.TodoStatusBlocked:
		return true
	}
	return false
}

// write runs todo_write.
func (l *todoList) write(args json.RawMessage) (string, todoEvents, error) {
	var a struct {
		Items []struct {
			ID      string `json:"id"`
			Content string `json:"content"`
			Status  string `json:"status"`
		} `json:"items"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", todoEvents{}, err
	}
	if len(a.Items) == 0 || len(a.Items) > maxTodoItems {
		return "", todoEvents{}, fmt.Errorf(`"items" must hold 1 to %d items`, maxTodoItems)
	}
	items := make([]wsproto.TodoItem, len(a.Items))
	seen := map[string]bool{}
	for i, it := range a.Items {
		if strings.TrimSpace(it.Content) == "" {
			return "", todoEvents{}, fmt.Errorf("item %d has no content", i+1)
		}
		if it.Status == "" {
			it.Status = wsproto.TodoStatusPending
		}
		if !validTodoStatus(it.Status) {
			return "", todoEvents{}, fmt.Errorf("item %d: status %q is not pending, in_progress, completed or blocked", i+1, it.Status)
		}
		if it.ID == "" {
			it.ID = strconv.Itoa(i + 1)
		}
		if seen[it.ID] {
			return "", todoEvents{}, fmt.Errorf("item id %q is used twice", it.ID)
		}
		seen[it.ID] = true
		items[i] = wsproto.TodoItem{ID: it.ID, Content: it.Content, Status: it.Status}
	}
	l.items = items
	clear(l.successes)
	clear(l.failures)
	var ev todoEvents
	ev.updated = &wsproto.TodoUpdated{Version: l.next(), Items: l.snapshot()}
	l.finish(&ev)
	return fmt.Sprintf("Todo list written: %d items.", len(items)), ev, nil
}

// update runs todo_update.
func (l *todoList) update(args json.RawMessage) (string, todoEvents, error) {
	var a struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Note   string `json:"note"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", todoEvents{}, err
	}
	if !validTodoStatus(a.Status) {
		return "", todoEvents{}, fmt.Errorf("status %q is not pending, in_progress, completed or blocked", a.Status)
	}
	i := l.find(a.ID)
	if i < 0 {
		return "", todoEvents{}, errors.New("no todo item has id " + strconv.Quote(a.ID))
	}
	l.items[i].Status = a.Status
	if a.Note != "" {
		l.items[i].Note = a.Note
	}
	l.failures[a.ID] = 0
	var ev todoEvents
	ev.progress = append(ev.progress, wsproto.TodoItemProgress{Version: l.next(), Item: l.items[i]})
	l.finish(&ev)
	return fmt.Sprintf("Item %s is now %s.", a.ID, a.Status), ev, nil
}

func (l *todoList) find(id string) int {
	for i, it := range l.items {
		if it.ID == id {
			return i
		}
	}
	return -1
}

// track counts a tool call (other than the todo tools) against the active
// item: the in_progress one, else the first pending one, which becomes
// in_progress. The completeAfter-th success completes it; the
// blockAfter-th consecutive failure blocks it.
func (l *todoList) track(ok bool) todoEvents {
	var ev todoEvents
	i := -1
	for j, it := range l.items {
		if it.Status == wsproto.TodoStatusInProgress {
			i = j
			break
		}
	}
	if i < 0 {
		for j, it := range l.items {
			if it.Status == wsproto.TodoStatusPending {
				i = j
				break
			}
		}
	}
	if i < 0 {
		return ev // no list, or nothing left to work on
	}
	it := &l.items[i]
	it.Status = wsproto.TodoStatusInProgress
	it.ToolCalls++
	if ok {
		l.failures[it.ID] = 0
		if l.successes[it.ID]++; l.successes[it.ID] >= l.completeAfter {
			it.Status = wsproto.TodoStatusCompleted
		}
	} else if l.failures[it.ID]++; l.failures[it.ID] >= l.blockAfter {
		it.Status = wsproto.TodoStatusBlocked
	}
	ev.progress = append(ev.progress, wsproto.TodoItemProgress{Version: l.next(), Item: *it})
	l.finish(&ev)
	return ev
}
