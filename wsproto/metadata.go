package wsproto

import (
	"encoding/json"
	"time"
)

// Task is one unit of work of a plan: {id, title, description, depends_on}.
type Task struct {
	ID          string   `json:"id"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	DependsOn   []string `json:"depends_on"`
}

// Connected is the metadata of system.connected.
type Connected struct {
	SessionID      string `json:"session_id"`
	ResumeToken    string `json:"resume_token"`
	Resumed        bool   `json:"resumed"`
	LastSeq        uint64 `json:"last_seq"`
	StateChecksum  string `json:"state_checksum"`
	BufferCapacity int    `json:"buffer_capacity"`
	// HistoryLimit is how many finished runs the session keeps in its
	// history (§6): a client keeping its own state drops the oldest
	// entries past it, as the server does. 0: no limit.
	HistoryLimit int `json:"history_limit"`
	// Replayed is set on a resume only: the number of events replayed.
	Replayed *int `json:"replayed,omitempty"`
	Resync   bool `json:"resync,omitempty"`
	// FollowToken lets other devices follow the session (§3.6): on a
	// fresh session's system.connected, and on the answer to a follow.
	FollowToken string `json:"follow_token,omitempty"`
	// Followers is how many connections the session has attached, this
	// one included, on the answer to a follow.
	Followers int `json:"followers,omitempty"`
}

// Error is the metadata of system.error.
type Error struct {
	Code    string        `json:"code"`
	Message string        `json:"message"`
	RefType string        `json:"ref_type,omitempty"`
	Details []TaskProblem `json:"details,omitempty"`
	// RetryAfterMS is how long to wait before sending the frame again,
	// in ms, when the server can say (Baton: a resume answered busy
	// while it takes over many sessions at once); 0 when it cannot.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Snapshot is the metadata of system.state_snapshot: the whole session state
// as of Seq.
type Snapshot struct {
	Seq           uint64    `json:"seq"`
	StateChecksum string    `json:"state_checksum"`
	Phase         string    `json:"phase"`
	Run           *RunState `json:"run"`
	// History is the session's finished runs, oldest first (§6); [] when
	// none.
	History []HistoryEntry `json:"history"`
}

// PlanStart is the metadata of plan.start. Feedback is the user's, when
// a user.replan sent the planner back.
type PlanStart struct {
	RunID    string `json:"run_id"`
	Request  string `json:"request"`
	Feedback string `json:"feedback,omitempty"`
}

// PlanStep is the metadata of plan.step_completed.
type PlanStep struct {
	RunID       string `json:"run_id"`
	Step        int    `json:"step"`
	Description string `json:"description"`
}

// PlanCompleted is the metadata of plan.completed.
type PlanCompleted struct {
	RunID       string `json:"run_id"`
	PlanSummary string `json:"plan_summary"`
	Tasks       []Task `json:"tasks"`
	// Truncated and OriginalBytes are set when the text was longer than
	// the server keeps of a model's text (--max-result-bytes): it is cut,
	// ending in CutMarker, and OriginalBytes is its length before. A frame
	// cut to fit its size cap (FitFrame) sets them too.
	Truncated     bool `json:"truncated,omitempty"`
	OriginalBytes int  `json:"original_bytes,omitempty"`
}

// PlanDecision is the metadata of plan.decision: what the decide step of
// an adaptive run chose after a task completed. Details are the problems
// of an adjustment the model proposed and Baton refused (the action is
// then continue).
type PlanDecision struct {
	RunID     string        `json:"run_id"`
	AfterTask string        `json:"after_task"`
	Action    string        `json:"action"`
	Reason    string        `json:"reason"`
	Details   []TaskProblem `json:"details,omitempty"`
}

// PlanUpdated is the metadata of plan.updated: an adjustment applied.
// Tasks is the whole list after it; Version counts from 1, the confirmed
// plan.
type PlanUpdated struct {
	RunID   string   `json:"run_id"`
	Version int      `json:"version"`
	Added   []Task   `json:"added"`
	Removed []string `json:"removed"`
	Tasks   []Task   `json:"tasks"`
	Reason  string   `json:"reason"`
}

// PlanCancelled is the metadata of plan.cancelled.
type PlanCancelled struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
	Error  string `json:"error,omitempty"`
	// Request and EndedAt make the run's history entry (§6), as in
	// FinalAnswer.
	Request string    `json:"request"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// UserConfirm is the metadata of agent.user_confirm. Kind plan_confirm
// carries PlanSummary and Tasks; plan_adjust Added, Removed and Tasks (the
// whole list after the change); task_failed TaskID and Options;
// tool_confirm TaskID, Tool and Arguments; input_request Question,
// Context and (from a task's ask_user) TaskID.
type UserConfirm struct {
	RunID       string          `json:"run_id"`
	StepID      string          `json:"step_id"`
	Kind        string          `json:"kind"`
	PlanSummary string          `json:"plan_summary,omitempty"`
	Added       []Task          `json:"added,omitzero"`   // [] when empty, for plan_adjust
	Removed     []string        `json:"removed,omitzero"` // likewise
	Tasks       []Task          `json:"tasks,omitempty"`
	TaskID      string          `json:"task_id,omitempty"`
	Options     []string        `json:"options,omitempty"`
	Tool        string          `json:"tool,omitempty"`
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Question    string          `json:"question,omitempty"`
	Context     string          `json:"context,omitempty"`
	ExpiresAt   time.Time       `json:"expires_at"`
}

// ConfirmSettled is the metadata of agent.confirm_settled (§3.6): the
// answer a confirmation was settled with, as applied — so that the devices
// following a session that did not answer learn an edited plan or an
// input_request's text. Only the answer's fields of the confirmation's
// kind are set.
type ConfirmSettled struct {
	RunID     string  `json:"run_id"`
	StepID    string  `json:"step_id"`
	Kind      string  `json:"kind"`
	TaskID    string  `json:"task_id,omitempty"`
	Confirmed *bool   `json:"confirmed,omitempty"`
	Tasks     []Task  `json:"tasks,omitempty"`
	Action    string  `json:"action,omitempty"`
	Approved  *bool   `json:"approved,omitempty"`
	Text      *string `json:"text,omitempty"`
}

// SolverStart is the metadata of solver.start.
type SolverStart struct {
	RunID   string `json:"run_id"`
	TaskID  string `json:"task_id"`
	Attempt int    `json:"attempt"`
	// Mode and Task are set in a chat run (ModeChat) only: no planning
	// event names its one task, so every solver.start carries it, and a
	// client that sees the run first here can show it whole.
	Mode string `json:"mode,omitempty"`
	Task *Task  `json:"task,omitempty"`
}

// SolverProgress is the metadata of solver.progress.
type SolverProgress struct {
	RunID    string  `json:"run_id"`
	TaskID   string  `json:"task_id"`
	Attempt  int     `json:"attempt"`
	Progress float64 `json:"progress"`
	Message  string  `json:"message"`
}

// Usage counts a model's tokens. The simulated model reports zeros.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.PromptTokens + v.PromptTokens, u.CompletionTokens + v.CompletionTokens, u.TotalTokens + v.TotalTokens}
}

