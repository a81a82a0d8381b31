package wsproto

import (
	"encoding/json"
	"fmt"
)

// RunState is the state of one run as a client sees it (§6).
type RunState struct {
	RunID   string `json:"run_id"`
	Request string `json:"request"`
	// Mode is ModeChat for a chat run, empty for every other run.
	Mode        string `json:"mode,omitempty"`
	PlanSummary string `json:"plan_summary"`
	// PlanVersion is the plan's version (§11): 0 while planning, 1 from
	// plan.completed (or a user.solve_tasks run's start), then each
	// plan.updated's.
	PlanVersion    int           `json:"plan_version"`
	Tasks          []TaskState   `json:"tasks"`
	PendingConfirm []UserConfirm `json:"pending_confirm"`
	// Answers are the user's answers to the run's questions
	// (input_request), oldest first.
	Answers []AnswerState `json:"answers"`
	// LastDecision is the decide step's latest plan.decision, nil before
	// the first (and in runs that are not adaptive).
	LastDecision *PlanDecision `json:"last_decision"`
	FinalAnswer  *string       `json:"final_answer"`
}

// AnswerState is a question of the run and the user's answer. TaskID is
// the task that asked (empty for the decide step's questions).
type AnswerState struct {
	StepID   string `json:"step_id"`
	TaskID   string `json:"task_id,omitempty"`
	Question string `json:"question"`
	Text     string `json:"text"`
}

