package inproc_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/inproc"
)

// TestDial: the handler sees the client's address and headers, answers
// over the in-memory connection, and a refused upgrade is the handler's
// status.
func TestDial(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer ok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := context.Background()
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			ws.Write(ctx, websocket.MessageText, []byte(r.RemoteAddr+" "+r.URL.RawQuery+" "+string(b)))
		}
	})
	s := inproc.Serve(h)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, tt := range []struct {
		name, remote, auth string
		status             int
	}{
		{name: "accepted", remote: "203.0.113.7:5555", auth: "Bearer ok"},
		{name: "another client", remote: "[2001:db8::1]:443", auth: "Bearer ok"},
		{name: "refused", remote: "203.0.113.8:1", auth: "Bearer no", status: http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ws, resp, err := s.Dial(ctx, "/ws?x=1", tt.remote, http.Header{"Authorization": {tt.auth}})
			if tt.status != 0 {
				if err == nil || resp == nil || resp.StatusCode != tt.status {
					t.Fatalf("dial: %v (%v), want status %d", err, resp, tt.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ws.CloseNow()
			if err := ws.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
				t.Fatal(err)
			}
			_, b, err := ws.Read(ctx)
			if want := tt.remote + " x=1 hello"; err != nil || string(b) != want {
				t.Fatalf("read %q, %v; want %q", b, err, want)
			}
		})
	}
}

// TestClose: after Close no dial succeeds.
func TestClose(t *testing.T) {
	s := inproc.Serve(http.NotFoundHandler())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := s.Dial(ctx, "/", "192.0.2.1:1", nil); err == nil {
		t.Fatal("dialled a closed server")
	}
}
