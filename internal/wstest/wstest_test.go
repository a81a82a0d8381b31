package wstest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	connected = `{"event":"system.connected","event_id":"e0","session_id":"s","timestamp":"2025-01-01T00:00:00Z",` +
		`"metadata":{"session_id":"s","resume_token":"tok"}}`
	planned = `{"event":"plan.start","event_id":"e1","seq":1,"session_id":"s","timestamp":"2025-01-01T00:00:00Z","metadata":{}}`
)

// script serves one WebSocket that writes frames as they are, then closes
// with code; what the client sent goes to got, and the handshake's headers
// to headers.
type script struct {
	frames  []string
	binary  bool // the first frame goes as a binary frame
	code    websocket.StatusCode
	read    int // client frames to read before writing
	got     chan string
	headers chan http.Header
}

func (s *script) serve(t *testing.T) string {
	t.Helper()
	s.got = make(chan string, 16)
	s.headers = make(chan http.Header, 1)
	var wg sync.WaitGroup
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wg.Add(1)
		defer wg.Done()
		s.headers <- r.Header.Clone()
		if r.Header.Get("Authorization") == "Bearer bad" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ctx := r.Context()
		for range s.read {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			s.got <- string(b)
		}
		for i, f := range s.frames {
			typ := websocket.MessageText
			if i == 0 && s.binary {
				typ = websocket.MessageBinary
			}
			if ws.Write(ctx, typ, []byte(f)) != nil {
				return
			}
		}
		if s.code != 0 {
			ws.Close(s.code, "")
		}
	}))
	t.Cleanup(func() { hs.Close(); wg.Wait() })
	return "ws" + strings.TrimPrefix(hs.URL, "http")
}

// TestReadChecksEnvelope: a frame that breaks one of the envelope's
// invariants is an error of Read; a sound one is not.
func TestReadChecksEnvelope(t *testing.T) {
	tests := []struct {
		name   string
		frame  string
		binary bool
		want   string // in the error; "" for none
	}{
		{"system.connected", connected, false, ""},
		{"a sequenced event", planned, false, ""},
		{"a binary frame", connected, true, "binary"},
		{"not JSON", `{"event":`, false, "decode"},
		{"no metadata", strings.Replace(planned, `,"metadata":{}`, ``, 1), false, "bad envelope"},
		{"null metadata", strings.Replace(planned, `"metadata":{}`, `"metadata":null`, 1), false, "bad envelope"},
		{"no event id", strings.Replace(planned, `"event_id":"e1",`, ``, 1), false, "bad envelope"},
		{"no session id", strings.Replace(planned, `"session_id":"s",`, ``, 1), false, "bad envelope"},
		{"no timestamp", strings.Replace(planned, `"timestamp":"2025-01-01T00:00:00Z",`, ``, 1), false, "bad envelope"},
		{"a sequenced event without seq", strings.Replace(planned, `"seq":1,`, ``, 1), false, "seq presence"},
		{"system.connected with a seq", strings.Replace(connected, `"event_id":"e0",`, `"event_id":"e0","seq":1,`, 1), false, "seq presence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := (&script{frames: []string{tt.frame}, binary: tt.binary}).serve(t)
			c := wstest.Dial(t, url, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			f, err := c.Read(ctx)
			if tt.want == "" {
				if err != nil || f.Received.IsZero() {
					t.Fatalf("Read = %+v, %v; want the frame, received now", f, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Read error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestSendAndExpect: what the Send methods write reaches the server as
// written; Connect, Expect, Until and CloseCode read what it answers, and
// OnConnected sees every system.connected.
func TestSendAndExpect(t *testing.T) {
	s := &script{read: 3, frames: []string{connected, planned, connected}, code: 4001}
	url := s.serve(t)
	var tokens []string
	c := wstest.Dial(t, url, &wstest.Options{
		HTTPHeader:  http.Header{"X-Test": {"yes"}},
		OnConnected: func(m wsproto.Connected) { tokens = append(tokens, m.ResumeToken) },
	})
	if h := <-s.headers; h.Get("X-Test") != "yes" {
		t.Fatalf("the handshake's headers %v, want X-Test", h)
	}
	c.Send(wsproto.EventUserAck, nil)
	c.Message("hello")
	c.Respond("step-1", map[string]any{"confirmed": true})
	for _, want := range []string{
		`{"event":"user.ack"}`,
		`{"content":"hello","event":"user.message"}`,
		`{"event":"user.response","metadata":{"confirmed":true},"step_id":"step-1"}`,
	} {
		if got := <-s.got; got != want {
			t.Fatalf("sent %s, want %s", got, want)
		}
	}
	var hello wsproto.Connected
	c.ExpectMeta(wsproto.EventConnected, &hello)
	if hello.ResumeToken != "tok" {
		t.Fatalf("system.connected %+v", hello)
	}
	if got := c.Until(wsproto.EventConnected); len(got) != 2 || got[0].Seq != 1 {
		t.Fatalf("Until read %+v", got)
	}
	if code := c.CloseCode(); code != 4001 {
		t.Fatalf("CloseCode %d, want 4001", code)
	}
	if len(tokens) != 2 {
		t.Fatalf("OnConnected saw %q, want two tokens", tokens)
	}
}

// TestTryDialRefused: a refused handshake is TryDial's error, with the
// response.
func TestTryDialRefused(t *testing.T) {
	url := (&script{}).serve(t)
	c, resp, err := wstest.TryDial(t, url, &wstest.Options{HTTPHeader: http.Header{"Authorization": {"Bearer bad"}}})
	if c != nil || err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("TryDial = %v, %v, %v; want a 401", c, resp, err)
	}
}

// TestOptionsNotModified: a Conn takes its defaults without writing them
// into the caller's Options.
func TestOptionsNotModified(t *testing.T) {
	url := (&script{frames: []string{connected}}).serve(t)
	opts := &wstest.Options{}
	wstest.Connect(t, url, opts)
	if opts.Timeout != 0 || opts.ReadLimit != 0 {
		t.Fatalf("Options modified: %+v", opts)
	}
}
