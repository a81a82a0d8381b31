package edge

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// refusalBody is what a refused connection's answer says, by status.
var refusalBody = map[int]string{
	http.StatusTooManyRequests:    "too many connections from your address\n",
	http.StatusServiceUnavailable: "the server is at its connection limit; try again later\n",
}

// refusal is the whole answer to a refused connection: a minimal
// HTTP/1.1 response that closes it, readable by any HTTP or WebSocket
// client (a WebSocket dial reports its status).
func refusal(status int, retryAfter time.Duration) []byte {
	body := refusalBody[status]
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nRetry-After: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), strconv.Itoa(int(max(retryAfter/time.Second, 1))), len(body), body)
}

// maxRefusedRead bounds what is read of a refused connection's request
// before it is closed anyway.
const maxRefusedRead = 64 << 10

// refuse answers nc with status on a goroutine of the listener's own and
// closes it; beyond MaxRefusing answers under way, or once the listener
// is closed, it closes nc at once.
func (l *Listener) refuse(nc net.Conn, status int) {
	l.mu.Lock()
	if l.closed || len(l.refusing) >= l.opts.MaxRefusing {
		l.mu.Unlock()
		nc.Close()
		return
	}
	l.refusing[nc] = struct{}{}
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		l.answer(nc, status)
		l.mu.Lock()
		delete(l.refusing, nc)
		l.mu.Unlock()
		nc.Close()
	}()
}

// answer reads the request's head, writes the refusal, ends the sending
// side and reads what else the client sends until it closes, all within
// RefuseTimeout. The head first: a client that finds an answer waiting
// before it has sent its request takes it for a stray (Go's
// http.Transport does) and fails without its status. The rest after:
// closing a socket with unread bytes resets the connection, and a reset
// can reach the client before it has read the answer.
func (l *Listener) answer(nc net.Conn, status int) {
	nc.SetDeadline(time.Now().Add(l.opts.RefuseTimeout))
	if !readHead(nc) {
		return
	}
	if _, err := nc.Write(refusal(status, l.opts.RetryAfter)); err != nil {
		return
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(nc, maxRefusedRead))
}

// maxRefusedHead bounds the request head a refused connection's answer
// waits for: past it, the answer is written anyway.
const maxRefusedHead = 16 << 10

// readHead reads r up to the blank line that ends a request's head, or
// maxRefusedHead bytes; it reports false if the connection ended (or its
// deadline passed) first.
func readHead(r io.Reader) bool {
	var tail []byte // the last bytes read, where an end split between reads begins
	chunk := make([]byte, 1024)
	for read := 0; read < maxRefusedHead; {
		n, err := r.Read(chunk)
		read += n
		tail = append(tail, chunk[:n]...)
		if bytes.Contains(tail, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
		tail = tail[max(0, len(tail)-3):]
	}
	return true
}

// shedWriteTimeout bounds the answer to a connection taken on the spare
// descriptor: the accept loop writes it itself, since the descriptor
// must be free again at once.
const shedWriteTimeout = 50 * time.Millisecond

// shedOne trades the spare descriptor for the connection waiting in the
// kernel's backlog: it closes the spare, accepts the connection, answers
// it 503 and closes it, then opens the spare again. It reports false when
// there was no spare to trade (one could not be opened since the last
// trade): the caller waits before accepting again.
func (l *Listener) shedOne() bool {
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	if l.spare == nil {
		l.spare = openSpare()
		return false
	}
	l.spare.Close()
	l.spare = nil
	nc, err := l.ln.Accept()
	if err == nil {
		l.shed.Add(1)
		nc.SetWriteDeadline(time.Now().Add(shedWriteTimeout))
		nc.Write(refusal(http.StatusServiceUnavailable, l.opts.RetryAfter))
		nc.Close()
	}
	l.spare = openSpare()
	return true
}
