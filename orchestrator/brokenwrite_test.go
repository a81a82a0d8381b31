package orchestrator

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// failListener tells, by closing failed, when a write to one of the
// connections it accepted first fails.
type failListener struct {
	net.Listener
	once   sync.Once
	failed chan struct{}
}

func (l *failListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &failConn{Conn: c, l: l}, nil
}

type failConn struct {
	net.Conn
	l *failListener
}

func (c *failConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.l.once.Do(func() { close(c.l.failed) })
	}
	return n, err
}

// endsObserver records how connections ended.
type endsObserver struct {
	nopObserver
	ends chan string
}

func (o endsObserver) ConnClosed(end string) { o.ends <- end }

// A peer that stops reading in the middle of a big replay makes the
// server's write time out part-way through a frame. Then nothing more may
// reach it — no rest of the batch, no close frame, no ping: the bytes it
// finally reads are valid frames, perhaps the start of one more, and the
// end of the stream. And the session resumes from the last whole frame.
func TestBrokenWriteEndsStream(t *testing.T) {
	obs := endsObserver{ends: make(chan string, 10)}
	srv, err := New(simModels(), &Options{Logger: quiet(), Observer: obs, WriteTimeout: 200 * time.Millisecond, PingInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) }) // after the connection's cleanup
	hs := httptest.NewUnstartedServer(srv)
	fl := &failListener{Listener: hs.Listener, failed: make(chan struct{})}
	hs.Listener = fl
	hs.Start()
	t.Cleanup(hs.Close)

	// 1,000 events of 16 KiB: far more than the two sockets' buffers hold.
	old, token, _ := srv.newSession(context.Background(), "")
	content := strings.Repeat("w", 16<<10)
	for range 1000 {
		old.emit(wsproto.EventSolverProgress, "", content, progressMeta)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peer, r := dialRaw(t, ctx, hs.Listener.Addr().String())
	defer peer.Close()
	if _, err := readFrame(r); err != nil { // the fresh session's system.connected
		t.Fatal(err)
	}
	reconnect, _ := json.Marshal(map[string]any{"event": wsproto.EventUserReconnect,
		"metadata": map[string]any{"session_id": old.id, "resume_token": token, "last_seq": 0}})
	if _, err := peer.Write(maskedText(reconnect)); err != nil {
		t.Fatal(err)
	}
	// The peer stops reading until a write to it has failed.
	select {
	case <-fl.failed:
	case <-ctx.Done():
		t.Fatal("no write to the peer failed")
	}
	peer.SetReadDeadline(time.Now().Add(20 * time.Second))
	rest, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading what reached the peer: %v", err)
	}
	frames, tail, err := splitServerFrames(rest)
	if err != nil {
		t.Fatalf("what reached the peer after %d whole frames: %v", len(frames), err)
	}
	last := int64(0)
	for i, f := range frames {
		if f.opcode == 9 { // a ping
			continue
		}
		if f.opcode != 1 {
			t.Fatalf("frame %d has opcode %d; want text frames and pings only, no close after a write stopped part-way", i, f.opcode)
		}
		var e struct {
			Seq      int64
			Metadata struct {
				ResumeToken string `json:"resume_token"`
			}
		}
		if err := json.Unmarshal(f.payload, &e); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if e.Seq != last+1 && (e.Seq != 0 || last != 0) { // the resume's system.connected has no seq
			t.Fatalf("frame %d has seq %d after %d", i, e.Seq, last)
		}
		if e.Seq == 0 {
			token = e.Metadata.ResumeToken // the resume rotated it
		}
		last = e.Seq
	}
	if last == 1000 {
		t.Fatal("the peer got every frame: no write stopped part-way")
	}
	t.Logf("the peer read %d whole frames up to seq %d, then %d bytes of one more, then the end", len(frames), last, tail)

	select { // counted as the server's drop it is
	case end := <-obs.ends:
		if end != EndWriteFailed {
			t.Fatalf("the connection ended %q, want %q", end, EndWriteFailed)
		}
	case <-ctx.Done():
		t.Fatal("the connection's end was not observed")
	}

	// The session is kept: a resume from the last whole frame gets the rest.
	c := wstest.Dial(t, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	c.Expect(wsproto.EventConnected)
	c.Send(wsproto.EventUserReconnect, map[string]any{"session_id": old.id, "resume_token": token, "last_seq": last})
	var hello wsproto.Connected
	if f := c.ExpectMeta(wsproto.EventConnected, &hello); !hello.Resumed || hello.Replayed == nil || *hello.Replayed != int(1000-last) {
		t.Fatalf("the resume from seq %d answered %.200s; want %d replayed", last, f.Metadata, 1000-last)
	}
}

