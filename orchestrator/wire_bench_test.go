package orchestrator

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

var progressMeta = &wsproto.SolverProgress{RunID: "run_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", TaskID: "t2",
	Attempt: 1, Progress: 0.66, Message: "Working through it"}

func benchServer(b *testing.B, opts *Options) (*Server, string) {
	b.Helper()
	if opts == nil {
		opts = &Options{}
	}
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Observer = benchObserver
	srv, err := New(Models{&planner.Sim{}, &solver.Sim{}, &aggregator.Sim{}}, opts)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	b.Cleanup(func() { hs.Close(); srv.Close(context.Background()) })
	return srv, "ws" + strings.TrimPrefix(hs.URL, "http")
}

// readN reads n frames on a client connection and reports when done.
func readN(ws *websocket.Conn, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for range n {
			if _, _, err := ws.Read(context.Background()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

func onlySession(srv *Server) *session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, s := range srv.sessions {
		return s
	}
	return nil
}

// BenchmarkEventPathWebSocket: events emitted by the pipeline and read by a
// client over a real loopback WebSocket — id, encoding, ring, state, queue,
// writer, socket. Compare with BenchmarkBareWebSocket.
func BenchmarkEventPathWebSocket(b *testing.B) {
	srv, url := benchServer(b, &Options{SendQueue: 1 << 24}) // no 1013 while the benchmark outruns the reader
	ws, _, err := websocket.Dial(context.Background(), url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	ws.Read(context.Background()) // system.connected
	sess := onlySession(srv)
	b.ReportAllocs()
	b.ResetTimer()
	done := readN(ws, b.N)
	for range b.N {
		sess.emit(wsproto.EventSolverProgress, "", "Working through it", progressMeta)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBareWebSocket: the ceiling — the same frame, pre-encoded, written
// by a bare coder/websocket server in a loop to the same kind of reader.
func BenchmarkBareWebSocket(b *testing.B) {
	frame, _ := wsproto.AppendFrame(nil, wsproto.Frame{Event: wsproto.EventSolverProgress, EventID: newEventID(time.Now()), Seq: 1234,
		SessionID: "sess_0193a8f2-5a1c-7c4e-9d2b-2f4f5c1e8a77", Timestamp: time.Now(), Content: "Working through it", Metadata: progressMeta})
	n := make(chan int, 1)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for range <-n {
			if ws.Write(context.Background(), websocket.MessageText, frame) != nil {
				return
			}
		}
		ws.Read(context.Background()) // until the client goes
	}))
	defer hs.Close()
	ws, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	b.ReportAllocs()
	b.ResetTimer()
	done := readN(ws, b.N)
	n <- b.N
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkResumeFullRingServer: the server side of a resume that replays a
// full 1,000-event ring: lookup, token check, ring read, system.connected,
// attach and enqueue (not the socket writes).
func BenchmarkResumeFullRingServer(b *testing.B) {
	srv, _ := benchServer(b, nil)
	old, token, _ := srv.newSession(context.Background(), "")
	for range 1000 {
		old.emit(wsproto.EventSolverProgress, "", "Working through it", progressMeta)
	}
	req := &wsproto.Reconnect{SessionID: old.id, ResumeToken: token, LastSeq: 0}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		c := &conn{srv: srv, limit: 1 << 20, writing: true, frames: 1} // no writer: the test reads the queue
		fresh, _, _ := srv.newSession(context.Background(), "")
		c.attach(fresh)
		b.StartTimer()
		if e := srv.resume(c, req); e != nil {
			b.Fatal(e.Message)
		}
		if len(c.queue) != 1001 {
			b.Fatalf("%d frames queued", len(c.queue))
		}
	}
}

// BenchmarkResumeFullRingEndToEnd: a client's whole resume of a full ring
// over loopback: dial, system.connected, reconnect, the 1,001 frames read.
func BenchmarkResumeFullRingEndToEnd(b *testing.B) {
	srv, url := benchServer(b, nil)
	old, token, _ := srv.newSession(context.Background(), "")
	for range 1000 {
		old.emit(wsproto.EventSolverProgress, "", "Working through it", progressMeta)
	}
	reconnect := []byte(`{"event":"user.reconnect_with_state","metadata":{"session_id":"` + old.id +
		`","resume_token":"` + token + `","last_seq":0}}`)
	ctx := context.Background()
	for b.Loop() {
		ws, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		ws.SetReadLimit(1 << 20)
		ws.Read(ctx) // the fresh system.connected
		ws.Write(ctx, websocket.MessageText, reconnect)
		if err := <-readN(ws, 1001); err != nil {
			b.Fatal(err)
		}
		ws.CloseNow()
	}
}
