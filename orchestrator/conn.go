package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/baton-run/baton/wsproto"
)

// conn is one WebSocket connection. Its reader goroutine (serve) reads;
// a writer goroutine (writeLoop), started while there is something to
// write, writes; everything else only calls send and closeWith, which
// never block. An idle connection costs one goroutine.
type conn struct {
	ws    *websocket.Conn
	srv   *Server
	limit int // most frames the queue may hold

	id string // unique among the server's connections, and the cluster's with its node
	// subject is who authenticated the connection ("" without
	// authentication): it may resume only its own sessions.
	subject string
	// sess is the session the connection is attached to. Only the reader
	// goroutine reads or writes it.
	sess *session
	// remote is set instead when another server of the cluster owns the
	// session the connection resumed (proxy.go).
	remote *remote
	// log carries the id of the session the connection is attached to: the
	// fresh one, then the resumed one. Every goroutine reads it; attach
	// replaces it.
	log atomic.Pointer[slog.Logger]
	// frames counts the client frames read so far, and read is when the
	// latest one arrived (reader goroutine only).
	frames int
	read   time.Time
	// flood rate-limits the client's frames (reader goroutine only); nil
	// without a limit.
	flood *flood
	// expires is when the credential the connection was opened with stops
	// being good; zero for never. Set before serve.
	expires time.Time

	// bc is the network connection under ws, which gathers a batch's
	// writes into one (batchconn.go); nil in tests without a socket.
	bc *batchConn

	mu          sync.Mutex // guards the fields below up to closing
	queue       [][]byte
	spare       [][]byte
	closeCode   websocket.StatusCode
	closeReason string
	// flush says the close waits for the frames queued before it
	// (closeFlushed).
	flush bool
	// dropped says why the server dropped the connection without a close
	// handshake ("no pong", "write failed"), for the close log.
	dropped string
	// writing says a writer goroutine is running. There is one only while
	// there is something to write: an idle connection has none.
	writing bool
	// stopped says the reader has stopped: no goroutine starts any more.
	stopped bool
	// afterWrite runs once the frames queued with it (sendThen) have all
	// been written; nil for none.
	afterWrite func()
	pinging    bool        // a ping is in flight
	pinger     *time.Timer // starts the next ping; nil without pings
	// expiry closes the connection when its credential expires; nil when
	// it does not.
	expiry *time.Timer

	closing atomic.Bool    // a close has been requested
	wg      sync.WaitGroup // the writer, any ping in flight, a proxied session's tail, a confirming ping
}

// newConn returns the connection of ws, whose network connection is bc.
func newConn(srv *Server, ws *websocket.Conn, bc *batchConn, subject string) *conn {
	return &conn{
		id:      uuid.NewString(),
		subject: subject,
		ws:      ws,
		bc:      bc,
		srv:     srv,
		limit:   srv.opts.SendQueue,
		flood:   newFlood(&srv.opts),
	}
}

// attach makes sess the connection's session, and the one its log lines
// name. On the reader goroutine: before the connection's other goroutines
// start, or under sess's lock on a resume.
func (c *conn) attach(sess *session) {
	c.sess = sess
	c.log.Store(c.srv.log.With(c.logAttrs("session", sess.id)...))
}

// logAttrs are attrs with the connection's subject, when authentication
// names one.
func (c *conn) logAttrs(attrs ...any) []any {
	if c.srv.opts.Authenticate != nil {
		attrs = append(attrs, "subject", c.subject)
	}
	return attrs
}

// sessionID is the id of the session the connection is attached to, on
// the reader goroutine.
func (c *conn) sessionID() string {
	if c.remote != nil {
		return c.remote.id
	}
	return c.sess.id
}

// logger is the connection's log, naming its session.
func (c *conn) logger() *slog.Logger { return c.log.Load() }

// send queues frames for the writer without blocking. When the queue would
// overflow the client is too slow: the connection is closed with 1013 and
// the frames are dropped (they stay in the session's ring for a resume).
// It reports whether the frames were queued.
func (c *conn) send(frames ...[]byte) bool { return c.sendThen(nil, frames...) }

// sendThen is send, and then, if all of frames were written, after runs on
// the writer goroutine right after their write reached the network (so a
// frame written by after follows them on the wire). It must not block. A
// connection that closes or fails first never runs it.
func (c *conn) sendThen(after func(), frames ...[]byte) bool {
	return c.enqueue(after, 0, frames)
}

// sendDurable is send for events a durable ring delivers once the store
// holds them (deliver). When the store stalls, a stall's events become
// durable together and arrive in one delivery or a few close together,
// however fast the client reads: that backlog is the store's, so its size
// is no reason to call the client slow. The store bounds it: a ring lets
// at most backlog entries wait for the store, and is lost past that. So a
// connection whose queue and those deliveries stay within its limit plus
// backlog is one that read what it was sent before the stall; only a
// client that let its own queue fill is closed. The writer writes a long
// queue in pieces of at most a queue's worth (writeBatch).
func (c *conn) sendDurable(backlog int, frames ...[]byte) bool {
	return c.enqueue(nil, backlog, frames)
}

