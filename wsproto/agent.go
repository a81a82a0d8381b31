package wsproto

import "encoding/json"

// The agent loop's events (§10), all sequenced.
const (
	EventToolCall   = "agent.tool_call"
	EventToolResult = "agent.tool_result"

	EventTodoUpdated      = "todo.updated"
	EventTodoItemProgress = "todo.item_progress"
	EventTodoCompleted    = "todo.completed"
)

// Confirmation kinds of the agent loop.
const (
	// ConfirmTool asks the user to approve a tool call that changes the
	// world; answered {approved}.
	ConfirmTool = "tool_confirm"
	// ConfirmInput asks the user a question; answered {text}.
	ConfirmInput = "input_request"
)

// Todo item statuses.
const (
	TodoStatusPending    = "pending"
	TodoStatusInProgress = "in_progress"
	TodoStatusCompleted  = "completed"
	TodoStatusBlocked    = "blocked"
)

// ToolCall is the metadata of agent.tool_call. Arguments is a JSON object.
type ToolCall struct {
	RunID     string          `json:"run_id"`
	TaskID    string          `json:"task_id"`
	Attempt   int             `json:"attempt"`
	Round     int             `json:"round"`
	StepID    string          `json:"step_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult is the metadata of agent.tool_result: Result is the tool's
// text, or its error when OK is false, cut at the tool result limit
// (Truncated).
type ToolResult struct {
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

// TodoItem is one item of a task's todo list. ToolCalls counts the tool
// calls attributed to it.
type TodoItem struct {
	ID        string `json:"id"`
	Content   string `json:"content"`
	Status    string `json:"status"`
	ToolCalls int    `json:"tool_calls"`
	Note      string `json:"note,omitempty"`
}

// TodoList is a task's todo list at a version, as the snapshot carries it.
type TodoList struct {
	Version int        `json:"version"`
	Items   []TodoItem `json:"items"`
}

// TodoUpdated is the metadata of todo.updated: the whole list.
type TodoUpdated struct {
	RunID   string     `json:"run_id"`
	TaskID  string     `json:"task_id"`
	Version int        `json:"version"`
	Items   []TodoItem `json:"items"`
}

// TodoItemProgress is the metadata of todo.item_progress: one item changed.
type TodoItemProgress struct {
	RunID   string   `json:"run_id"`
	TaskID  string   `json:"task_id"`
	Version int      `json:"version"`
	Item    TodoItem `json:"item"`
}

// TodoCompleted is the metadata of todo.completed: every item is done.
type TodoCompleted struct {
	RunID   string `json:"run_id"`
	TaskID  string `json:"task_id"`
	Version int    `json:"version"`
}

// applyTodo folds a todo event into the task's list. An event whose
// version is not above the one held is dropped (§10).
func (t *TaskState) applyTodo(version int, change func(l *TodoList)) {
	if t.Todo != nil && version <= t.Todo.Version {
		return
	}
	if t.Todo == nil {
		t.Todo = &TodoList{Items: []TodoItem{}}
	}
	t.Todo.Version = version
	change(t.Todo)
}
