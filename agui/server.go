package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/internal/inproc"
	"github.com/baton-run/baton/wsproto"
)

// Options configure a Handler. A nil *Options means the defaults.
type Options struct {
	// Authenticate is the orchestrator's (orchestrator.Options): it names
	// the subject a thread belongs to. Nil: anonymous clients, whose
	// threadId is their credential.
	Authenticate func(r *http.Request) (auth.Identity, error)
	// AllowedOrigins are the Origin host patterns accepted besides the
	// request's own host, as the orchestrator's. Defaults to none.
	AllowedOrigins []string
	// Store holds the threads; every node serving the same sessions must
	// share it. Defaults to a MemoryStore.
	Store Store
	// ThreadTTL is how long a thread's record outlives its last use.
	// Defaults to an hour.
	ThreadTTL time.Duration
	// WSPath is the orchestrator's WebSocket path. Defaults to "/ws".
	WSPath string
	// MaxBody caps a RunAgentInput. Defaults to 1 MiB.
	MaxBody int64
	// WriteTimeout is how long one write of the stream may take: a client
	// that reads slower than that is cut (it resumes with Last-Event-ID).
	// Defaults to 10 s.
	WriteTimeout time.Duration
	// Heartbeat is how often an idle stream gets an SSE comment. Defaults
	// to 15 s.
	Heartbeat time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// minAnonymousID is the shortest threadId an anonymous client may use: it
// is the thread's only credential, and a random UUID has 36 characters.
const minAnonymousID = 32

// maxID bounds a threadId or runId.
const maxID = 256

// Handler serves POST /agui and GET /agui/{threadId}.
type Handler struct {
	opts Options
	ws   *inproc.Server
	// done ends every stream when the Handler closes: the WebSocket
	// connections behind them are hijacked, so closing the in-process
	// server does not end them.
	done context.Context
	stop context.CancelFunc
}

// New returns a Handler speaking to orch, the orchestrator's /ws handler,
// in process. Close it to stop its in-process server.
func New(orch http.Handler, opts *Options) *Handler {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	o.AllowedOrigins = append([]string(nil), o.AllowedOrigins...)
	if o.Store == nil {
		o.Store = &MemoryStore{}
	}
	if o.ThreadTTL <= 0 {
		o.ThreadTTL = time.Hour
	}
	if o.WSPath == "" {
		o.WSPath = "/ws"
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	done, stop := context.WithCancel(context.Background())
	return &Handler{opts: o, ws: inproc.Serve(orch), done: done, stop: stop}
}

// Close ends every stream (their clients resume, on another server if
// this one is going away) and stops the in-process server. It does not
// wait for the requests: the HTTP server serving them does.
func (h *Handler) Close() error {
	h.stop()
	return h.ws.Close()
}

// ServeHTTP serves POST /agui and GET /agui/{threadId}.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.originOK(r) {
		httpError(w, http.StatusForbidden, "origin not allowed")
		return
	}
	subject, ok := h.authenticate(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.done, cancel)()
	r = r.WithContext(ctx)
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/agui":
		h.run(w, r, subject)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/agui/"):
		h.resume(w, r, subject, strings.TrimPrefix(r.URL.Path, "/agui/"))
	default:
		httpError(w, http.StatusNotFound, "not found")
	}
}

func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	if h.opts.Authenticate == nil {
		return "", true
	}
	id, err := h.opts.Authenticate(r)
	if err == nil {
		return id.Subject, true
	}
	challenge, msg := `Bearer realm="baton"`, "authentication required: send a bearer token"
	if !errors.Is(err, auth.ErrNoCredential) {
		challenge, msg = `Bearer realm="baton", error="invalid_token"`, "invalid or expired credential"
	}
	w.Header().Set("WWW-Authenticate", challenge)
	httpError(w, http.StatusUnauthorized, msg)
	return "", false
}

// originOK applies the orchestrator's Origin rule: none (not a browser),
// the request's own host, or one of AllowedOrigins. A cross-site page
// cannot start runs through /agui any more than through /ws.
func (h *Handler) originOK(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range h.opts.AllowedOrigins {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}

// checkThread says what is wrong with a threadId, "" when nothing.
func (h *Handler) checkThread(id string) string {
	switch {
	case id == "":
		return "threadId is required"
	case len(id) > maxID:
		return fmt.Sprintf("threadId is longer than %d bytes", maxID)
	case h.opts.Authenticate == nil && len(id) < minAnonymousID:
		return fmt.Sprintf("threadId must have at least %d characters (use a random UUID): it is the thread's only credential", minAnonymousID)
	}
	return ""
}

// lookup returns the thread's record, nil when there is none.
func (h *Handler) lookup(ctx context.Context, subject, threadID string) (*record, error) {
	key, seal := threadKey(subject, threadID)
	sealed, err := h.opts.Store.Get(ctx, key, h.opts.ThreadTTL)
	if err != nil || sealed == nil {
		return nil, err
	}
	rec, err := openRecord(seal, sealed)
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// keep stores the thread's record: claim it when it is new (false when
// another request claimed it first), replace it otherwise.
func (h *Handler) keep(ctx context.Context, subject, threadID string, rec record, claim bool) (bool, error) {
	key, seal := threadKey(subject, threadID)
	sealed, err := sealRecord(seal, rec)
	if err != nil {
		return false, err
	}
	if claim {
		return h.opts.Store.Claim(ctx, key, sealed, h.opts.ThreadTTL)
	}
	return true, h.opts.Store.Put(ctx, key, sealed, h.opts.ThreadTTL)
}

// refused answers an error that came before the stream started.
func (h *Handler) refused(w http.ResponseWriter, err error) {
	var de *dialError
	var se *streamError
	switch {
	case errors.As(err, &de):
		httpError(w, de.status, de.msg)
	case errors.Is(err, errSessionGone):
		httpError(w, http.StatusNotFound, "unknown thread, or its session has ended")
	case errors.As(err, &se):
		httpError(w, http.StatusConflict, se.Error())
	default:
		h.opts.Logger.Warn("agui: request failed", "err", err)
		httpError(w, http.StatusBadGateway, "could not reach the session")
	}
}

// httpError answers a request that gets no stream: {"error": msg}.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// pendingOf are a snapshot's open confirmations.
func pendingOf(s *wsproto.Snapshot) []wsproto.UserConfirm {
	if s == nil || s.Run == nil {
		return nil
	}
	return s.Run.PendingConfirm
}
