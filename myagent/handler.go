package myagent

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/internal/inproc"
)

// Options configure a Handler. A nil *Options means defaults; New does not
// modify the caller's struct.
type Options struct {
	// StateKey signs exported states (HMAC-SHA256). Defaults to 32 random
	// bytes drawn by New: states then verify only on this process, and not
	// after a restart (KeyGenerated says so).
	StateKey []byte
	// StateTTL is how long an exported state may be used. Defaults to 24 h
	// (the session's own TTL usually ends it first).
	StateTTL time.Duration
	// AllowedOrigins are the Origin host patterns accepted besides the
	// request's own host, as /ws's (path.Match syntax). Defaults to none.
	AllowedOrigins []string
	// ReadLimit bounds a client frame. Defaults to 64 KiB.
	ReadLimit int64
	// QueueSize bounds the frames waiting for a slow client; beyond it the
	// client is closed with 1013. Defaults to 1064 (a ring and 64).
	QueueSize int
	// DialTimeout bounds the in-process dial of /ws and its first answer.
	// Defaults to 10 s.
	DialTimeout time.Duration
	// PingInterval is how often a client is pinged; a client that does not
	// answer within it is dropped. Defaults to 25 s.
	PingInterval time.Duration
	// SpareTTL is how long the session dialled to check a client's
	// upgrade is kept for its first user.create_session: nothing reads its
	// /ws connection until then, so it must be used before /ws's first
	// ping (set it below /ws's ping interval). myagent's clients create
	// their first session at once. Defaults to 2 s.
	SpareTTL time.Duration
	// AgentName is session_created's metadata.agent_name. Defaults to "baton".
	AgentName string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Handler serves the myagent dialect on WebSocket upgrades. Its methods
// may be called concurrently.
type Handler struct {
	opts  Options
	inner *inproc.Server
	// KeyGenerated is true when no StateKey was given and New drew one.
	KeyGenerated bool

	ctx    context.Context // done on Close: ends every connection
	cancel context.CancelFunc
	wg     sync.WaitGroup // the connections' goroutines

	mu     sync.Mutex // guards closed, and wg.Add against Close's Wait
	closed bool
}

// New returns a Handler that speaks to orch (the handler serving /ws) in
// process. Close it before closing orch.
func New(orch http.Handler, opts *Options) *Handler {
	var o Options
	if opts != nil {
		o = *opts
	}
	h := &Handler{inner: inproc.Serve(orch)}
	if len(o.StateKey) == 0 {
		o.StateKey = make([]byte, 32)
		rand.Read(o.StateKey) // never fails (crypto/rand)
		h.KeyGenerated = true
	} else {
		o.StateKey = append([]byte(nil), o.StateKey...)
	}
	o.AllowedOrigins = append([]string(nil), o.AllowedOrigins...)
	if o.StateTTL <= 0 {
		o.StateTTL = 24 * time.Hour
	}
	if o.ReadLimit <= 0 {
		o.ReadLimit = 64 << 10
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1064
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 25 * time.Second
	}
	if o.SpareTTL <= 0 {
		o.SpareTTL = 2 * time.Second
	}
	if o.AgentName == "" {
		o.AgentName = "baton"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h.opts = o
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// Close ends every connection (their sessions stay on the orchestrator,
// resumable) and waits for their goroutines.
func (h *Handler) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	return h.inner.Close()
}

// IsUpgrade reports whether r asks for a WebSocket upgrade: routes send
// those of / to the dialect and the others to the UI.
func IsUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		headerHas(r.Header, "Connection", "upgrade")
}

func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// dialTarget is how a client's request reaches /ws: its address, its
// headers but the handshake's own, and its credential (?token= becomes
// ?access_token=, so a token given both ways is refused as given twice).
type dialTarget struct {
	path   string
	remote string
	header http.Header
}

func targetOf(r *http.Request) dialTarget {
	q := r.URL.Query()
	inner := url.Values{}
	for _, k := range []string{"token", auth.QueryParam} {
		inner[auth.QueryParam] = append(inner[auth.QueryParam], q[k]...)
	}
	path := "/ws"
	if len(inner[auth.QueryParam]) > 0 {
		path += "?" + inner.Encode()
	}
	hdr := r.Header.Clone()
	for _, k := range []string{"Connection", "Upgrade", "Origin", "Sec-Websocket-Key", "Sec-Websocket-Version",
		"Sec-Websocket-Extensions", "Sec-Websocket-Protocol"} {
		hdr.Del(k)
	}
	for _, p := range r.Header.Values("Sec-WebSocket-Protocol") { // only a bearer token
		for t := range strings.SplitSeq(p, ",") {
			if t = strings.TrimSpace(t); strings.HasPrefix(t, auth.BearerPrefix) {
				hdr.Add("Sec-WebSocket-Protocol", t)
			}
		}
	}
	return dialTarget{path: path, remote: r.RemoteAddr, header: hdr}
}

// ServeHTTP upgrades r and serves the dialect on it until the client or
// Close ends it. The client's first session is dialled before the upgrade,
// so a request /ws would refuse (no credential, a bad one, too many
// connections, draining) gets /ws's status and body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()
	target := targetOf(r)
	spare, status, err := h.dial(r.Context(), target)
	if err != nil {
		if status == 0 {
			status = http.StatusBadGateway
		}
		h.opts.Logger.Info("myagent: refused", "remote", r.RemoteAddr, "status", status, "err", err)
		http.Error(w, http.StatusText(status), status)
		return
	}
	opts := &websocket.AcceptOptions{OriginPatterns: h.opts.AllowedOrigins, CompressionMode: websocket.CompressionDisabled}
	if len(target.header.Values("Sec-WebSocket-Protocol")) > 0 {
		opts.Subprotocols = []string{auth.Subprotocol}
	}
	ws, err := websocket.Accept(w, r, opts)
	if err != nil {
		spare.ws.Close(websocket.StatusNormalClosure, "")
		h.opts.Logger.Info("myagent: handshake refused", "remote", r.RemoteAddr, "err", err)
		return
	}
	ws.SetReadLimit(h.opts.ReadLimit)
	c := newConn(h, ws, target, spare)
	c.serve()
}

