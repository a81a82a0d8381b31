package orchestrator

import (
	"bufio"
	"bytes"
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
type batchConn struct {
	net.Conn
	timeout time.Duration // bounds every write to the network

	mu      sync.Mutex
	holding bool
	buf     *[]byte // what a batch gathered; from batchBufs while holding
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

func (b *batchConn) writeLocked(p []byte) (int, error) {
	if err := b.Conn.SetWriteDeadline(time.Now().Add(b.timeout)); err != nil {
		return 0, err
	}
	return b.Conn.Write(p)
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
	var r io.Reader = u.conn
	if n := brw.Reader.Buffered(); n > 0 { // the client wrote ahead of the handshake's answer
		ahead, _ := brw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(ahead)), u.conn)
	}
	return u.conn, bufio.NewReadWriter(bufio.NewReaderSize(r, upgradeReadBuf), bufio.NewWriterSize(u.conn, upgradeWriteBuf)), nil
}