// enqueue is sendThen, and sendDurable with backlog, the room a durable
// delivery has beyond the queue's limit.
func (c *conn) enqueue(after func(), backlog int, frames [][]byte) bool {
	c.mu.Lock()
	if c.closeCode != 0 {
		c.mu.Unlock()
		return false
	}
	if queued := len(c.queue); queued+len(frames) > c.limit+backlog {
		c.mu.Unlock()
		c.logger().Warn("send queue overflow; closing slow client", "queued", queued)
		c.srv.obs.SendOverflow()
		c.closeWith(websocket.StatusTryAgainLater, "client too slow")
		return false
	}
	c.queue = append(c.queue, frames...)
	if after != nil {
		c.afterWrite = after // the batch that takes it takes frames too
	}
	c.startWriterLocked()
	c.mu.Unlock()
	return true
}

// closeWith asks the writer to close the connection with code; queued frames
// that were not written yet are dropped. The first request wins, and one
// after the reader has stopped is none: the connection has ended already,
// however it did, and no writer could close it now.
func (c *conn) closeWith(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closeCode == 0 && !c.stopped {
		c.closeCode, c.closeReason = code, reason
		c.closing.Store(true)
		c.startWriterLocked()
	}
	c.mu.Unlock()
}

// closeFlushed is closeWith for a connection that has nothing more coming
// but should get what it was sent: the frames queued before it are written
// first. Later frames are dropped, as with closeWith.
func (c *conn) closeFlushed(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	if c.closeCode == 0 && !c.stopped {
		c.closeCode, c.closeReason, c.flush = code, reason, true
		c.startWriterLocked()
	}
	c.mu.Unlock()
}

// startWriterLocked starts a writer unless one is running (it takes what
// was just queued) or the reader has stopped. Under c.mu, so a writer
// about to leave an empty queue cannot miss a frame, and no goroutine is
// added once the reader waits for them all.
func (c *conn) startWriterLocked() {
	if c.writing || c.stopped {
		return
	}
	c.writing = true
	c.wg.Add(1)
	go c.writeLoop()
}

// writeLoop writes what is queued until the queue is empty or the
// connection is closed, by request or because the reader stopped. A batch
// (all that was queued when the writer looked) leaves in one write with one
// deadline (batchConn): a per-frame write and context were half of the
// server's CPU under load (docs/performance.md).
func (c *conn) writeLoop() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		if c.stopped {
			c.writing = false
			c.mu.Unlock()
			c.ws.CloseNow()
			return
		}
		batch := c.queue
		c.queue, c.spare = c.spare[:0], nil
		code, reason, flush := c.closeCode, c.closeReason, c.flush
		after := c.afterWrite
		c.afterWrite = nil
		if len(batch) == 0 && code == 0 {
			c.writing = false
			c.spare = batch
			c.mu.Unlock()
			c.bc.idle()
			return
		}
		c.mu.Unlock()

		if code != 0 && !flush {
			c.ws.Close(code, reason)
			return // writing stays set: the connection is done
		}
		if err := c.writeBatch(batch); err != nil {
			c.logger().Debug("write failed; dropping connection", "err", err)
			c.drop(dropWriteFailed)
			c.ws.CloseNow()
			return
		}
		if code != 0 { // flushed
			c.ws.Close(code, reason)
			return
		}
		if after != nil && !c.closing.Load() { // closing: writeBatch may have skipped frames
			after()
		}
		clear(batch)
		if cap(batch) <= 2*c.limit { // not the room of a rare large delivery
			c.mu.Lock()
			c.spare = batch[:0]
			c.mu.Unlock()
		}
	}
}

// writeBatch writes frames, gathered into one write. It stops early when a
// close is requested meanwhile: the writer's next turn closes. When it
// fails, the connection is already closed (batchConn): nothing, not even
// a close frame, may follow the part of a frame that may have left.
//
// A batch larger than the send queue (a durable delivery, sendDurable)
// leaves in pieces of at most a queue's worth, each one write with its
// own deadline: a write's size, and the time it may take, stay those of
// a full queue.
func (c *conn) writeBatch(frames [][]byte) error {
	for len(frames) > 0 && !c.closing.Load() {
		n := min(len(frames), max(c.limit, 1))
		if err := c.writePiece(frames[:n]); err != nil {
			return err
		}
		frames = frames[n:]
	}
	return nil
}

// writePiece writes frames, gathered into one write (writeBatch).
func (c *conn) writePiece(frames [][]byte) error {
	c.bc.hold()
	for _, f := range frames {
		if c.closing.Load() {
			break
		}
		// No deadline here, and so no context per frame: the frame only
		// goes to memory; release's write has the piece's deadline.
		if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
			c.bc.release()
			return err
		}
	}
	return c.bc.release()
}

// startPings pings the peer every PingInterval until the reader stops.
func (c *conn) startPings() {
	if d := c.srv.opts.PingInterval; d > 0 {
		c.mu.Lock()
		c.pinger = time.AfterFunc(d, c.ping)
		c.mu.Unlock()
	}
}