// errRefused is a dial /ws answered with an HTTP status.
var errRefused = errors.New("refused by /ws")

// dial opens a connection to /ws for target and reads its system.connected:
// a fresh session. status is /ws's answer when it refused the upgrade.
func (h *Handler) dial(ctx context.Context, target dialTarget) (s *session, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.DialTimeout)
	defer cancel()
	ws, resp, err := h.inner.Dial(ctx, target.path, target.remote, target.header)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, resp.StatusCode, errRefused
		}
		return nil, 0, err
	}
	ws.SetReadLimit(-1) // /ws bounds what it sends
	f, err := readFrame(ctx, ws)
	if err != nil {
		ws.CloseNow()
		return nil, 0, err
	}
	meta, _ := f["metadata"].(obj)
	if str(f["event"]) != "system.connected" || str(meta["session_id"]) == "" {
		ws.CloseNow()
		return nil, 0, errors.New("/ws did not open with system.connected")
	}
	return &session{ws: ws, id: str(meta["session_id"]), token: str(meta["resume_token"]), dialed: time.Now()}, 0, nil
}

// readFrame reads one frame of /ws. Only for a connection no one else
// reads or writes yet: ctx's end closes it.
func readFrame(ctx context.Context, ws *websocket.Conn) (obj, error) {
	_, b, err := ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	v, err := decodeValue(b)
	if err != nil {
		return nil, err
	}
	f, ok := v.(obj)
	if !ok {
		return nil, errors.New("/ws sent a frame that is not an object")
	}
	return f, nil
}

func marshal(f obj) []byte {
	b, err := json.Marshal(f)
	if err != nil { // a value decoded from JSON always encodes
		b, _ = json.Marshal(obj{"event": "agent.error", "content": "internal: " + err.Error()})
	}
	return b
}
