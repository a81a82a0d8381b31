package orchestrator

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchConn is the network connection under a connection's websocket.Conn.
// coder/websocket flushes every message it writes: one write(2), one TCP
// segment each. While the writer drains a batch of queued frames (hold ...
// release), batchConn gathers what the library writes in memory instead and
// sends it in one write at release, with one deadline for the whole batch.
// Outside a batch — pongs and close frames from the reader, pings, the
// close handshake — writes go straight through, each with its own deadline.
// Writes keep their order: they are serialized by the library, and the
// mutex orders a release against the writes around it.
//
// A write to the network that fails or times out may have sent part of a
// frame, and the peer would read whatever came next as the rest of it: a
// corrupt stream. So the first failed write breaks the connection for
// good: it is closed at the TCP level, what a batch still held is
// dropped, and every later write — the rest of the batch, a ping, a pong,
// a close frame — fails without reaching the network. The peer reads a
// prefix of valid frames and then the end of the stream, and resumes.
type batchConn struct {
	net.Conn
	timeout time.Duration // bounds every write to the network

	mu      sync.Mutex
	holding bool
	buf     *[]byte // what a batch gathered; from batchBufs while holding
	broken  error   // the failed write that ended the connection; nil before
}

// batchBufs lends batch buffers to writers: an idle connection holds none.
var batchBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxKeptBatch is the most a batch gathers before it writes what it has:
// a big replay takes a write per 256 KiB, not a copy of itself. It is also
// the largest buffer given back to batchBufs; one grown by a single frame
// larger than that is left to the collector.
const maxKeptBatch = 256 << 10

// hold starts gathering writes.
func (b *batchConn) hold() {
	b.mu.Lock()
	b.holding = true
	if b.buf == nil {
		b.buf = batchBufs.Get().(*[]byte)
	}
	b.mu.Unlock()
}

// release stops gathering and writes what was gathered in one write. The
// buffer stays for the next batch, until idle.
func (b *batchConn) release() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	if b.broken != nil {
		return b.broken
	}
	if b.buf == nil || len(*b.buf) == 0 {
		return nil
	}
	_, err := b.writeLocked(*b.buf)
	*b.buf = (*b.buf)[:0]
	return err
}

// idle gives the buffer back: the writer has nothing more to write.
func (b *batchConn) idle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil || b.holding {
		return
	}
	if cap(*b.buf) <= maxKeptBatch {
		batchBufs.Put(b.buf)
	}
	b.buf = nil
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holding {
		if b.broken != nil {
			return 0, b.broken
		}
		if n := len(*b.buf); n > 0 && n+len(p) > maxKeptBatch { // a big batch leaves in parts
			if _, err := b.writeLocked(*b.buf); err != nil {
				return 0, err
			}
			*b.buf = (*b.buf)[:0]
		}
		*b.buf = append(*b.buf, p...)
		return len(p), nil
	}
	return b.writeLocked(p)
}

// failed reports whether a write has failed: nothing more reaches the
// network.
func (b *batchConn) failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.broken != nil
}

// writeLocked writes p to the network under the write deadline, unless a
// write has failed before; a failure now breaks the connection.
func (b *batchConn) writeLocked(p []byte) (int, error) {
	if b.broken != nil {
		return 0, b.broken
	}
	err := b.Conn.SetWriteDeadline(time.Now().Add(b.timeout))
	n := 0
	if err == nil {
		n, err = b.Conn.Write(p)
	}
	if err != nil {
		b.breakLocked(err)
	}
	return n, err
}

// lingerTimeout bounds how long Close waits for the client to stop
// sending, and lingerIdle how long it waits for the client's next bytes:
// a client that sends nothing (one gone silent, the usual reason to close)
// costs lingerIdle, not lingerTimeout.
const (
	lingerTimeout = time.Second
	lingerIdle    = 50 * time.Millisecond
)

// Close closes the connection once the client has stopped sending (its
// FIN, or lingerIdle without a byte), lingerTimeout at most: the server's
// side is half-closed first and what arrives meanwhile is read and
// dropped. A socket closed with bytes unread is reset (RST), and the
// client's stack may then drop the close frame it had been sent before the
// reset: a client still writing — the rest of a frame too large (1009),
// frames past the rate limit — would see a reset where the contract
// promises a close code. A connection broken by a failed write
// (breakLocked) is closed already, at once.
func (b *batchConn) Close() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		b.drain()
	}
	return b.Conn.Close()
}

// drain reads and drops what the client sends until it stops (Close).
func (b *batchConn) drain() {
	end := time.Now().Add(lingerTimeout)
	buf := make([]byte, 4<<10)
	for {
		next := time.Now().Add(lingerIdle)
		if next.After(end) {
			next = end
		}
		if b.Conn.SetReadDeadline(next) != nil {
			return
		}
		if _, err := b.Conn.Read(buf); err != nil {
			return // EOF, the deadline, or a reset
		}
	}
}

// breakLocked ends the connection after the write that failed with err:
// no frame may follow a part of one, and the close handshake is a frame
// too, so the socket is closed without one.
func (b *batchConn) breakLocked(err error) {
	b.broken = fmt.Errorf("connection broken by a failed write: %w", err)
	if b.buf != nil {
		*b.buf = (*b.buf)[:0]
	}
	b.Conn.Close()
}

// Buffer sizes of an upgraded connection. Client frames are small, so a
// read buffer of 1 KiB rarely splits one; the writer's buffer only gathers
// a frame's header (a payload larger than what is left goes past it), and
// holds a whole control frame (at most 2+4+125 bytes).
const (
	upgradeReadBuf  = 1 << 10
	upgradeWriteBuf = 256
)

// upgrader hands coder/websocket a batchConn when it hijacks the HTTP
// connection, with buffers of its own in place of net/http's 4 KiB ones:
// once the handler returns, net/http's connection, buffers and request
// are garbage.
type upgrader struct {
	http.ResponseWriter
	timeout time.Duration
	conn    *batchConn // set by Hijack
}

func (u *upgrader) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(u.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if brw.Writer.Buffered() > 0 { // net/http flushes the handshake's answer first; in case it did not
		if err := brw.Writer.Flush(); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	u.conn = &batchConn{Conn: nc, timeout: u.timeout}
	br := bufio.NewReaderSize(u.conn, upgradeReadBuf)
	if n := brw.Reader.Buffered(); n > 0 { // the client wrote ahead of the handshake's answer
		// Buffered in the reader handed on, not merely readable from it:
		// coder/websocket keeps what its reader has buffered and reads the
		// rest from the connection (it resets the reader), so bytes behind
		// a reader of the reader would be lost, and the stream with them.
		ahead, _ := brw.Reader.Peek(n)
		br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), u.conn), max(upgradeReadBuf, n))
		if _, err := br.Peek(n); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	return u.conn, bufio.NewReadWriter(br, bufio.NewWriterSize(u.conn, upgradeWriteBuf)), nil
}
