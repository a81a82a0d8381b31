package agui

import (
	"encoding/json"
	"strings"

	"github.com/baton-run/baton/wsproto"
)

// The AG-UI state of a thread: Baton's state (§6 of docs/protocol.md)
// shaped so that every sequenced event changes it by a JSON Patch made
// from that event alone — tasks and todo items are objects keyed by id,
// not arrays, so a patch names them by id. STATE_SNAPSHOT carries the
// whole of it; STATE_DELTA the patch of one event.

// View is the AG-UI state: {phase, run}.
type View struct {
	Phase string   `json:"phase"`
	Run   *ViewRun `json:"run"`
}

// ViewRun is the state of the session's latest run.
type ViewRun struct {
	RunID       string              `json:"run_id"`
	Request     string              `json:"request"`
	Mode        string              `json:"mode"`
	PlanSummary string              `json:"plan_summary"`
	PlanVersion int                 `json:"plan_version"`
	Tasks       map[string]ViewTask `json:"tasks"`
	FinalAnswer *string             `json:"final_answer"`
}

// ViewTask is one task of the run.
type ViewTask struct {
	ID          string    `json:"id"`
	Title       string    `json:"title"`
	Description string    `json:"description"`
	DependsOn   []string  `json:"depends_on"`
	Status      string    `json:"status"`
	Attempt     int       `json:"attempt"`
	Result      string    `json:"result"`
	Error       string    `json:"error"`
	Todo        *ViewTodo `json:"todo"`
}

// ViewTodo is a task's todo list.
type ViewTodo struct {
	Version int                         `json:"version"`
	Items   map[string]wsproto.TodoItem `json:"items"`
}

// viewOf is the AG-UI state of a Baton snapshot.
func viewOf(s wsproto.Snapshot) View {
	v := View{Phase: s.Phase}
	if v.Phase == "" {
		v.Phase = wsproto.PhaseIdle
	}
	if s.Run == nil {
		return v
	}
	r := s.Run
	vr := &ViewRun{RunID: r.RunID, Request: r.Request, Mode: r.Mode, PlanSummary: r.PlanSummary,
		PlanVersion: r.PlanVersion, Tasks: map[string]ViewTask{}, FinalAnswer: r.FinalAnswer}
	for _, t := range r.Tasks {
		vt := ViewTask{ID: t.ID, Title: t.Title, Description: t.Description, DependsOn: deps(t.DependsOn),
			Status: t.Status, Attempt: t.Attempt, Result: t.Result, Error: t.Error}
		if t.Todo != nil {
			vt.Todo = todoView(t.Todo.Version, t.Todo.Items)
		}
		vr.Tasks[t.ID] = vt
	}
	v.Run = vr
	return v
}

func deps(d []string) []string {
	if d == nil {
		return []string{}
	}
	return d
}

func todoView(version int, items []wsproto.TodoItem) *ViewTodo {
	td := &ViewTodo{Version: version, Items: make(map[string]wsproto.TodoItem, len(items))}
	for _, it := range items {
		td.Items[it.ID] = it
	}
	return td
}

func pendingTasks(tasks []wsproto.Task) map[string]ViewTask {
	m := make(map[string]ViewTask, len(tasks))
	for _, t := range tasks {
		m[t.ID] = pendingTask(t)
	}
	return m
}

func pendingTask(t wsproto.Task) ViewTask {
	return ViewTask{ID: t.ID, Title: t.Title, Description: t.Description, DependsOn: deps(t.DependsOn), Status: wsproto.TaskPending}
}

// Op is one RFC 6902 operation. Only add and remove are made: add sets an
// object's member whether or not it exists, so a patch needs no knowledge
// of the state it applies to beyond the objects it names.
type Op struct {
	Op    string
	Path  string
	Value any // for add
}

// MarshalJSON writes {op, path, value}, value for add only: an empty
// string or a zero is a value like any other.
func (o Op) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// pointer is the JSON Pointer (RFC 6901) of the path's tokens.
func pointer(tokens ...string) string {
	var b strings.Builder
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(esc.Replace(t))
	}
	return b.String()
}

func add(value any, tokens ...string) Op {
	return Op{Op: "add", Path: pointer(tokens...), Value: value}
}

// taskOps sets fields of a task: name, value, name, value, ….
func taskOps(taskID string, kv ...any) []Op {
	ops := make([]Op, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		ops = append(ops, add(kv[i+1], "run", "tasks", taskID, kv[i].(string)))
	}
	return ops
}

