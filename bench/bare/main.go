// Command bare is the yardstick of bench/run.sh: a bare coder/websocket
// server that speaks just enough of Baton's wire contract
// (docs/protocol.md) for cmd/baton-load to drive it unchanged and find no
// violation. Each connection gets a session and system.connected as Baton
// sends it; each run request — user.solve_tasks, or user.message, planned
// into a fixed diamond of four tasks and confirmed — is answered with the
// events Baton's simulated model sends for those tasks (the same types,
// metadata shapes and sizes, in one fixed order), seq 1, 2, 3, … with no
// gap, ending in agent.final_answer. Acks are accepted and ignored.
//
// Everything else a server of the contract owes is left out on purpose:
// no ring, no state, no checksum, no resume (answered resume_rejected), no
// limits, no pings, no logs. What is left is the cost of framing events
// and writing them, which is what the benchmark holds Baton against. It
// imports nothing of Baton's: only coder/websocket and the standard
// library.
//
// Two modes:
//
//   - naive: per event, json.Marshal of a struct (envelope and metadata)
//     and one Write with its own context.WithTimeout, on the goroutine that
//     runs the run: what a straightforward server does.
//   - preencoded: each distinct run's frames are encoded once into a
//     template; per event only the event id, seq, session, run and step
//     ids and the timestamp are appended into a reused buffer, and written
//     with one Write, under one deadline per batch of events.
//
// Usage:
//
//	go run ./bench/bare -addr 127.0.0.1:18490 -mode naive
//	go run ./cmd/baton-load -url ws://127.0.0.1:18490/ws -mix tasks=1 -sessions 100
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

const (
	// writeTimeout bounds a write (naive) or a batch of writes
	// (preencoded) to a client; a client slower than that is dropped.
	writeTimeout = 10 * time.Second
	// confirmTimeout is how long a plan confirmation waits, as Baton's
	// default --confirm-timeout.
	confirmTimeout = 5 * time.Minute
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:18490", "address to listen on: /ws and /healthz")
	modeName := fs.String("mode", "naive", "naive (json.Marshal and a deadline per event) or preencoded (templates, one deadline per batch)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var m mode
	switch *modeName {
	case "naive":
		m = naive{}
	case "preencoded":
		m = newPreencoded()
	default:
		return fmt.Errorf("-mode %q: want naive or preencoded", *modeName)
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s := &server{mode: m}
	hs := &http.Server{Handler: s.routes(), BaseContext: func(net.Listener) context.Context { return ctx }}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "bare (%s) listening on ws://%s/ws\n", *modeName, ln.Addr())

	select {
	case err = <-serveErr:
	case <-ctx.Done():
		err = nil
	}
	// Hijacked connections outlive Close; their handlers end with ctx.
	hs.Close()
	stop()
	s.conns.Wait()
	return err
}

// server accepts connections; each is its own session.
type server struct {
	mode  mode
	conns sync.WaitGroup // every connection's handler
	open  atomic.Int64
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", s.serveWS)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"ok","connections":%d}`+"\n", s.open.Load())
	})
	return mux
}

func (s *server) serveWS(w http.ResponseWriter, r *http.Request) {
	s.conns.Add(1)
	defer s.conns.Done()
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	s.open.Add(1)
	defer s.open.Add(-1)
	ws.SetReadLimit(65536)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	c := &conn{ws: ws, session: "sess_" + newUUID(), runs: make(chan request, 1), answers: make(chan answer, 16)}
	c.idPrefix = newUUID()[:24]
	token := make([]byte, 32)
	rand.Read(token)
	if err := c.writeUnsequenced(ctx, "system.connected", "connected", connected{SessionID: c.session,
		ResumeToken: base64.RawURLEncoding.EncodeToString(token), BufferCapacity: 1000}); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.runner(ctx, s.mode)
	}()
	c.read(ctx)
	cancel()
	wg.Wait()
}

type connected struct {
	SessionID      string `json:"session_id"`
	ResumeToken    string `json:"resume_token"`
	Resumed        bool   `json:"resumed"`
	LastSeq        uint64 `json:"last_seq"`
	StateChecksum  string `json:"state_checksum"`
	BufferCapacity int    `json:"buffer_capacity"`
}

type errorMeta struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	RefType string `json:"ref_type,omitempty"`
}

// conn is one connection and its session. Its reader goroutine reads
// client frames and writes errors; its runner goroutine writes runs.
// coder/websocket lets both write.
type conn struct {
	ws      *websocket.Conn
	session string
	runs    chan request // a run to write; busy keeps it from holding more than one
	answers chan answer  // user.response frames, for the runner's confirmation
	// busy is set from a run request until the run's last event is about
	// to be written, when the client may send the next.
	busy atomic.Bool

	// The runner's own.
	seq      uint64
	events   uint64 // event ids made, for preencoded's
	idPrefix string // preencoded's event ids: this, then the count in hex
	buf      []byte
}

