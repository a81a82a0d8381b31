// Package client is a Go client of Baton's wire contract: it dials, keeps
// the session's seq and state checksum, applies every sequenced event once
// and in order (dropping duplicates), acks as it goes, answers
// confirmations through a callback, and — when the connection drops —
// resumes with user.reconnect_with_state, applying a replay or a resync
// snapshot. It checks the contract while it works: a gap, a duplicate, a
// reordering, a replay that is not exactly the events after the client's
// last seq, a checksum that differs from the server's, or a frame of
// another session is recorded as a violation rather than hidden. An
// application gets every event once either way; a checker reads
// Stats.Violations. The answers it sends again after a resume, and the
// server already had, are counted apart from the server's errors
// (Stats.ResentAnswers).
//
// The project's end-to-end tests and the load tool (cmd/baton-load) use it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// Frame is one server frame as received.
type Frame struct {
	Event     string          `json:"event"`
	EventID   string          `json:"event_id"`
	Seq       uint64          `json:"seq"`
	SessionID string          `json:"session_id"`
	StepID    string          `json:"step_id"`
	Timestamp time.Time       `json:"timestamp"`
	Content   string          `json:"content"`
	Metadata  json.RawMessage `json:"metadata"`
	// Replayed is set on sequenced events that came in a resume's replay
	// rather than live.
	Replayed bool `json:"-"`
	// Received is when the client read the frame.
	Received time.Time `json:"-"`
}

// Meta decodes the frame's metadata into its typed struct (a pointer, see
// wsproto.DecodeMetadata).
func (f Frame) Meta() (any, error) { return wsproto.DecodeMetadata(f.Event, f.Metadata) }

// MetaString returns the metadata's top-level string field key (run_id,
// say) without decoding the rest, and whether it is there as a string.
func (f Frame) MetaString(key string) (string, bool) { return metaString(f.Metadata, key) }

// Answer is the metadata of a user.response: Confirmed (and optionally
// Tasks) for a plan confirmation or a plan adjustment, Action for a
// task_failed one, Approved for a tool_confirm, Text for an input_request.
type Answer struct {
	Confirmed *bool          `json:"confirmed,omitempty"` // plan_confirm, plan_adjust
	Tasks     []wsproto.Task `json:"tasks,omitempty"`     // plan_confirm, plan_adjust: an edit
	Action    string         `json:"action,omitempty"`    // task_failed
	Approved  *bool          `json:"approved,omitempty"`  // tool_confirm
	Text      *string        `json:"text,omitempty"`      // input_request
}