// SolverCompleted is the metadata of solver.completed. Usage is the
// tokens of the execution that completed.
type SolverCompleted struct {
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id"`
	Attempt    int    `json:"attempt"`
	Result     string `json:"result"`
	DurationMS int64  `json:"duration_ms"`
	Usage      Usage  `json:"usage"`
	// Truncated and OriginalBytes are set when the text was longer than
	// the server keeps of a model's text (--max-result-bytes): it is cut,
	// ending in CutMarker, and OriginalBytes is its length before. A frame
	// cut to fit its size cap (FitFrame) sets them too.
	Truncated     bool `json:"truncated,omitempty"`
	OriginalBytes int  `json:"original_bytes,omitempty"`
}

// SolverCancelled is the metadata of solver.cancelled.
type SolverCancelled struct {
	RunID  string `json:"run_id"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// SolverSkipped is the metadata of solver.skipped. Dependency names the
// task that failed for reason dependency_failed; it is absent for reason
// synthesized.
type SolverSkipped struct {
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id"`
	Reason     string `json:"reason"`
	Dependency string `json:"dependency,omitempty"`
}

// SolverRestarted is the metadata of solver.restarted: a finished task
// will run again (reason user_restart).
type SolverRestarted struct {
	RunID  string `json:"run_id"`
	TaskID string `json:"task_id"`
	Reason string `json:"reason"`
}

