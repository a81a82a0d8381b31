package myagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// writeTimeout bounds one write to a client or to /ws.
const writeTimeout = 10 * time.Second

// session is one myagent session: one Baton session over one in-process
// connection to /ws, read by its own goroutine.
type session struct {
	ws     *websocket.Conn
	id     string
	dialed time.Time // when /ws answered: a spare is used only while fresh

	// mu guards the fields below: the reader updates them, the client's
	// commands read them.
	mu         sync.Mutex
	token      string // the latest resume token /ws gave
	view       *view
	replayLeft int // sequenced frames of a resume's replay still to come
	notice     obj // the replay's closing system.notice, sent after them
}

// conn is one client connection and the sessions it created or restored.
// One goroutine reads the client (serve), one writes it; each session has
// its reader. All are waited for by serve.
type conn struct {
	h      *Handler
	ws     *websocket.Conn
	id     string
	target dialTarget
	out    chan []byte // frames for the client, in order per session

	ctx    context.Context // done when the connection ends
	cancel context.CancelFunc
	wg     sync.WaitGroup // the writer, the pinger and the session readers

	// mu guards sessions, spare, code and reason.
	mu       sync.Mutex
	sessions map[string]*session
	spare    *session             // a fresh session not yet given to the client
	code     websocket.StatusCode // what the connection ended with; 0 until it ends
	reason   string
}

func newConn(h *Handler, ws *websocket.Conn, target dialTarget, spare *session) *conn {
	var b [16]byte
	rand.Read(b[:])
	c := &conn{h: h, ws: ws, id: "conn_" + hex.EncodeToString(b[:]), target: target,
		out: make(chan []byte, h.opts.QueueSize), sessions: map[string]*session{}, spare: spare}
	c.ctx, c.cancel = context.WithCancel(h.ctx)
	return c
}

// end ends the connection with code (the first caller's code wins).
func (c *conn) end(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.ctx.Err() == nil {
		c.code, c.reason = code, reason
	}
	c.mu.Unlock()
	c.cancel()
}

func (c *conn) serve() {
	c.wg.Add(3)
	go c.writeLoop()
	go c.pingLoop()
	go c.closeOnEnd()
	c.push(obj{"event": "system.connected", "content": "Connected", "metadata": obj{"connection_id": c.id}})
	for {
		// Not c.ctx: a cancelled Read drops the connection without a
		// close frame; closeOnEnd closes it with its code instead.
		_, b, err := c.ws.Read(context.Background())
		if err != nil {
			break
		}
		c.handle(b)
	}
	c.end(websocket.StatusNormalClosure, "")
	c.mu.Lock()
	spare := c.spare
	c.spare = nil
	c.mu.Unlock()
	if spare != nil {
		spare.ws.CloseNow()
	}
	c.wg.Wait() // the readers' Read ends with c.ctx, dropping their /ws connection
}