// Options configure a Client. A nil *Options means the defaults.
type Options struct {
	// AckEvery acks after this many applied events. Defaults to 0: never.
	AckEvery int
	// Resume makes the client reconnect and resume by itself when the
	// connection drops. Defaults to false.
	Resume bool
	// ResumeDelay is the pause before the first reconnection attempt
	// after a drop; it doubles after each failed attempt up to
	// MaxResumeDelay, and every pause is spread ±50 % at random, so that
	// the clients of a server that went away do not all come back at the
	// same instant. A resume the server answered with retry_after_ms
	// (busy: it is taking over many sessions at once) waits that long
	// instead. Defaults to 50ms.
	ResumeDelay time.Duration
	// MaxResumeDelay caps the pause between reconnection attempts.
	// Defaults to 2s (at least ResumeDelay).
	MaxResumeDelay time.Duration
	// OnEvent is called, on the client's reader goroutine, with every
	// sequenced event once and in seq order, and with every unsequenced
	// frame. It must not block for long.
	OnEvent func(Frame)
	// OnConfirm answers an agent.user_confirm of any kind (its Kind says
	// which: plan_confirm, task_failed, tool_confirm, plan_adjust,
	// input_request); returning nil leaves it open. Called on the reader
	// goroutine, also for the confirmations still open in a resync's
	// snapshot.
	OnConfirm func(wsproto.UserConfirm) *Answer
	// Header is sent with every handshake (e.g. Origin).
	Header http.Header
	// Token, when set, is sent with every handshake as
	// "Authorization: Bearer <Token>", for a server with authentication
	// on (--auth-tokens, --jwt-secret). Defaults to none.
	Token string
	// TokenFunc, when set, is asked for the token before every handshake
	// (Dial's and each resume's) and takes precedence over Token: a
	// short-lived JWT is renewed there. An error fails that connection
	// attempt (Dial's, or one resume attempt, which is tried again). With
	// TokenFunc set, a connection the server closes with 4001 (token
	// expired) is resumed on a new connection even without Resume.
	// It is called on the client's reader goroutine and must return
	// (ctx bounds it). Defaults to nil: Token.
	TokenFunc func(ctx context.Context) (string, error)
	// Elsewhere are more URLs of servers sharing the session's store
	// (--store redis): each resume dials the next of them in turn, after
	// Dial's URL, as a client behind a load balancer lands on any server.
	Elsewhere []string
	// Follow makes every resume a follow (metadata.follow, §3.6 of
	// docs/protocol.md): it attaches the connection beside the session's
	// others instead of replacing them, so several devices can watch and
	// answer one session. Defaults to false: a resume replaces (4000).
	Follow bool
	// SkipState leaves the session's state unfolded: View's Phase and Run
	// stay empty, and an event's metadata is decoded only where the client
	// must read it (confirmations, snapshots). Every delivery check —
	// seqs, duplicates, session ids, replays, checksums — is made as
	// before; what is lost is the check that each event's metadata decodes.
	// A load that only checks delivery sets it to save CPU. Defaults to
	// false: the state is kept.
	SkipState bool
}

// Stats counts what happened to a client.
type Stats struct {
	Events int // sequenced events applied
	// Duplicates counts events at or below the last applied seq: dropped,
	// and each one also a violation. The server never sends one — a resume
	// replays only what follows the last_seq the client sent — so one is a
	// server that replayed or sent an event twice.
	Duplicates int
	// Foreign counts frames of another session (their session_id is not
	// this one's): dropped, and each one also a violation.
	Foreign int
	Resumes int // successful resumes (replay or resync)
	// Replaced counts connections the server closed with 4000 (session
	// replaced): a plain resume elsewhere took the session over (§3.5).
	Replaced int
	Resyncs  int // resumes answered with a snapshot
	Rejected int // resumes answered with resume_rejected
	// Errors counts system.error frames, but for the replies that
	// ResentAnswers counts: the server refused something the client or
	// the application sent (a resume it could not make counts too).
	Errors int
	// ResentAnswers counts the system.error step_id_mismatch replies to
	// user.responses the client sent again after a resume (one may have
	// been lost with the connection) and the server already had: the
	// contract's answer, expected, and not an error. On a connection
	// where the client re-sent n answers, the first n such replies count
	// here: the server answers frames in order, and an answer it accepts
	// gets no reply, so one sent twice by the application then is
	// counted here too.
	ResentAnswers int
	Violations    []string
}

// ErrClosed is returned for operations on a closed client.
var ErrClosed = errors.New("client: closed")

// Client is one Baton session seen from the client side. Its methods may
// be called concurrently.
type Client struct {
	urls []string // Dial's URL, then Options.Elsewhere
	opts Options
	// dials counts the connections made, which picks the next URL; names
	// interns the frames' event names and session ids. Only the goroutine
	// dialing and reading (Dial, then the reader loop) touches them.
	dials int
	names interner

	mu        sync.Mutex // guards the fields below
	ws        *websocket.Conn
	sessionID string
	token     string
	follow    string // the session's follow token, "" until known
	lastSeq   uint64
	checksum  buffer.Checksum
	expectSum map[uint64]string // server checksums to verify once we reach the seq
	replayTo  uint64            // events up to this seq arrive as a replay
	state     wsproto.State
	answers   map[string][]byte // answers sent in the current run, by step id
	resent    int               // answers re-sent on this connection whose step_id_mismatch may still come
	seed      []wsproto.Task    // the task list the client chose for the run, until its first solver.start
	sinceAck  int
	stats     Stats
	closed    bool
	changed   chan struct{} // closed and replaced on every applied frame
	// delivering is set while a frame is applied and its callbacks run
	// (from deliver's lock to its wake): Wait does not judge a view then.
	delivering bool
	lastErr    error

	done chan struct{} // closed when the reader loop has ended
}

