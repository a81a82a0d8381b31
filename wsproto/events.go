package wsproto

// Server → client events. Sequenced events are buffered, replayable and
// ackable; unsequenced ones concern one connection only.
const (
	// Unsequenced.
	EventConnected     = "system.connected"
	EventError         = "system.error"
	EventStateSnapshot = "system.state_snapshot"

	// Planning.
	EventPlanStart         = "plan.start"
	EventPlanStepCompleted = "plan.step_completed"
	EventPlanCompleted     = "plan.completed"
	EventPlanCancelled     = "plan.cancelled"
	// Adaptive runs (§11).
	EventPlanDecision = "plan.decision"
	EventPlanUpdated  = "plan.updated"

	// Agent.
	EventUserConfirm = "agent.user_confirm"
	EventFinalAnswer = "agent.final_answer"
	// EventConfirmSettled tells every device of a followed session (§3.6)
	// how a confirmation was answered.
	EventConfirmSettled = "agent.confirm_settled"

	// Solving.
	EventSolverStart     = "solver.start"
	EventSolverProgress  = "solver.progress"
	EventSolverCompleted = "solver.completed"
	EventSolverCancelled = "solver.cancelled"
	EventSolverSkipped   = "solver.skipped"
	EventSolverRestarted = "solver.restarted"

	// Failure and recovery.
	EventExecutionError  = "error.execution"
	EventRecoveryStarted = "error.recovery_started"
	EventRecoverySuccess = "error.recovery_success"
	EventRecoveryFailed  = "error.recovery_failed"

	// Aggregation and the end of a run.
	EventAggregateStart     = "aggregate.start"
	EventAggregateProgress  = "aggregate.progress"
	EventAggregateCompleted = "aggregate.completed"
	EventPipelineCompleted  = "pipeline.completed"
	EventPipelineCancelled  = "pipeline.cancelled"
)

// Client → server events.
const (
	EventUserMessage    = "user.message"
	EventUserSolve      = "user.solve_tasks"
	EventUserResponse   = "user.response"
	EventUserCancel     = "user.cancel"
	EventUserCancelTask = "user.cancel_task"
	EventUserRestart    = "user.restart_task"
	EventUserReplan     = "user.replan"
	EventUserAck        = "user.ack"
	EventUserReconnect  = "user.reconnect_with_state"
)

// system.error codes (§7).
const (
	CodeInvalidJSON    = "invalid_json"
	CodeInvalidMessage = "invalid_message"
	CodeUnknownType    = "unknown_type"
	CodeBusy           = "busy"
	CodeInvalidTasks   = "invalid_tasks"
	CodeStepIDMismatch = "step_id_mismatch"
	CodeNoActiveRun    = "no_active_run"
	CodeUnknownTask    = "unknown_task"
	CodeInvalidAck     = "invalid_ack"
	CodeInvalidState   = "invalid_state"
	CodeResumeRejected = "resume_rejected"
	CodeRateLimited    = "rate_limited"
	CodeInternal       = "internal"
	CodeFollowLimit    = "follow_limit"
)

// WebSocket close codes the server uses beyond RFC 6455's (§8).
const (
	CloseInvalidUTF8     = 1007
	CloseRateLimited     = 1008 // policy violation: frames over the rate limit, sustained
	CloseTooBig          = 1009
	CloseServiceRestart  = 1012
	CloseTryAgainLater   = 1013 // the client's send queue overflowed
	CloseSessionReplaced = 4000
	CloseTokenExpired    = 4001 // the credential the connection was opened with expired
	// CloseTooManySessions: the connection came beyond a session cap and
	// its first frame did not resume a session (the 429 of sessions).
	CloseTooManySessions = 4029
)

// Phases of a session (§6).
const (
	PhaseIdle            = "idle"
	PhasePlanning        = "planning"
	PhaseAwaitingConfirm = "awaiting_confirm"
	PhaseSolving         = "solving"
	PhaseAggregating     = "aggregating"
)

// Task statuses (§6).
const (
	TaskPending   = "pending"
	TaskRunning   = "running"
	TaskRetrying  = "retrying"
	TaskCompleted = "completed"
	TaskFailed    = "failed"
	TaskSkipped   = "skipped"
	TaskCancelled = "cancelled"
)

// Confirmation kinds of agent.user_confirm.
const (
	ConfirmPlan       = "plan_confirm"
	ConfirmTaskFailed = "task_failed"
	// ConfirmAdjust asks the user to approve an adjustment of the plan
	// (§11); answered {confirmed, tasks?} like ConfirmPlan.
	ConfirmAdjust = "plan_adjust"
)

// Actions of plan.decision (§11).
const (
	ActionContinue     = "continue"
	ActionAdjustPlan   = "adjust_plan"
	ActionRequestInput = "request_input"
	ActionSynthesize   = "synthesize"
)

// Reasons carried by *.cancelled and solver.skipped events.
const (
	ReasonUserReject        = "user_reject"
	ReasonConfirmTimeout    = "confirm_timeout"
	ReasonPlanFailed        = "plan_failed"
	ReasonUserCancel        = "user_cancel"
	ReasonUserAbort         = "user_abort"
	ReasonUserCancelTask    = "user_cancel_task"
	ReasonPipelineCancelled = "pipeline_cancelled"
	ReasonDependencyFailed  = "dependency_failed"
	ReasonUserRestart       = "user_restart"
	ReasonSynthesized       = "synthesized"
)

// Run statuses of pipeline.completed.
const (
	StatusSucceeded = "succeeded"
	StatusPartial   = "partial"
	StatusFailed    = "failed"
	// StatusCancelled is a history entry's status (§6) for a run ended by
	// plan.cancelled or pipeline.cancelled; pipeline.completed never has it.
	StatusCancelled = "cancelled"
)

// Sequenced reports whether events of this type are buffered and carry a seq.
func Sequenced(event string) bool {
	switch event {
	case EventConnected, EventError, EventStateSnapshot:
		return false
	}
	return true
}