// delta is the patch a sequenced event makes to the state; nil when it
// changes nothing the state holds. meta is the event's decoded metadata
// (wsproto.DecodeMetadata).
func delta(meta any) []Op {
	switch m := meta.(type) {
	case *wsproto.PlanStart:
		return []Op{add(wsproto.PhasePlanning, "phase"),
			add(&ViewRun{RunID: m.RunID, Request: m.Request, Tasks: map[string]ViewTask{}}, "run")}
	case *wsproto.PlanCompleted:
		return []Op{add(m.PlanSummary, "run", "plan_summary"), add(1, "run", "plan_version"),
			add(pendingTasks(m.Tasks), "run", "tasks")}
	case *wsproto.PlanUpdated:
		ops := make([]Op, 0, len(m.Added)+len(m.Removed)+1)
		for _, t := range m.Added {
			ops = append(ops, add(pendingTask(t), "run", "tasks", t.ID))
		}
		for _, id := range m.Removed {
			ops = append(ops, Op{Op: "remove", Path: pointer("run", "tasks", id)})
		}
		return append(ops, add(m.Version, "run", "plan_version"))
	case *wsproto.UserConfirm:
		if m.Kind == wsproto.ConfirmPlan {
			return []Op{add(wsproto.PhaseAwaitingConfirm, "phase")}
		}
	case *wsproto.ConfirmSettled:
		if m.Kind == wsproto.ConfirmPlan && m.Confirmed != nil && *m.Confirmed && m.Tasks != nil {
			return []Op{add(pendingTasks(m.Tasks), "run", "tasks")}
		}
	case *wsproto.SolverStart:
		var ops []Op
		if m.Task != nil && m.Attempt == 1 {
			// A chat run: no planning event made the run (§5.6).
			ops = append(ops, add(&ViewRun{RunID: m.RunID, Request: m.Task.Description, Mode: m.Mode, PlanVersion: 1,
				Tasks: map[string]ViewTask{m.Task.ID: pendingTask(*m.Task)}}, "run"))
		}
		ops = append(ops, add(wsproto.PhaseSolving, "phase"))
		return append(ops, taskOps(m.TaskID, "status", wsproto.TaskRunning, "attempt", m.Attempt, "error", "")...)
	case *wsproto.SolverCompleted:
		return taskOps(m.TaskID, "status", wsproto.TaskCompleted, "attempt", m.Attempt, "result", m.Result, "error", "")
	case *wsproto.SolverCancelled:
		return taskOps(m.TaskID, "status", wsproto.TaskCancelled)
	case *wsproto.SolverSkipped:
		return taskOps(m.TaskID, "status", wsproto.TaskSkipped)
	case *wsproto.SolverRestarted:
		return taskOps(m.TaskID, "status", wsproto.TaskPending, "result", "", "error", "")
	case *wsproto.ExecutionError:
		if m.TaskID != "" {
			return taskOps(m.TaskID, "status", wsproto.TaskFailed, "attempt", m.Attempt, "error", m.Message)
		}
	case *wsproto.RecoveryStarted:
		if m.TaskID != "" {
			return taskOps(m.TaskID, "status", wsproto.TaskRetrying)
		}
	case *wsproto.RecoveryFailed:
		if m.TaskID != "" {
			return taskOps(m.TaskID, "status", wsproto.TaskFailed, "error", m.LastError)
		}
	case *wsproto.AggregateStart:
		return []Op{add(wsproto.PhaseAggregating, "phase")}
	case *wsproto.FinalAnswer:
		return []Op{add(m.Content, "run", "final_answer"), add(wsproto.PhaseIdle, "phase")}
	case *wsproto.PlanCancelled, *wsproto.PipelineCancelled:
		return []Op{add(wsproto.PhaseIdle, "phase")}
	case *wsproto.TodoUpdated:
		return []Op{add(todoView(m.Version, m.Items), "run", "tasks", m.TaskID, "todo")}
	case *wsproto.TodoItemProgress:
		return []Op{add(m.Version, "run", "tasks", m.TaskID, "todo", "version"),
			add(m.Item, "run", "tasks", m.TaskID, "todo", "items", m.Item.ID)}
	case *wsproto.TodoCompleted:
		return []Op{add(m.Version, "run", "tasks", m.TaskID, "todo", "version")}
	}
	return nil
}