// Dial connects to a Baton /ws URL and waits for system.connected.
func Dial(ctx context.Context, url string, opts *Options) (*Client, error) {
	c := &Client{changed: make(chan struct{}), names: interner{},
		expectSum: map[uint64]string{}, answers: map[string][]byte{}, done: make(chan struct{})}
	if opts != nil {
		c.opts = *opts
	}
	c.opts.defaults()
	c.urls = append([]string{url}, c.opts.Elsewhere...)
	ws, first, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	var m wsproto.Connected
	if first.Event != wsproto.EventConnected || json.Unmarshal(first.Metadata, &m) != nil {
		ws.CloseNow()
		return nil, fmt.Errorf("client: first frame was %s, want system.connected", first.Event)
	}
	c.ws, c.sessionID, c.token, c.follow = ws, m.SessionID, m.ResumeToken, m.FollowToken
	c.deliver(first)
	go c.loop(ws)
	return c, nil
}

// Follow attaches to the session of another device (§3.6): it dials url
// and follows sessionID with its follow token (View.FollowToken of the
// client that created it), receiving the session's events from the first
// (a replay, or a snapshot when the ring no longer holds them all) and
// then live, beside the session's other connections. Options.Follow is
// set: every later resume follows too.
func Follow(ctx context.Context, url, sessionID, followToken string, opts *Options) (*Client, error) {
	c := &Client{changed: make(chan struct{}), names: interner{},
		expectSum: map[uint64]string{}, answers: map[string][]byte{}, done: make(chan struct{})}
	if opts != nil {
		c.opts = *opts
	}
	c.opts.Follow = true
	c.opts.defaults()
	c.urls = append([]string{url}, c.opts.Elsewhere...)
	c.sessionID, c.token, c.follow = sessionID, followToken, followToken
	ws, err := c.resume(ctx)
	if err != nil {
		return nil, err
	}
	go c.loop(ws)
	return c, nil
}

// header is the handshake's: Options.Header, with the Authorization of
// Options.TokenFunc's token, else Options.Token. The caller's Header is
// not modified.
func (c *Client) header(ctx context.Context) (http.Header, error) {
	token := c.opts.Token
	if c.opts.TokenFunc != nil {
		var err error
		if token, err = c.opts.TokenFunc(ctx); err != nil {
			return nil, fmt.Errorf("client: token: %w", err)
		}
	}
	if token == "" {
		return c.opts.Header, nil
	}
	h := c.opts.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Authorization", "Bearer "+token)
	return h, nil
}

func (c *Client) dial(ctx context.Context) (*websocket.Conn, Frame, error) {
	url := c.urls[c.dials%len(c.urls)]
	c.dials++
	header, err := c.header(ctx)
	if err != nil {
		return nil, Frame{}, err
	}
	ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		return nil, Frame{}, fmt.Errorf("client: dial: %w", err)
	}
	ws.SetReadLimit(1 << 24)
	f, err := c.readFrame(ctx, ws, nil)
	if err != nil {
		ws.CloseNow()
		return nil, Frame{}, err
	}
	return ws, f, nil
}

// readFrame reads and decodes one frame. buf, when not nil, is reused to
// read into; the frame's Metadata never aliases it.
func (c *Client) readFrame(ctx context.Context, ws *websocket.Conn, buf *bytes.Buffer) (Frame, error) {
	_, r, err := ws.Reader(ctx)
	if err != nil {
		return Frame{}, fmt.Errorf("client: read: %w", err)
	}
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	if _, err := buf.ReadFrom(r); err != nil {
		return Frame{}, fmt.Errorf("client: read: %w", err)
	}
	var f Frame
	if err := decodeFrame(bytes.Clone(buf.Bytes()), &f, c.names); err != nil {
		return Frame{}, fmt.Errorf("client: decode frame: %w", err)
	}
	f.Received = time.Now()
	return f, nil
}

