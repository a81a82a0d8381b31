package asyncapitest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Tap records, byte for byte, what every WebSocket connection of a handler
// reads and writes once upgraded, and splits it into messages afterwards. It
// sits where the handler hijacks the connection, so nothing is added on the
// wire: no extra hop, no buffering, the server's own back-pressure and close
// codes. The zero value is ready to use; it is safe for concurrent use.
type Tap struct {
	mu    sync.Mutex // guards conns
	conns []*recorder
}

// Handler returns h recording every connection it hijacks.
func (t *Tap) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&hijacker{ResponseWriter: w, tap: t}, r)
	})
}

// Message is one WebSocket data message.
type Message struct {
	Conn   int  // the connection's number, in hijack order
	Binary bool // a binary message; otherwise text
	Data   []byte
}

// Messages returns the data messages each side sent on every connection
// recorded so far, in order per connection and direction. A frame cut short
// by the connection's end is left out; a frame that breaks RFC 6455 — a
// server frame masked, a client frame unmasked, a reserved bit set (Baton
// has compression off) — is an error.
func (t *Tap) Messages() (fromClient, fromServer []Message, err error) {
	t.mu.Lock()
	conns := append([]*recorder(nil), t.conns...)
	t.mu.Unlock()
	for i, c := range conns {
		c.mu.Lock()
		in, out := bytes.Clone(c.in.Bytes()), bytes.Clone(c.out.Bytes())
		c.mu.Unlock()
		cm, err := splitMessages(in, true)
		if err != nil {
			return nil, nil, fmt.Errorf("connection %d, client frames: %w", i, err)
		}
		sm, err := splitMessages(out, false)
		if err != nil {
			return nil, nil, fmt.Errorf("connection %d, server frames: %w", i, err)
		}
		for _, m := range cm {
			m.Conn = i
			fromClient = append(fromClient, m)
		}
		for _, m := range sm {
			m.Conn = i
			fromServer = append(fromServer, m)
		}
	}
	return fromClient, fromServer, nil
}

// hijacker hands the upgrading handler a recording connection.
type hijacker struct {
	http.ResponseWriter
	tap *Tap
}

func (h *hijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("asyncapitest: the ResponseWriter cannot be hijacked")
	}
	conn, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Whatever the server had buffered either way goes through as is: the
	// response head out, and bytes the client sent early in.
	if err := brw.Writer.Flush(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	early, _ := brw.Reader.Peek(brw.Reader.Buffered())
	rec := &recorder{Conn: conn, early: bytes.Clone(early)}
	h.tap.mu.Lock()
	h.tap.conns = append(h.tap.conns, rec)
	h.tap.mu.Unlock()
	return rec, bufio.NewReadWriter(bufio.NewReader(rec), bufio.NewWriter(rec)), nil
}

// recorder is a net.Conn that keeps a copy of every byte read and written.
type recorder struct {
	net.Conn

	mu    sync.Mutex   // guards the fields below
	early []byte       // read before the hijack, handed out first
	in    bytes.Buffer // client → server
	out   bytes.Buffer // server → client
}

// CloseWrite half-closes the connection under r, as the server's own
// connection does (a lingering close waits for the client's FIN).
func (r *recorder) CloseWrite() error {
	if cw, ok := r.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (r *recorder) Read(p []byte) (int, error) {
	r.mu.Lock()
	if len(r.early) > 0 {
		n := copy(p, r.early)
		r.early = r.early[n:]
		r.in.Write(p[:n])
		r.mu.Unlock()
		return n, nil
	}
	r.mu.Unlock()
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.in.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

func (r *recorder) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	r.mu.Lock()
	r.out.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

// WebSocket opcodes (RFC 6455 §5.2).
const (
	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
)

// splitMessages parses a stream of WebSocket frames into data messages,
// joining fragments and skipping control frames. masked is whether the
// sender must mask (a client).
func splitMessages(b []byte, masked bool) ([]Message, error) {
	var out []Message
	var cur *Message // a fragmented message in progress
	for len(b) > 0 {
		if len(b) < 2 {
			break // cut short
		}
		fin, rsv, op := b[0]&0x80 != 0, b[0]&0x70, b[0]&0x0F
		mask, n, hdr := b[1]&0x80 != 0, uint64(b[1]&0x7F), 2
		switch n {
		case 126:
			if len(b) < 4 {
				return out, nil
			}
			n, hdr = uint64(binary.BigEndian.Uint16(b[2:4])), 4
		case 127:
			if len(b) < 10 {
				return out, nil
			}
			n, hdr = binary.BigEndian.Uint64(b[2:10]), 10
		}
		if rsv != 0 {
			return nil, fmt.Errorf("a frame with reserved bits %#x (compression is off)", rsv)
		}
		if mask != masked {
			return nil, fmt.Errorf("a frame with mask %v, want %v", mask, masked)
		}
		var key []byte
		if mask {
			if len(b) < hdr+4 {
				return out, nil
			}
			key, hdr = b[hdr:hdr+4], hdr+4
		}
		if uint64(len(b)-hdr) < n {
			return out, nil // cut short by the connection's end
		}
		payload := bytes.Clone(b[hdr : hdr+int(n)])
		if key != nil {
			for i := range payload {
				payload[i] ^= key[i%4]
			}
		}
		b = b[hdr+int(n):]
		switch {
		case op == opClose:
			return out, nil // nothing after a close frame counts
		case op&0x8 != 0: // ping, pong
			continue
		case op == opContinuation:
			if cur == nil {
				return nil, errors.New("a continuation frame with no message to continue")
			}
			cur.Data = append(cur.Data, payload...)
		case op == opText || op == opBinary:
			if cur != nil {
				return nil, errors.New("a new message inside a fragmented one")
			}
			cur = &Message{Binary: op == opBinary, Data: payload}
		default:
			return nil, fmt.Errorf("a frame with the reserved opcode %#x", op)
		}
		if fin {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out, nil
}