// ExecutionError is the metadata of error.execution. TaskID is empty and
// Stage is "plan" for a planning failure.
type ExecutionError struct {
	RunID           string `json:"run_id"`
	Stage           string `json:"stage,omitempty"`
	TaskID          string `json:"task_id,omitempty"`
	Attempt         int    `json:"attempt"`
	ErrorType       string `json:"error_type"`
	Message         string `json:"message"`
	Recoverable     bool   `json:"recoverable"`
	SuggestedAction string `json:"suggested_action"`
}

// RecoveryStarted is the metadata of error.recovery_started. Attempt counts
// retries, 1..MaxAttempts: the contract names the retry budget
// max_attempts, and a budget of MaxAttempts allows MaxAttempts+1
// executions.
type RecoveryStarted struct {
	RunID            string `json:"run_id"`
	Stage            string `json:"stage,omitempty"`
	TaskID           string `json:"task_id,omitempty"`
	RecoveryStrategy string `json:"recovery_strategy"`
	Attempt          int    `json:"attempt"`
	MaxAttempts      int    `json:"max_attempts"`
	DelayMS          int64  `json:"delay_ms"`
}

// RecoverySuccess is the metadata of error.recovery_success.
type RecoverySuccess struct {
	RunID   string `json:"run_id"`
	Stage   string `json:"stage,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
	Attempt int    `json:"attempt"`
}

// RecoveryFailed is the metadata of error.recovery_failed.
type RecoveryFailed struct {
	RunID     string `json:"run_id"`
	Stage     string `json:"stage,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error"`
}

// AggregateStart is the metadata of aggregate.start.
type AggregateStart struct {
	RunID     string `json:"run_id"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Skipped   int    `json:"skipped"`
	Cancelled int    `json:"cancelled"`
}

// AggregateProgress is the metadata of aggregate.progress.
type AggregateProgress struct {
	RunID   string `json:"run_id"`
	Message string `json:"message"`
}

// AggregateCompleted is the metadata of aggregate.completed.
type AggregateCompleted struct {
	RunID   string `json:"run_id"`
	Summary string `json:"summary"`
	// Truncated and OriginalBytes are set when the text was longer than
	// the server keeps of a model's text (--max-result-bytes): it is cut,
	// ending in CutMarker, and OriginalBytes is its length before. A frame
	// cut to fit its size cap (FitFrame) sets them too.
	Truncated     bool `json:"truncated,omitempty"`
	OriginalBytes int  `json:"original_bytes,omitempty"`
}

// PipelineCompleted is the metadata of pipeline.completed.
type PipelineCompleted struct {
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Skipped    int    `json:"skipped"`
	Cancelled  int    `json:"cancelled"`
	DurationMS int64  `json:"duration_ms"`
	// Usage is the run's total: planning, every completed execution and
	// aggregation.
	Usage Usage `json:"usage"`
}

// PipelineCancelled is the metadata of pipeline.cancelled.
type PipelineCancelled struct {
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
	// Request and EndedAt make the run's history entry (§6), as in
	// FinalAnswer.
	Request string    `json:"request"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// FinalAnswer is the metadata of agent.final_answer.
type FinalAnswer struct {
	RunID   string `json:"run_id"`
	Content string `json:"content"`
	// Truncated and OriginalBytes are set when the text was longer than
	// the server keeps of a model's text (--max-result-bytes): it is cut,
	// ending in CutMarker, and OriginalBytes is its length before. A frame
	// cut to fit its size cap (FitFrame) sets them too.
	Truncated     bool `json:"truncated,omitempty"`
	OriginalBytes int  `json:"original_bytes,omitempty"`
	// Request, Status and EndedAt, with Content, make the run's history
	// entry (§6), so a client that saw the run end keeps the same history
	// as the snapshot's: the run's request (a user.solve_tasks run's task
	// titles), pipeline.completed's status, and when the run ended.
	Request string    `json:"request"`
	Status  string    `json:"status"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// HistoryEntry is one finished run of a session's conversation (§6): what
// was asked, what was answered ("" for a cancelled run), how the run ended
// (a pipeline.completed status, or "cancelled") and when.
type HistoryEntry struct {
	RunID   string    `json:"run_id"`
	Request string    `json:"request"`
	Answer  string    `json:"answer"`
	Status  string    `json:"status"`
	EndedAt time.Time `json:"ended_at"`
}