// TaskState is one task of a run with its progress.
type TaskState struct {
	Task
	Status  string `json:"status"`
	Attempt int    `json:"attempt"`
	Result  string `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	// SkipReason and SkipDependency say why a skipped task did not run:
	// the reason and dependency of its solver.skipped (dependency_failed
	// and the task that did not complete, or synthesized and no
	// dependency). Both are empty unless the task is skipped.
	SkipReason     string `json:"skip_reason,omitempty"`
	SkipDependency string `json:"skip_dependency,omitempty"`
	// Todo is the task's todo list, nil until it has one.
	Todo *TodoList `json:"todo"`
}

// State is a session's client-visible state: what the sequenced events
// applied in order amount to. The server keeps one per session to answer a
// resync with a snapshot; a client can keep one to render. The zero value is
// an idle session with no run. A State is not safe for concurrent use.
type State struct {
	Phase string // "" reads as idle
	Run   *RunState
	// History is the session's finished runs, oldest first: an entry is
	// added by each run's last event (agent.final_answer, plan.cancelled
	// or pipeline.cancelled), from what that event carries.
	History []HistoryEntry
	// HistoryLimit bounds History: past it the oldest entries go. 0: no
	// limit. The server sets it from its option, a client from
	// system.connected's history_limit.
	HistoryLimit int
}

// Snapshot returns the state as system.state_snapshot metadata. It shares
// memory with s: encode it before s changes again.
func (s *State) Snapshot(seq uint64, checksum string) Snapshot {
	phase := s.Phase
	if phase == "" {
		phase = PhaseIdle
	}
	history := s.History
	if history == nil {
		history = []HistoryEntry{}
	}
	return Snapshot{Seq: seq, StateChecksum: checksum, Phase: phase, Run: s.Run, History: history}
}

// Load replaces the state with a snapshot's, keeping HistoryLimit (and
// applying it: a snapshot from a server that kept more is cut).
func (s *State) Load(snap Snapshot) {
	s.Phase, s.Run = snap.Phase, snap.Run
	s.History = append([]HistoryEntry(nil), snap.History...)
	s.trimHistory()
}

// SetHistoryLimit sets HistoryLimit and drops the entries past it.
func (s *State) SetHistoryLimit(n int) {
	s.HistoryLimit = n
	s.trimHistory()
}

// remember adds a finished run's entry, once per run.
func (s *State) remember(e HistoryEntry) {
	for _, h := range s.History {
		if h.RunID == e.RunID {
			return
		}
	}
	s.History = append(s.History, e)
	s.trimHistory()
}

func (s *State) trimHistory() {
	if n := len(s.History) - s.HistoryLimit; s.HistoryLimit > 0 && n > 0 {
		s.History = append(s.History[:0:0], s.History[n:]...)
	}
}

// BeginSolving records the tasks a run is about to solve: the plan's, the
// client's edit of it, or a user.solve_tasks list (which starts a run with
// no planning). Clients see the same transition on the run's first
// solver.start.
func (s *State) BeginSolving(runID, request string, tasks []Task) {
	s.BeginSolvingMode(runID, request, "", tasks)
}

// BeginSolvingMode is BeginSolving for a run of a mode: ModeChat for a
// chat run (whose first solver.start carries its task), else "".
func (s *State) BeginSolvingMode(runID, request, mode string, tasks []Task) {
	if s.Run == nil || s.Run.RunID != runID {
		s.Run = newRun(runID, request)
	}
	s.Run.Tasks = taskStates(tasks)
	s.Run.Mode = mode
	s.Run.PlanVersion = 1
	s.Run.PendingConfirm = dropConfirms(s.Run.PendingConfirm, func(c UserConfirm) bool { return c.Kind == ConfirmPlan })
	s.Phase = PhaseSolving
}

// Apply folds one sequenced event into the state. meta is the event's typed
// metadata (a value or pointer of this package's structs); events that do
// not change the client-visible state are ignored, and so are events of a
// run other than the current one.
func (s *State) Apply(event string, meta any) {
	switch m := deref(meta).(type) {
	case PlanStart:
		s.Run = newRun(m.RunID, m.Request)
		s.Phase = PhasePlanning
	case PlanCompleted:
		if r := s.run(m.RunID); r != nil {
			r.PlanSummary = m.PlanSummary
			r.Tasks = taskStates(m.Tasks)
			r.PlanVersion = 1
		}
	case PlanDecision:
		if r := s.run(m.RunID); r != nil {
			r.LastDecision = &m
		}
	case PlanUpdated:
		// The whole list after the adjustment: tasks the run had keep
		// where they stand, new ones are pending. The adjustment's
		// confirmation, if it had one, is settled.
		if r := s.run(m.RunID); r != nil {
			had := make(map[string]TaskState, len(r.Tasks))
			for _, t := range r.Tasks {
				had[t.ID] = t
			}
			tasks := make([]TaskState, len(m.Tasks))
			for i, t := range m.Tasks {
				if old, ok := had[t.ID]; ok {
					tasks[i] = old
				} else {
					tasks[i] = TaskState{Task: t, Status: TaskPending}
				}
			}
			r.Tasks, r.PlanVersion = tasks, m.Version
			r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool { return c.Kind == ConfirmAdjust })
		}
	case UserConfirm:
		if r := s.run(m.RunID); r != nil {
			r.PendingConfirm = append(r.PendingConfirm, m)
			if m.Kind == ConfirmPlan {
				s.Phase = PhaseAwaitingConfirm
			}
		}
	case ConfirmSettled:
		// An answer another device gave: a plan confirmed with edits is
		// the edited plan, an input_request's text is recorded. The
		// device that answered has done both already (Answer).
		if r := s.run(m.RunID); r != nil {
			if m.Kind == ConfirmPlan && m.Confirmed != nil && *m.Confirmed && m.Tasks != nil {
				r.Tasks = taskStates(m.Tasks)
			}
			if m.Text != nil {
				s.Answer(m.StepID, *m.Text)
			} else {
				s.CloseConfirm(m.StepID)
			}
		}
	case PlanCancelled:
		s.end(m.RunID)
		s.remember(HistoryEntry{RunID: m.RunID, Request: m.Request, Status: StatusCancelled, EndedAt: m.EndedAt})
	case SolverStart:
		r := s.run(m.RunID)
		if r == nil {
			// A user.solve_tasks or chat run: its first event is a
			// solver.start; a chat run's names its one task.
			s.Run = newRun(m.RunID, "")
			r = s.Run
			r.PlanVersion = 1
		}
		if m.Task != nil && r.task(m.TaskID) == nil {
			r.Mode, r.Request = m.Mode, m.Task.Description
			r.Tasks = append(r.Tasks, TaskState{Task: *m.Task, Status: TaskPending})
		}
		if s.Phase != PhaseSolving {
			s.Phase = PhaseSolving
			r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool { return c.Kind == ConfirmPlan })
		}
		r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool { return c.TaskID == m.TaskID })
		if t := r.task(m.TaskID); t != nil {
			t.Status, t.Attempt, t.Error = TaskRunning, m.Attempt, ""
		}
	case SolverCompleted:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.Status, t.Attempt, t.Result, t.Error = TaskCompleted, m.Attempt, m.Result, ""
		}
	case SolverCancelled:
		if r := s.run(m.RunID); r != nil {
			r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool { return c.TaskID == m.TaskID })
			if t := r.task(m.TaskID); t != nil {
				t.Status = TaskCancelled
			}
		}
	case ToolResult:
		// A task asks one thing at a time: once a tool has answered, the
		// task's tool_confirm or input_request is settled.
		if r := s.run(m.RunID); r != nil {
			r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool {
				return c.TaskID == m.TaskID && (c.Kind == ConfirmTool || c.Kind == ConfirmInput)
			})
		}
	case SolverSkipped:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.Status, t.SkipReason, t.SkipDependency = TaskSkipped, m.Reason, m.Dependency
		}
	case SolverRestarted:
		// The task waits to run again: its result, error and skip reason
		// are gone, its attempt count and todo list carry on, and a
		// question it had open is withdrawn.
		if r := s.run(m.RunID); r != nil {
			r.PendingConfirm = dropConfirms(r.PendingConfirm, func(c UserConfirm) bool { return c.TaskID == m.TaskID })
			if t := r.task(m.TaskID); t != nil {
				t.Status, t.Result, t.Error = TaskPending, "", ""
				t.SkipReason, t.SkipDependency = "", ""
			}
		}
	case ExecutionError:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.Status, t.Attempt, t.Error = TaskFailed, m.Attempt, m.Message
		}
	case RecoveryStarted:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.Status = TaskRetrying
		}
	case RecoveryFailed:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.Status, t.Error = TaskFailed, m.LastError
		}
	case AggregateStart:
		if s.run(m.RunID) != nil {
			s.Phase = PhaseAggregating
		}
	case FinalAnswer:
		if r := s.run(m.RunID); r != nil {
			answer := m.Content
			r.FinalAnswer = &answer
			s.end(m.RunID)
		}
		s.remember(HistoryEntry{RunID: m.RunID, Request: m.Request, Answer: m.Content, Status: m.Status, EndedAt: m.EndedAt})
	case PipelineCancelled:
		s.end(m.RunID)
		s.remember(HistoryEntry{RunID: m.RunID, Request: m.Request, Status: StatusCancelled, EndedAt: m.EndedAt})
	case TodoUpdated:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.applyTodo(m.Version, func(l *TodoList) { l.Items = append(l.Items[:0:0], m.Items...) })
		}
	case TodoItemProgress:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.applyTodo(m.Version, func(l *TodoList) {
				for i := range l.Items {
					if l.Items[i].ID == m.Item.ID {
						l.Items[i] = m.Item
						return
					}
				}
				l.Items = append(l.Items, m.Item)
			})
		}
	case TodoCompleted:
		if t := s.task(m.RunID, m.TaskID); t != nil {
			t.applyTodo(m.Version, func(l *TodoList) {
				for i := range l.Items {
					l.Items[i].Status = TodoStatusCompleted
				}
			})
		}
	}
}

// ApplyJSON decodes an event's metadata by its type and applies it.
func (s *State) ApplyJSON(event string, metadata json.RawMessage) error {
	meta, err := DecodeMetadata(event, metadata)
	if err != nil {
		return err
	}
	s.Apply(event, meta)
	return nil
}

// end closes the current run: the session goes idle, open confirmations are
// gone, and tasks that never finished count as cancelled.
func (s *State) end(runID string) {
	r := s.run(runID)
	if r == nil {
		return
	}
	s.Phase = PhaseIdle
	r.PendingConfirm = r.PendingConfirm[:0]
	for i := range r.Tasks {
		switch r.Tasks[i].Status {
		case TaskPending, TaskRunning, TaskRetrying:
			r.Tasks[i].Status = TaskCancelled
		}
	}
}

func (s *State) run(runID string) *RunState {
	if s.Run == nil || s.Run.RunID != runID {
		return nil
	}
	return s.Run
}

func (s *State) task(runID, taskID string) *TaskState {
	if r := s.run(runID); r != nil {
		return r.task(taskID)
	}
	return nil
}

func (r *RunState) task(id string) *TaskState {
	for i := range r.Tasks {
		if r.Tasks[i].ID == id {
			return &r.Tasks[i]
		}
	}
	return nil
}

func newRun(runID, request string) *RunState {
	return &RunState{RunID: runID, Request: request, Tasks: []TaskState{}, PendingConfirm: []UserConfirm{}, Answers: []AnswerState{}}
}

func taskStates(tasks []Task) []TaskState {
	out := make([]TaskState, len(tasks))
	for i, t := range tasks {
		out[i] = TaskState{Task: t, Status: TaskPending}
	}
	return out
}

func dropConfirms(cs []UserConfirm, drop func(UserConfirm) bool) []UserConfirm {
	out := cs[:0]
	for _, c := range cs {
		if !drop(c) {
			out = append(out, c)
		}
	}
	return out
}

func deref(v any) any {
	switch m := v.(type) {
	case *PlanStart:
		return *m
	case *PlanCompleted:
		return *m
	case *UserConfirm:
		return *m
	case *ConfirmSettled:
		return *m
	case *PlanCancelled:
		return *m
	case *PlanDecision:
		return *m
	case *PlanUpdated:
		return *m
	case *SolverStart:
		return *m
	case *SolverCompleted:
		return *m
	case *SolverCancelled:
		return *m
	case *SolverSkipped:
		return *m
	case *SolverRestarted:
		return *m
	case *ExecutionError:
		return *m
	case *RecoveryStarted:
		return *m
	case *RecoveryFailed:
		return *m
	case *AggregateStart:
		return *m
	case *FinalAnswer:
		return *m
	case *PipelineCancelled:
		return *m
	case *TodoUpdated:
		return *m
	case *TodoItemProgress:
		return *m
	case *TodoCompleted:
		return *m
	}
	return v
}

// DecodeMetadata decodes the metadata of a server event into its typed
// struct (returned by pointer). Unknown events decode to map[string]any.
func DecodeMetadata(event string, raw json.RawMessage) (any, error) {
	var v any
	switch event {
	case EventConnected:
		v = new(Connected)
	case EventError:
		v = new(Error)
	case EventStateSnapshot:
		v = new(Snapshot)
	case EventPlanStart:
		v = new(PlanStart)
	case EventPlanStepCompleted:
		v = new(PlanStep)
	case EventPlanCompleted:
		v = new(PlanCompleted)
	case EventPlanCancelled:
		v = new(PlanCancelled)
	case EventPlanDecision:
		v = new(PlanDecision)
	case EventPlanUpdated:
		v = new(PlanUpdated)
	case EventUserConfirm:
		v = new(UserConfirm)
	case EventConfirmSettled:
		v = new(ConfirmSettled)
	case EventFinalAnswer:
		v = new(FinalAnswer)
	case EventSolverStart:
		v = new(SolverStart)
	case EventSolverProgress:
		v = new(SolverProgress)
	case EventSolverCompleted:
		v = new(SolverCompleted)
	case EventSolverCancelled:
		v = new(SolverCancelled)
	case EventSolverSkipped:
		v = new(SolverSkipped)
	case EventSolverRestarted:
		v = new(SolverRestarted)
	case EventExecutionError:
		v = new(ExecutionError)
	case EventRecoveryStarted:
		v = new(RecoveryStarted)
	case EventRecoverySuccess:
		v = new(RecoverySuccess)
	case EventRecoveryFailed:
		v = new(RecoveryFailed)
	case EventAggregateStart:
		v = new(AggregateStart)
	case EventAggregateProgress:
		v = new(AggregateProgress)
	case EventAggregateCompleted:
		v = new(AggregateCompleted)
	case EventPipelineCompleted:
		v = new(PipelineCompleted)
	case EventPipelineCancelled:
		v = new(PipelineCancelled)
	case EventToolCall:
		v = new(ToolCall)
	case EventToolResult:
		v = new(ToolResult)
	case EventTodoUpdated:
		v = new(TodoUpdated)
	case EventTodoItemProgress:
		v = new(TodoItemProgress)
	case EventTodoCompleted:
		v = new(TodoCompleted)
	default:
		v = new(map[string]any)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("decode %s metadata: %w", event, err)
	}
	return v, nil
}

// Answer records the user's answer to an open input_request and closes
// it; for any other confirmation it is CloseConfirm. No event carries the
// answer: the server calls it when the answer arrives, and a client that
// keeps its own state calls it when it sends one.
func (s *State) Answer(stepID, text string) {
	if s.Run == nil {
		return
	}
	for _, c := range s.Run.PendingConfirm {
		if c.StepID == stepID && c.Kind == ConfirmInput {
			s.Run.Answers = append(s.Run.Answers, AnswerState{StepID: stepID, TaskID: c.TaskID, Question: c.Question, Text: text})
		}
	}
	s.CloseConfirm(stepID)
}

// CloseConfirm removes an open confirmation from pending_confirm once it is
// answered, expired or cancelled. The server calls it when that happens; a
// client can when it answers, or when the confirmation's expires_at passes.
func (s *State) CloseConfirm(stepID string) {
	if s.Run != nil {
		s.Run.PendingConfirm = dropConfirms(s.Run.PendingConfirm, func(c UserConfirm) bool { return c.StepID == stepID })
	}
}
