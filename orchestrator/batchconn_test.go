package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// recordConn is a net.Conn that records the writes reaching it.
type recordConn struct {
	net.Conn
	mu     sync.Mutex
	writes []string
}

func (r *recordConn) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, string(p))
	r.mu.Unlock()
	return len(p), nil
}

func (r *recordConn) SetWriteDeadline(time.Time) error { return nil }

func TestBatchConnWrites(t *testing.T) {
	big := strings.Repeat("x", maxKeptBatch-1)
	tests := []struct {
		name  string
		steps []string // "hold", "release", or bytes to write
		want  []string // the writes that reach the network
	}{
		{"outside a batch, each write goes through", []string{"a", "b"}, []string{"a", "b"}},
		{"a batch leaves in one write", []string{"hold", "a", "b", "c", "release"}, []string{"abc"}},
		{"writes around a batch keep their order", []string{"a", "hold", "b", "c", "release", "d"}, []string{"a", "bc", "d"}},
		{"an empty batch writes nothing", []string{"hold", "release", "a"}, []string{"a"}},
		{"batches one after another", []string{"hold", "a", "release", "hold", "b", "c", "release"}, []string{"a", "bc"}},
		{"a big batch leaves in parts of at most maxKeptBatch", []string{"hold", big[:100<<10], big[:100<<10], big, "a", "b", "release"},
			[]string{big[:200<<10], big + "a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := &recordConn{}
			bc := &batchConn{Conn: rc, timeout: time.Second}
			for _, s := range tt.steps {
				switch s {
				case "hold":
					bc.hold()
				case "release":
					if err := bc.release(); err != nil {
						t.Fatal(err)
					}
				default:
					if n, err := bc.Write([]byte(s)); n != len(s) || err != nil {
						t.Fatalf("Write(%q) = %d, %v", s, n, err)
					}
				}
			}
			if !slices.Equal(rc.writes, tt.want) {
				t.Fatalf("writes of %v bytes, want %v", lens(rc.writes), lens(tt.want))
			}
			bc.idle()
			if bc.buf != nil {
				t.Fatal("an idle batchConn still holds a buffer")
			}
		})
	}
}

func lens(ss []string) []int {
	n := make([]int, len(ss))
	for i, s := range ss {
		n[i] = len(s)
	}
	return n
}

// A batch written to a peer that does not read fails at its deadline, and
// a write outside a batch too: neither blocks longer.
func TestBatchConnDeadline(t *testing.T) {
	server, peer := net.Pipe() // unbuffered: nothing is written until the peer reads
	defer peer.Close()
	bc := &batchConn{Conn: server, timeout: 50 * time.Millisecond}
	defer bc.Close()
	for _, batch := range []bool{true, false} {
		start := time.Now()
		var err error
		if batch {
			bc.hold()
			bc.Write([]byte("frame"))
			err = bc.release()
		} else {
			_, err = bc.Write([]byte("frame"))
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("batch %v: err %v, want a deadline exceeded", batch, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("batch %v: the write took %v", batch, d)
		}
	}
}

// countingListener counts the writes of the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A replay of 1,000 events leaves in a handful of writes, not one per
// frame, and the client gets every frame, byte for byte and in order,
// then the close code the server chose after them.
func TestReplayBatched(t *testing.T) {
	srv, err := New(simModels(), &Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) }) // after the connection's cleanup
	var writes atomic.Int64
	hs := httptest.NewUnstartedServer(srv)
	hs.Listener = countingListener{hs.Listener, &writes}
	hs.Start()
	t.Cleanup(hs.Close)

	old, token, _ := srv.newSession(context.Background(), "")
	for range 1000 {
		old.emit(wsproto.EventSolverProgress, "", "Working through it", progressMeta)
	}
	want, err := old.ring.Since(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := wstest.Dial(t, "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	c.Expect(wsproto.EventConnected) // the fresh session's
	before := writes.Load()
	c.Send(wsproto.EventUserReconnect, map[string]any{"session_id": old.id, "resume_token": token, "last_seq": 0})
	var hello wsproto.Connected
	if c.ExpectMeta(wsproto.EventConnected, &hello); !hello.Resumed {
		t.Fatalf("resume answered %+v", hello)
	}
	for i, e := range want {
		data, err := c.ReadRaw(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if !bytes.Equal(data, e.Data) {
			t.Fatalf("frame %d is %s, want %s", i+1, data, e.Data)
		}
	}
	if n := writes.Load() - before; n > 10 {
		t.Fatalf("1,001 frames took %d writes", n)
	}

	old.mu.Lock()
	member := old.members[0].c
	old.mu.Unlock()
	member.closeFlushed(websocket.StatusServiceRestart, "bye")
	if f, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusServiceRestart {
		t.Fatalf("after the replay: %s %v, want a close with 1012", f.Event, err)
	}
}

// stallConn is a peer that takes room bytes and then stops reading: the
// write that does not fit sends what does and times out. Then it reads
// again, so a write after the failed one would reach it.
type stallConn struct {
	net.Conn
	room   int
	wire   []byte // what reached the peer
	failed bool
	closed bool
}

func (s *stallConn) Write(p []byte) (int, error) {
	if s.closed {
		return 0, net.ErrClosed
	}
	if s.failed || len(p) <= s.room {
		s.room -= len(p)
		s.wire = append(s.wire, p...)
		return len(p), nil
	}
	n := s.room
	s.wire = append(s.wire, p[:n]...)
	s.failed = true
	return n, os.ErrDeadlineExceeded
}

func (s *stallConn) SetWriteDeadline(time.Time) error { return nil }
func (s *stallConn) Close() error                     { s.closed = true; return nil }

// Once a write fails part-way, nothing more reaches the network — not the
// rest of the batch, not a write outside one, not another batch — and the
// connection is closed: the peer reads a prefix of what was written, then
// the end.
func TestBatchConnBreaks(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	tests := []struct {
		name  string
		room  int
		steps []string // "hold", "release", or bytes to write
	}{
		{"a big batch's first part fails", 100 << 10, []string{"hold", big, big, "tail", "release", "ping", "hold", "next", "release"}},
		{"the release fails", 5, []string{"hold", "frame one", "frame two", "release", "close frame", "hold", "next", "release"}},
		{"a write outside a batch fails", 3, []string{"pong frame", "close frame", "hold", "next", "release"}},
		{"a batch after a failed one", 4, []string{"hold", "abc", "release", "hold", "defgh", "release", "ping"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := &stallConn{room: tt.room}
			bc := &batchConn{Conn: sc, timeout: time.Second}
			var written []byte // everything the library handed over, in order
			var errs []error
			for _, s := range tt.steps {
				switch s {
				case "hold":
					bc.hold()
				case "release":
					errs = append(errs, bc.release())
				default:
					written = append(written, s...)
					if _, err := bc.Write([]byte(s)); err != nil {
						errs = append(errs, err)
					}
				}
			}
			if !sc.failed {
				t.Fatal("no write failed")
			}
			if want := written[:tt.room]; !bytes.Equal(sc.wire, want) {
				t.Fatalf("the peer got %d bytes, %.40q…; want the first %d written and nothing after", len(sc.wire), sc.wire, len(want))
			}
			if !sc.closed {
				t.Fatal("the connection was not closed after the failed write")
			}
			if !bc.failed() {
				t.Fatal("failed() = false after a failed write")
			}
			if last := errs[len(errs)-1]; !errors.Is(last, os.ErrDeadlineExceeded) {
				t.Fatalf("the last write's error is %v, want the failed write's", last)
			}
			bc.idle()
		})
	}
}