// loop reads frames until the connection ends, then resumes when asked to.
func (c *Client) loop(ws *websocket.Conn) {
	defer close(c.done)
	for {
		err := c.read(ws)
		c.mu.Lock()
		closed := c.closed
		c.lastErr = err
		if websocket.CloseStatus(err) == wsproto.CloseSessionReplaced {
			c.stats.Replaced++
		}
		c.mu.Unlock()
		// A connection whose credential expired is resumed with a new
		// one when TokenFunc can give it.
		renew := c.opts.TokenFunc != nil && websocket.CloseStatus(err) == wsproto.CloseTokenExpired
		if closed || !(c.opts.Resume || renew) {
			return
		}
		var hint time.Duration
		for attempt := 0; ; attempt++ {
			time.Sleep(c.opts.resumePause(attempt, hint)) // pacing between reconnection attempts, not synchronisation
			c.mu.Lock()
			closed = c.closed
			c.mu.Unlock()
			if closed {
				return
			}
			var rerr error
			if ws, rerr = c.resume(context.Background()); rerr == nil {
				break
			}
			c.mu.Lock()
			c.lastErr = rerr
			c.mu.Unlock()
			hint = 0
			if re, ok := errors.AsType[*ResumeError](rerr); ok {
				hint = re.RetryAfter
			}
			if errors.Is(rerr, errRejected) || errors.Is(rerr, ErrClosed) || errors.Is(rerr, ErrFollowLimit) {
				return
			}
		}
	}
}

var errRejected = errors.New("client: resume rejected")

func (o *Options) defaults() {
	if o.ResumeDelay <= 0 {
		o.ResumeDelay = 50 * time.Millisecond
	}
	if o.MaxResumeDelay <= 0 {
		o.MaxResumeDelay = 2 * time.Second
	}
	o.MaxResumeDelay = max(o.MaxResumeDelay, o.ResumeDelay)
}

// resumePause is the pause before reconnection attempt n (0: the first
// after a drop): ResumeDelay doubled n times, capped at MaxResumeDelay,
// spread ±50 %; or the server's retry hint when the attempt before had one.
func (o *Options) resumePause(n int, hint time.Duration) time.Duration {
	if hint > 0 {
		return hint // spread by the server already
	}
	d := o.ResumeDelay
	for i := 0; i < n && d < o.MaxResumeDelay; i++ {
		d *= 2
	}
	return time.Duration(float64(min(d, o.MaxResumeDelay)) * (0.5 + rand.Float64()))
}

// A ResumeError is a resume the server could not make now: it answered
// system.error with a code other than resume_rejected (the store did not
// answer; busy, with a retry hint). Another attempt may succeed.
type ResumeError struct {
	Code    string
	Message string
	// RetryAfter is the server's hint of when to try again; 0 if none.
	RetryAfter time.Duration
}

func (e *ResumeError) Error() string {
	return fmt.Sprintf("client: resume failed: %s: %s", e.Code, e.Message)
}

// ErrFollowLimit is a follow the server refused: the session has
// --max-followers connections attached already.
var ErrFollowLimit = errors.New("client: the session has as many connections as it may (follow_limit)")

// read handles frames until the connection fails.
func (c *Client) read(ws *websocket.Conn) error {
	var buf bytes.Buffer
	for {
		f, err := c.readFrame(context.Background(), ws, &buf)
		if err != nil {
			return err
		}
		c.deliver(f)
	}
}