// startExpiry closes the connection with 4001 (token expired) when its
// credential expires: a connection may not outlive what let it in. Its
// session stays, for a resume on a connection with a fresh credential.
// The timer's function only asks for the close, which never blocks; one
// that fires after the reader stopped is a no-op (closeWith).
func (c *conn) startExpiry() {
	if c.expires.IsZero() {
		return
	}
	c.mu.Lock()
	c.expiry = time.AfterFunc(time.Until(c.expires), func() {
		c.logger().Info("credential expired; closing the connection")
		c.closeWith(websocket.StatusCode(wsproto.CloseTokenExpired), "token expired")
	})
	c.mu.Unlock()
}

// ping starts a ping in a goroutine of its own, since Ping waits for the
// pong and no goroutine must wait meanwhile; at most one is in flight. A
// peer that does not answer within PongTimeout is dropped; its session
// stays for a resume.
func (c *conn) ping() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.pinger.Reset(c.srv.opts.PingInterval)
	if c.pinging {
		return
	}
	c.pinging = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.PongTimeout)
		defer cancel()
		err := c.ws.Ping(ctx)
		c.mu.Lock()
		c.pinging = false
		lost := err != nil && !c.stopped // not the reader's own end
		c.mu.Unlock()
		switch {
		case lost && c.bc != nil && c.bc.failed(): // the ping, or a write before it, broke the connection
			c.logger().Debug("write failed; dropping connection", "err", err)
			c.drop(dropWriteFailed)
			c.ws.CloseNow()
		case lost:
			c.logger().Debug("no pong; dropping connection", "err", err)
			c.drop(dropNoPong)
			c.ws.CloseNow()
		}
	}()
}

// confirmPing pings the peer once, from a goroutine of its own, and calls
// onPong if the pong comes within PongTimeout. Called by the writer right
// after it wrote a frame (sendThen): frames arrive in order, so the pong
// proves the peer read that frame. A ping that fails does nothing: the
// periodic pings judge the connection's liveness.
func (c *conn) confirmPing(onPong func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), c.srv.opts.PongTimeout)
		defer cancel()
		if err := c.ws.Ping(ctx); err != nil {
			c.logger().Debug("no pong after the resume; its token stays pending", "err", err)
			return
		}
		onPong()
	}()
}

// stop is the reader's last word: no goroutine of the connection starts
// any more; the connection is closed now unless a writer is running (it
// closes it, after a close handshake it may be in); and stop waits for all
// of them.
func (c *conn) stop() {
	c.mu.Lock()
	c.stopped = true
	writing := c.writing
	if c.pinger != nil {
		c.pinger.Stop()
	}
	if c.expiry != nil {
		c.expiry.Stop()
	}
	c.mu.Unlock()
	if !writing {
		c.ws.CloseNow()
	}
	c.wg.Wait()
}

// Why the server drops a connection (drop).
const (
	dropNoPong      = "no pong"
	dropWriteFailed = "write failed"
)

// drop notes why the server is dropping the connection; the first reason
// wins.
func (c *conn) drop(why string) {
	c.mu.Lock()
	if c.dropped == "" {
		c.dropped = why
	}
	c.mu.Unlock()
}

// statusLost is the close status of a connection that ended without a
// close frame (RFC 6455 §7.1.5).
const statusLost websocket.StatusCode = 1006

// ended says why the connection ended, for the close log: who ended it and
// the close status; kind is the same for metrics (an End constant). err is
// what the reader's last Read returned.
func (c *conn) ended(err error) (end string, status websocket.StatusCode, kind string) {
	c.mu.Lock()
	code, reason, dropped := c.closeCode, c.closeReason, c.dropped
	c.mu.Unlock()
	switch {
	case code != 0:
		return "server closed: " + reason, code, serverEnd(code)
	case dropped == dropNoPong:
		return "server dropped: " + dropped, statusLost, EndNoPong
	case dropped != "":
		return "server dropped: " + dropped, statusLost, EndWriteFailed
	case errors.Is(err, websocket.ErrMessageTooBig):
		return "frame too large", websocket.StatusMessageTooBig, EndFrameTooLarge
	case websocket.CloseStatus(err) != -1:
		return "client closed", websocket.CloseStatus(err), EndClientClosed
	case c.bc != nil && c.bc.failed(): // a pong or a close reply the reader wrote
		return "server dropped: " + dropWriteFailed, statusLost, EndWriteFailed
	}
	return "connection lost", statusLost, EndLost
}

// serverEnd names, for metrics, a close the server chose.
func serverEnd(code websocket.StatusCode) string {
	switch code {
	case websocket.StatusServiceRestart:
		return EndRestart
	case websocket.StatusTryAgainLater:
		return EndTooSlow
	case wsproto.CloseSessionReplaced:
		return EndReplaced
	case wsproto.CloseTokenExpired:
		return EndTokenExpired
	}
	return EndServerOther
}
