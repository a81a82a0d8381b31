package orchestrator

import (
	"context"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// Observer is told what the server does, for metrics; package metrics
// implements it with Prometheus, and the orchestrator knows nothing of
// that. Methods may be called concurrently, and must be cheap and never
// block: Event is called for every sequenced event with the session's
// lock held. Labels passed are from small fixed sets (the constants below,
// wsproto's event names, failure's error types, run outcomes).
type Observer interface {
	// ConnOpened: a WebSocket connection was accepted. ConnClosed: it
	// ended, as end says (one of the ConnEnd constants).
	ConnOpened()
	ConnClosed(end string)
	// SessionOpened: a session now lives here, new (a connection's fresh
	// session) or taken over from another server of the cluster.
	// SessionClosed: it was freed (expired, dropped for the one a
	// connection resumed, lost, or the server closed).
	SessionOpened(takenOver bool)
	SessionClosed()
	// Event: a sequenced event was appended to a session's ring.
	Event(event string)
	// Resumed: a user.reconnect_with_state was answered (ResumeReplay,
	// ResumeResync, ResumeRejected, ResumeBusy or ResumeFailed); replayed is the
	// number of events replayed.
	Resumed(outcome string, replayed int)
	// SendOverflow: a connection's send queue overflowed and it is being
	// closed with 1013.
	SendOverflow()
	// RunStarted: a run started (RunPlan, RunTasks or RunChat) or was taken over
	// (RunTakenOver). RunEnded: it ended with the outcome its "run ended"
	// log line names, and for a cancelled run its reason ("" otherwise).
	RunStarted(kind string)
	RunEnded(outcome, reason string)
	// Failure: an execution of a stage (StagePlan, or StageTask for a
	// task) failed with a failure.Classify error type. Retry: it is
	// retried after such a failure.
	Failure(stage, errorType string)
	Retry(stage, errorType string)
	// StageDone: a run's stage (StagePlan, StageSolve, StageAggregate)
	// took d, whatever its end.
	StageDone(stage string, d time.Duration)
	// ConfirmWaited: a confirmation of kind (wsproto.ConfirmPlan, …) was
	// waited for d, until its answer, its expiry or the run's end.
	ConfirmWaited(kind string, d time.Duration)
	// ModelCall: a call of the model (CallPlan, CallTurn, CallDecide,
	// CallAggregate) took d and ended with result — ResultOK,
	// ResultCancelled or the failure's error type — and usage tokens.
	ModelCall(call, result string, d time.Duration, usage wsproto.Usage)
}

// How a connection ended (Observer.ConnClosed).
const (
	EndClientClosed  = "client_closed"   // the client sent a close frame
	EndLost          = "lost"            // the connection dropped without one
	EndFrameTooLarge = "frame_too_large" // 1009
	EndNoPong        = "no_pong"         // the server dropped it: no pong in time
	EndWriteFailed   = "write_failed"    // the server dropped it: a write failed
	EndTooSlow       = "too_slow"        // 1013: its send queue overflowed
	EndReplaced      = "replaced"        // 4000: its session was resumed elsewhere
	EndTokenExpired  = "token_expired"   // 4001: the credential it was opened with expired
	EndRestart       = "server_restart"  // 1012: drain, shutdown, or the session moved
	EndServerOther   = "server_other"    // the server closed it with another code
)

// Outcomes of a resume (Observer.Resumed).
const (
	ResumeReplay   = "replay"
	ResumeResync   = "resync"
	ResumeRejected = "rejected" // resume_rejected
	ResumeFailed   = "failed"   // any other error: the store did not answer, not the first frame
	ResumeBusy     = "busy"     // no takeover slot (Options.MaxTakeovers): resume again after its hint
)

// Kinds of run (Observer.RunStarted).
const (
	RunPlan      = "plan"
	RunTasks     = "tasks"
	RunChat      = "chat"
	RunTakenOver = "taken_over"
)

// OutcomeHandedOver is the outcome (Observer.RunEnded, the "run ended"
// log line) of a run this server stopped when it closed with a Cluster:
// the run goes on on another server. The other outcomes are a finished
// run's status (succeeded, partial, failed), plan_failed, rejected,
// confirm_timeout and cancelled.
const OutcomeHandedOver = "handed_over"

// ReasonUserAbsent is the reason (Observer.RunEnded, the "run ended" log
// line) of a run cancelled by a drain without a Cluster because it waited
// on its user while no connection was attached (Server.Drain). The other
// reasons of a cancelled run are user_cancel, user_abort, session_expired,
// server_closed and session_lost.
const ReasonUserAbsent = "user_absent"

// Stages (Observer.Failure, Retry, StageDone).
const (
	StagePlan      = "plan"
	StageTask      = "task"
	StageSolve     = "solve"
	StageAggregate = "aggregate"
)

// Model calls and their results (Observer.ModelCall).
const (
	CallPlan      = "plan"
	CallTurn      = "turn" // one round of a task's agent loop
	CallDecide    = "decide"
	CallAggregate = "aggregate"

	ResultOK        = "ok"
	ResultCancelled = "cancelled"
)

// callResult is a model call's result for Observer.ModelCall.
func callResult(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ResultOK
	case ctx.Err() != nil:
		return ResultCancelled
	}
	return failure.Classify(err).Type
}

// nopObserver observes nothing: the Observer of a server without one.
type nopObserver struct{}

func (nopObserver) ConnOpened()                                            {}
func (nopObserver) ConnClosed(string)                                      {}
func (nopObserver) SessionOpened(bool)                                     {}
func (nopObserver) SessionClosed()                                         {}
func (nopObserver) Event(string)                                           {}
func (nopObserver) Resumed(string, int)                                    {}
func (nopObserver) SendOverflow()                                          {}
func (nopObserver) RunStarted(string)                                      {}
func (nopObserver) RunEnded(string, string)                                {}
func (nopObserver) Failure(string, string)                                 {}
func (nopObserver) Retry(string, string)                                   {}
func (nopObserver) StageDone(string, time.Duration)                        {}
func (nopObserver) ConfirmWaited(string, time.Duration)                    {}
func (nopObserver) ModelCall(string, string, time.Duration, wsproto.Usage) {}

// observedModel times each turn of a solver model for the Observer.
type observedModel struct {
	solver.Model
	obs Observer
}

func (m observedModel) Turn(ctx context.Context, t *solver.Turn, progress func(float64, string)) (solver.Reply, error) {
	began := time.Now()
	reply, err := m.Model.Turn(ctx, t, progress)
	m.obs.ModelCall(CallTurn, callResult(ctx, err), time.Since(began), reply.Usage)
	return reply, err
}

// CheckTask keeps the model's solver.TaskChecker, which the solver looks
// for on the model it is given.
func (m observedModel) CheckTask(t wsproto.Task) []string {
	if c, ok := m.Model.(solver.TaskChecker); ok {
		return c.CheckTask(t)
	}
	return nil
}

// RingFill calls fn with how many events each session's ring holds and its
// capacity, for rings that can tell (buffer.Sizer). It takes no session's
// lock: metrics sample it while the pipeline appends.
func (s *Server) RingFill(fn func(held, capacity int)) {
	s.mu.Lock()
	rings := make([]buffer.Ring, 0, len(s.sessions))
	for _, sess := range s.sessions {
		rings = append(rings, sess.ring)
	}
	s.mu.Unlock()
	for _, r := range rings {
		if sz, ok := r.(buffer.Sizer); ok {
			fn(sz.Len(), r.Cap())
		}
	}
}