type answer struct {
	stepID    string
	confirmed bool
}

// mode writes a run's events.
type mode interface {
	// writeRun writes req's run on c, calling c.endRun just before its
	// last event. An error ends the connection.
	writeRun(ctx context.Context, c *conn, req request) error
}

func (c *conn) endRun() { c.busy.Store(false) }

// clientFrame is what the reader needs of a client frame.
type clientFrame struct {
	Event    string          `json:"event"`
	StepID   string          `json:"step_id"`
	Content  string          `json:"content"`
	Metadata json.RawMessage `json:"metadata"`
}

// read handles client frames until the connection ends.
func (c *conn) read(ctx context.Context) {
	for {
		typ, data, err := c.ws.Read(ctx)
		if err != nil {
			return
		}
		var f clientFrame
		if typ != websocket.MessageText || json.Unmarshal(data, &f) != nil || f.Event == "" {
			c.sendError(ctx, "invalid_message", "", "want a JSON object with an event, in a text frame")
			continue
		}
		switch f.Event {
		case "user.ack":
			// Nothing to free: there is no ring.
		case "user.response":
			var m struct {
				Confirmed bool `json:"confirmed"`
			}
			json.Unmarshal(f.Metadata, &m)
			select {
			case c.answers <- answer{stepID: f.StepID, confirmed: m.Confirmed}:
			default: // more answers than any run waits for: dropped
			}
		case "user.solve_tasks", "user.message":
			req, err := parseRequest(f)
			if err != nil {
				c.sendError(ctx, "invalid_tasks", f.Event, err.Error())
				continue
			}
			if !c.busy.CompareAndSwap(false, true) {
				c.sendError(ctx, "busy", f.Event, "a run is already active in this session")
				continue
			}
			c.runs <- req
		case "user.reconnect_with_state":
			c.sendError(ctx, "resume_rejected", f.Event, "this server does not resume sessions")
		default:
			c.sendError(ctx, "unknown_type", f.Event, "unknown event "+f.Event)
		}
	}
}

func parseRequest(f clientFrame) (request, error) {
	if f.Event == "user.message" {
		if f.Content == "" {
			return request{}, errors.New("user.message needs a content")
		}
		return newRequest(f.Content, planTasks(f.Content), "m:"+f.Content)
	}
	var m struct {
		Tasks []task `json:"tasks"`
	}
	if err := json.Unmarshal(f.Metadata, &m); err != nil {
		return request{}, fmt.Errorf("metadata: %w", err)
	}
	for i := range m.Tasks {
		if m.Tasks[i].DependsOn == nil {
			m.Tasks[i].DependsOn = []string{}
		}
	}
	return newRequest("", m.Tasks, "t:"+string(f.Metadata))
}

// runner writes the runs the reader hands it, one at a time.
func (c *conn) runner(ctx context.Context, m mode) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-c.runs:
			if err := m.writeRun(ctx, c, req); err != nil {
				c.ws.CloseNow()
				return
			}
		}
	}
}

// awaitConfirm waits for the user.response to the confirmation step and
// reports whether it confirmed; no answer in time is a rejection.
func (c *conn) awaitConfirm(ctx context.Context, step string) (bool, error) {
	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	for {
		select {
		case a := <-c.answers:
			if a.stepID == step {
				return a.confirmed, nil
			}
		case <-timer.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// frame is a server frame as encoding/json writes it.
type frame struct {
	Event     string    `json:"event"`
	EventID   string    `json:"event_id"`
	Seq       uint64    `json:"seq,omitempty"`
	SessionID string    `json:"session_id"`
	StepID    string    `json:"step_id,omitempty"`
	Timestamp time.Time `json:"timestamp"`
	Content   string    `json:"content"`
	Metadata  any       `json:"metadata"`
}

// writeUnsequenced writes system.connected or system.error, in either
// mode the naive way: they are not what is measured.
func (c *conn) writeUnsequenced(ctx context.Context, event, content string, meta any) error {
	b, err := json.Marshal(frame{Event: event, EventID: newUUID(), SessionID: c.session, Timestamp: time.Now().UTC(), Content: content, Metadata: meta})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

func (c *conn) sendError(ctx context.Context, code, ref, msg string) {
	c.writeUnsequenced(ctx, "system.error", msg, errorMeta{Code: code, Message: msg, RefType: ref})
}

// newUUID returns a random UUID of version 7 (time-ordered), as Baton's
// event ids are.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	ms := uint64(time.Now().UnixMilli())
	for i := range 6 {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