// dialRaw opens a TCP connection with a small receive buffer and does the
// WebSocket handshake by hand, so the test sees every byte the server
// sends.
func dialRaw(t *testing.T, ctx context.Context, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
		return errors.Join(err, serr)
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", addr)
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the handshake: %v", err)
		}
		if strings.HasPrefix(line, "HTTP/1.1 ") && !strings.HasPrefix(line, "HTTP/1.1 101") {
			t.Fatalf("the handshake: %s", line)
		}
		if line == "\r\n" {
			return c, r
		}
	}
}

// maskedText is a client's text frame of p.
func maskedText(p []byte) []byte {
	key := [4]byte{1, 2, 3, 4}
	f := []byte{0x81}
	switch {
	case len(p) < 126:
		f = append(f, 0x80|byte(len(p)))
	default:
		f = append(f, 0x80|126, byte(len(p)>>8), byte(len(p)))
	}
	f = append(f, key[:]...)
	for i, b := range p {
		f = append(f, b^key[i%4])
	}
	return f
}

type frame struct {
	opcode  byte
	payload []byte
}

// readFrame reads one whole server frame.
func readFrame(r *bufio.Reader) (frame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := int64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return frame{}, err
		}
		n = int64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return frame{}, err
		}
		n = int64(binary.BigEndian.Uint64(l[:]))
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r, p)
	return frame{h[0] & 0x0f, p}, err
}

// splitServerFrames splits what a server sent into whole frames and the
// length of an incomplete last one, checking every header on the way: a
// final frame (no fragments), no reserved bits (compression is off), a
// known opcode, no mask, and nothing after a close frame.
func splitServerFrames(b []byte) (frames []frame, tail int, err error) {
	for off := 0; off < len(b); {
		if len(frames) > 0 && frames[len(frames)-1].opcode == 8 {
			return frames, 0, fmt.Errorf("%d bytes after a close frame", len(b)-off)
		}
		h := b[off:]
		if len(h) >= 1 {
			if h[0]&0x80 == 0 || h[0]&0x70 != 0 {
				return frames, 0, fmt.Errorf("at byte %d: a header byte %#x (want FIN, no reserved bits)", off, h[0])
			}
			switch h[0] & 0x0f {
			case 1, 8, 9, 10:
			default:
				return frames, 0, fmt.Errorf("at byte %d: opcode %d", off, h[0]&0x0f)
			}
		}
		if len(h) < 2 {
			return frames, len(h), nil
		}
		if h[1]&0x80 != 0 {
			return frames, 0, fmt.Errorf("at byte %d: a masked server frame", off)
		}
		size, n := 2, int(h[1]&0x7f)
		switch n {
		case 126:
			size += 2
			if len(h) < size {
				return frames, len(h), nil
			}
			n = int(binary.BigEndian.Uint16(h[2:]))
		case 127:
			size += 8
			if len(h) < size {
				return frames, len(h), nil
			}
			n = int(binary.BigEndian.Uint64(h[2:]))
			if n < 0 || n > 1<<30 {
				return frames, 0, fmt.Errorf("at byte %d: a frame of %d bytes", off, n)
			}
		}
		if h[0]&0x0f != 1 && n > 125 {
			return frames, 0, fmt.Errorf("at byte %d: a control frame of %d bytes", off, n)
		}
		if len(h) < size+n {
			if h[0]&0x0f == 1 && !strings.HasPrefix(`{"event":`, string(h[size:min(len(h), size+9)])) {
				return frames, 0, fmt.Errorf("at byte %d: the last, cut frame starts %.20q", off, h[size:])
			}
			return frames, len(h), nil
		}
		frames = append(frames, frame{h[0] & 0x0f, h[size : size+n]})
		off += size + n
	}
	return frames, 0, nil
}