// closeOnEnd closes the client's connection with the code it ended with:
// 1012 when the Handler closes, unless another came first.
func (c *conn) closeOnEnd() {
	defer c.wg.Done()
	<-c.ctx.Done()
	c.mu.Lock()
	code, reason := c.code, c.reason
	c.mu.Unlock()
	if code == 0 {
		code, reason = websocket.StatusServiceRestart, "server restarting"
	}
	c.ws.Close(code, reason)
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		select {
		case b := <-c.out:
			// Not c.ctx: its end during a write would drop the connection
			// without the close frame closeOnEnd then sends.
			ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.end(websocket.StatusGoingAway, "")
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

func (c *conn) pingLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.h.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			// Not c.ctx, as in writeLoop: a ping cancelled drops the connection.
			ctx, cancel := context.WithTimeout(context.Background(), c.h.opts.PingInterval)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				c.end(websocket.StatusGoingAway, "no pong")
				return
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// push queues f for the client; a client too slow to take its queue is
// closed with 1013 (its sessions stay, resumable with a signed state).
func (c *conn) push(f obj) {
	if _, ok := f["timestamp"]; !ok {
		f["timestamp"] = time.Now().UTC().Format(time.RFC3339Nano)
	}
	select {
	case c.out <- marshal(f):
	default:
		c.end(websocket.StatusTryAgainLater, "client too slow")
	}
}

// fail tells the client why a command did nothing: agent.error, with the
// session it named if any.
func (c *conn) fail(sessionID, msg string, meta obj) {
	if meta == nil {
		meta = obj{}
	}
	meta["connection_id"] = c.id
	f := obj{"event": "agent.error", "content": msg, "metadata": meta}
	if sessionID != "" {
		f["session_id"] = sessionID
	}
	c.push(f)
}

func (c *conn) notice(s *session, content string, meta obj) {
	meta["connection_id"] = c.id
	c.push(obj{"event": "system.notice", "session_id": s.id, "content": content, "metadata": meta})
}

// send writes a frame to s's /ws connection.
func (c *conn) send(s *session, b []byte) {
	ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
	defer cancel()
	if err := s.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.fail(s.id, "Session connection lost", obj{"code": "session_closed"})
	}
}

// freshSession is the spare fresh session, or a new one.
func (c *conn) freshSession() (*session, error) {
	c.mu.Lock()
	s := c.spare
	c.spare = nil
	c.mu.Unlock()
	if s != nil && time.Since(s.dialed) < c.h.opts.SpareTTL {
		return s, nil
	}
	if s != nil {
		s.ws.CloseNow()
	}
	s, status, err := c.h.dial(c.ctx, c.target)
	if err != nil && status != 0 {
		return nil, fmt.Errorf("%w (HTTP %d)", err, status)
	}
	return s, err
}

// keepSpare keeps s, a fresh session, for the next create_session.
func (c *conn) keepSpare(s *session) {
	c.mu.Lock()
	if c.spare == nil && c.ctx.Err() == nil {
		s.dialed = time.Now()
		c.spare, s = s, nil
	}
	c.mu.Unlock()
	if s != nil {
		s.ws.CloseNow()
	}
}

// start registers s and starts its reader.
func (c *conn) start(s *session) {
	c.mu.Lock()
	c.sessions[s.id] = s
	c.mu.Unlock()
	c.wg.Add(1)
	go c.readSession(s)
}

func (c *conn) lookup(id string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}

// readSession forwards s's frames, translated, until its connection ends.
func (c *conn) readSession(s *session) {
	defer c.wg.Done()
	for {
		_, b, err := s.ws.Read(c.ctx)
		if err != nil {
			c.sessionEnded(s, err)
			return
		}
		v, err := decodeValue(b)
		f, ok := v.(obj)
		if err != nil || !ok {
			continue // /ws sends objects only
		}
		s.mu.Lock()
		frames := s.view.translate(f)
		if s.notice != nil { // a resume's replay (or resync) is under way
			_, seq := f["seq"]
			if seq && s.replayLeft > 0 {
				s.replayLeft--
			}
			if s.replayLeft == 0 && (seq || str(f["event"]) == "system.state_snapshot") {
				frames, s.notice = append(frames, s.notice), nil
			}
		}
		s.mu.Unlock()
		for _, out := range frames {
			c.push(out)
		}
	}
}

// sessionEnded: /ws closed s's connection (the client's end, Close, or
// the server: draining, a session replaced by a resume elsewhere).
func (c *conn) sessionEnded(s *session, err error) {
	if c.ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	if c.sessions[s.id] == s {
		delete(c.sessions, s.id)
	}
	c.mu.Unlock()
	code := websocket.CloseStatus(err)
	switch code {
	case websocket.StatusServiceRestart:
		c.end(websocket.StatusServiceRestart, "server restarting")
		return
	case 4000:
		c.fail(s.id, "Session replaced by another connection", obj{"code": "session_replaced"})
	default:
		var ce websocket.CloseError
		reason := "connection lost"
		if errors.As(err, &ce) && ce.Reason != "" {
			reason = ce.Reason
		}
		c.fail(s.id, "Session closed by the server: "+reason, obj{"code": "session_closed", "close_code": int(code)})
	}
}
