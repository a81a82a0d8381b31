package orchestrator

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/budget"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/solver"
)

// Options configure a Server. A nil *Options means all defaults; New never
// modifies the caller's struct.
type Options struct {
	// BufferSize is each session's ring capacity. Defaults to 1000.
	BufferSize int
	// SessionTTL is how long a session outlives its last connection.
	// Defaults to 5m.
	SessionTTL time.Duration
	// IdleSessionTTL is how long a session that has never sequenced an
	// event (no run was started in it) outlives its last connection:
	// resuming it gains nothing over a fresh session, so it is not kept
	// for SessionTTL. Defaults to 10s, and is never more than SessionTTL.
	IdleSessionTTL time.Duration
	// ConfirmTimeout is how long a confirmation waits for its answer.
	// Defaults to 5m.
	ConfirmTimeout time.Duration
	// MaxParallel is how many tasks of a run may execute at once. Defaults to 4.
	MaxParallel int
	// MaxRetries is how many retries follow a failed first execution of a
	// task or of the planning, per retry budget: the events' max_attempts
	// (the contract's name for it). Defaults to 3.
	MaxRetries int
	// RetryBase is the first backoff delay. Defaults to 1s.
	RetryBase time.Duration
	// TaskTimeout bounds one execution of a task; longer fails as a
	// timeout. Defaults to 2m.
	TaskTimeout time.Duration
	// MaxTasks is the longest task list accepted, also after an
	// adjustment. Defaults to 50.
	MaxTasks int
	// Adaptive makes every plan-mode run adaptive (§11), as
	// metadata.adaptive does for one. Defaults to false.
	Adaptive bool
	// DefaultMode is the mode of a user.message that names none:
	// wsproto.ModePlan or wsproto.ModeChat. Defaults to ModePlan.
	DefaultMode string
	// ReadLimit is the largest client frame in bytes; a larger one closes
	// the connection with 1009. Defaults to 65536.
	ReadLimit int64
	// AllowedOrigins are host patterns (path.Match syntax) accepted in the
	// Origin header besides the request's own host. Defaults to none.
	AllowedOrigins []string
	// PingInterval is how often the server pings. Defaults to 25s.
	PingInterval time.Duration
	// PongTimeout is how long a ping waits for its pong, and how long one
	// write may take. Defaults to 10s.
	PongTimeout time.Duration
	// WriteTimeout bounds the writing of one batch of queued frames (all
	// that were waiting when the writer woke). Defaults to PongTimeout.
	WriteTimeout time.Duration
	// SendQueue is the most frames a connection may have waiting to be
	// written before it is closed as too slow (1013). Defaults to
	// BufferSize + 64, so a full-ring replay always fits.
	SendQueue int
	// RateLimit is how many frames a second a connection may send, on
	// average; RateBurst how many at once. A frame over the limit is not
	// applied (rate_limited), and more than RateBurst refused within 10 s
	// close the connection with 1008. RateLimit defaults to 0: no limit;
	// RateBurst to twice RateLimit.
	RateLimit int
	RateBurst int
	// MaxConnsPerIP is the most connections one client address (an IPv6
	// /64: addrKey) may have open; more are refused with 429 before the
	// upgrade. Leave it 0 behind an edge.Listener that counts every TCP
	// connection (cmd/baton does): a WebSocket would count twice, and the
	// in-process connections of agui and myagent, which carry their
	// client's address, once more besides their client's own. Defaults
	// to 0: no limit.
	MaxConnsPerIP int
	// MaxSessions is the most sessions this server holds;
	// MaxSessionsPerSubject the most one authenticated subject holds on
	// it, and MaxSessionsPerIP the most the anonymous clients of one
	// address (an IPv6 /64) hold on it. A connection beyond one of them is
	// upgraded with a provisional session that is not counted and is good
	// only for resuming a session (sessioncap.go): any other first frame,
	// or a resume that fails, closes it with 4029. A resume is never
	// refused for a cap, nor is a session taken over from a failed
	// server. All default to 0: no limit.
	MaxSessions           int
	MaxSessionsPerSubject int
	MaxSessionsPerIP      int
	// MaxFollowers is the most connections one session may have attached
	// at once, on all servers (§3.6): a follow beyond it is refused with
	// follow_limit and changes nothing. Defaults to 0: no limit.
	MaxFollowers int
	// MaxFrameBytes caps the frames of sequenced events: a longer one has
	// its texts cut to fit (wsproto.FitFrame). Defaults to 0: no cap.
	MaxFrameBytes int
	// MaxResultBytes bounds each text a model returns — a task's result,
	// the plan's summary and task texts, the final answer and summary —
	// where it enters the run: a longer one is cut and marked truncated,
	// before the state, the ring or a checkpoint holds it. Defaults to
	// solver.DefaultMaxResultBytes (128 KiB).
	MaxResultBytes int
	// HistoryBudget bounds the conversation before a run that its models
	// see, in bytes of earlier requests and answers: the oldest runs are
	// left out first, never the current request (history.go). Defaults to
	// DefaultHistoryBudget (16 KiB); negative: models see no earlier run.
	HistoryBudget int
	// HistoryRuns is how many finished runs a session keeps in its
	// history (the snapshot's and the checkpoint's), oldest dropped first;
	// each entry's answer is the run's final answer, already within
	// MaxResultBytes. Defaults to DefaultHistoryRuns (10).
	HistoryRuns int
	// Loop tunes each task's agent loop: the tools offered (besides the
	// built-in todo_write, todo_update and ask_user), rounds, budgets and
	// the todo tracking thresholds. Its zero value is the solver's
	// defaults.
	Loop solver.Loop
	// NewRing makes a session's ring. Defaults to buffer.NewMemory.
	// Unused with a Cluster, whose store makes the rings.
	NewRing func(capacity int) buffer.Ring
	// Cluster shares sessions with other servers through a store (Redis).
	// Nil: sessions live in this server's memory only.
	Cluster Cluster
	// Authenticate decides who opens a connection, before the upgrade: it
	// returns the identity the request's credential names, or an error,
	// and the handshake is then refused with 401 (auth.ErrNoCredential:
	// none given; anything else: a bad one). A session belongs to the
	// subject that created it and only that subject can resume it. A
	// connection is closed with 4001 (token expired) when its identity's
	// Expires passes; its session stays for a resume with a fresh
	// credential. Defaults to nil: every connection is let in as the
	// anonymous subject "", for good.
	Authenticate func(r *http.Request) (auth.Identity, error)
	// Budget caps each subject's run starts and model tokens, counted on
	// this server (package budget). Defaults to no limits.
	Budget budget.Limits
	// Logger receives the server's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer is told what happens, for metrics (package metrics).
	// Defaults to observing nothing.
	Observer Observer
	// AdoptHook is a test seam: with a Cluster, it is called when this
	// server has claimed a session in the store and before it restores
	// it (adopt.go), on the goroutine adopting it; ctx bounds the
	// adoption. Tests hold an adoption open with it. Defaults to nil.
	AdoptHook func(ctx context.Context, session string)
	// PeerHook is a test seam: with a Cluster, it is called once this
	// server has handled a message another sent it about a session (a
	// command, an attach, a detach: peers.go), with the message's kind,
	// on the goroutine that handled it. Tests order a resume after an
	// attach with it. Defaults to nil.
	PeerHook func(kind, session string)
	// MaxTakeovers bounds the sessions this server takes over from the
	// store at once (the resumes of a dead server's sessions, and the
	// orphaned runs it continues). After a node's death every one of its
	// clients resumes within a second or two; unbounded, thousands of
	// takeovers would share the store's connections, miss their deadlines
	// together and start over. A takeover beyond the bound waits up to
	// TakeoverWait for a slot; a resume that waited in vain is answered
	// system.error busy with retry_after_ms (adopt.go). Cluster only.
	// Defaults to 32.
	MaxTakeovers int
	// TakeoverWait is how long a takeover waits for one of the MaxTakeovers
	// slots. Defaults to 3s.
	TakeoverWait time.Duration
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt(&c.BufferSize, buffer.DefaultCapacity)
	def(&c.SessionTTL, 5*time.Minute)
	defInt(&c.MaxTakeovers, 32)
	def(&c.TakeoverWait, 3*time.Second)
	def(&c.IdleSessionTTL, 10*time.Second)
	c.IdleSessionTTL = min(c.IdleSessionTTL, c.SessionTTL)
	def(&c.ConfirmTimeout, 5*time.Minute)
	defInt(&c.MaxParallel, 4)
	defInt(&c.MaxRetries, 3)
	def(&c.RetryBase, time.Second)
	def(&c.TaskTimeout, 2*time.Minute)
	defInt(&c.MaxTasks, 50)
	defInt(&c.MaxResultBytes, solver.DefaultMaxResultBytes)
	if c.HistoryBudget == 0 {
		c.HistoryBudget = DefaultHistoryBudget
	}
	defInt(&c.HistoryRuns, DefaultHistoryRuns)
	if c.ReadLimit <= 0 {
		c.ReadLimit = 65536
	}
	def(&c.PingInterval, 25*time.Second)
	def(&c.PongTimeout, 10*time.Second)
	def(&c.WriteTimeout, c.PongTimeout)
	defInt(&c.SendQueue, c.BufferSize+64)
	if c.RateLimit > 0 {
		defInt(&c.RateBurst, 2*c.RateLimit)
	}
	if c.NewRing == nil {
		c.NewRing = func(n int) buffer.Ring { return buffer.NewMemory(n) }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
	c.AllowedOrigins = append([]string(nil), c.AllowedOrigins...)
	return c
}

func (o *Options) retryPolicy() failure.Policy {
	return failure.Policy{MaxRetries: o.MaxRetries, Base: o.RetryBase}
}