// resume opens a new connection and attaches it to the session.
func (c *Client) resume(ctx context.Context) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, fresh, err := c.dial(ctx) // its fresh system.connected is not ours
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	meta := map[string]any{"session_id": c.sessionID, "resume_token": c.token, "last_seq": c.lastSeq, "state_checksum": c.checksum.String()}
	if c.opts.Follow {
		meta["follow"] = true
	}
	req := map[string]any{"event": wsproto.EventUserReconnect, "metadata": meta}
	c.mu.Unlock()
	if err := writeJSON(ctx, ws, req); err != nil {
		ws.CloseNow()
		return nil, err
	}
	f, err := c.readFrame(ctx, ws, nil)
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	if f.Event == wsproto.EventError {
		// The connection is still on its fresh session, which the error
		// names.
		ws.CloseNow()
		var e wsproto.Error
		if json.Unmarshal(f.Metadata, &e) == nil && e.Code == wsproto.CodeFollowLimit {
			c.deliverOf(f, fresh.SessionID)
			return nil, ErrFollowLimit
		}
		if json.Unmarshal(f.Metadata, &e) == nil && e.Code != wsproto.CodeResumeRejected {
			// The server could not resume it now (its store did not
			// answer): another attempt may.
			c.deliverOf(f, fresh.SessionID)
			return nil, &ResumeError{Code: e.Code, Message: e.Message, RetryAfter: time.Duration(e.RetryAfterMS) * time.Millisecond}
		}
		c.mu.Lock()
		c.stats.Rejected++
		c.mu.Unlock()
		c.deliverOf(f, fresh.SessionID)
		return nil, errRejected
	}
	var m wsproto.Connected
	if f.Event != wsproto.EventConnected || json.Unmarshal(f.Metadata, &m) != nil || !m.Resumed {
		ws.CloseNow()
		return nil, fmt.Errorf("client: resume answered with %s", f.Event)
	}
	c.mu.Lock()
	if c.closed { // Close ran while we were reconnecting: it cannot see ws
		c.mu.Unlock()
		ws.CloseNow()
		return nil, ErrClosed
	}
	c.ws = ws
	c.token = m.ResumeToken // the server rotates it on every resume (but a follow token)
	if m.FollowToken != "" {
		c.follow = m.FollowToken
	}
	c.resent = 0
	c.stats.Resumes++
	if m.Resync {
		c.stats.Resyncs++
	} else {
		c.expectSum[m.LastSeq] = m.StateChecksum
		c.replayTo = m.LastSeq
		c.checkReplay(m)
	}
	// The answers to send again are those given before this connection
	// (and still open after its answer): one given as the answer is
	// delivered goes out on it already.
	before := make(map[string]bool, len(c.answers))
	for id := range c.answers {
		before[id] = true
	}
	c.mu.Unlock()
	c.deliver(f)
	if m.Resync {
		snap, err := c.readFrame(ctx, ws, nil)
		if err != nil || snap.Event != wsproto.EventStateSnapshot {
			ws.CloseNow()
			return nil, fmt.Errorf("client: resync without a snapshot (%s, %v)", snap.Event, err)
		}
		c.deliver(snap)
	}
	c.reanswer(ctx, ws, before)
	return ws, nil
}

// reanswer sends again the answers of the current run: one may have been
// lost with the connection. The server answers step_id_mismatch to those
// it already had, which Stats.ResentAnswers counts rather than Errors.
// It runs before ws's reader, so no reply is read before it has counted.
func (c *Client) reanswer(ctx context.Context, ws *websocket.Conn, before map[string]bool) {
	c.mu.Lock()
	frames := make([][]byte, 0, len(c.answers))
	for id, b := range c.answers {
		if before[id] {
			frames = append(frames, b)
		}
	}
	c.mu.Unlock()
	sent := 0
	for _, b := range frames {
		if ws.Write(ctx, websocket.MessageText, b) == nil {
			sent++
		}
	}
	c.mu.Lock()
	c.resent += sent
	c.mu.Unlock()
}

// Drop kills the current connection without a close handshake, as a lost
// network would; with Resume set, the client then resumes by itself.
func (c *Client) Drop() {
	c.mu.Lock()
	ws := c.ws
	c.mu.Unlock()
	ws.CloseNow()
}

// Close closes the connection and stops resuming. The session stays on
// the server until its TTL.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ws := c.ws
	c.mu.Unlock()
	ws.Close(websocket.StatusNormalClosure, "")
	<-c.done
	return nil
}

// Done is closed when the client has stopped reading for good: closed, or
// disconnected without Resume, or its resume rejected.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the last connection ended.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
