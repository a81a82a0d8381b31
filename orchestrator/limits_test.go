package orchestrator

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// TestAdmitFrame: which frames the rate limit lets through, which refusals
// are answered, and when the connection is closed, frame by frame on a
// clock the test sets.
func TestAdmitFrame(t *testing.T) {
	type step struct {
		at       time.Duration // since the first frame
		admitted bool
		errors   int                  // rate_limited answers queued so far
		close    websocket.StatusCode // the close asked for so far
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a burst, then refusals answered once, then 1008", []step{
			{0, true, 0, 0}, {0, true, 0, 0}, {0, true, 0, 0}, // the burst
			{0, false, 1, 0}, {0, false, 1, 0}, {0, false, 1, 0}, // the first refusal answered; three refused
			{0, false, 1, websocket.StatusPolicyViolation},           // the fourth is one more than the burst
			{time.Minute, false, 1, websocket.StatusPolicyViolation}, // nothing is applied once closing
		}},
		{"a frame let through starts a new run of refusals", []step{
			{0, true, 0, 0}, {0, true, 0, 0}, {0, true, 0, 0},
			{0, false, 1, 0},
			{time.Second, true, 1, 0}, // one token a second
			{time.Second, false, 2, 0},
			{time.Second, false, 2, 0},
			{time.Second, false, 2, websocket.StatusPolicyViolation}, // the fourth refused within 10 s
		}},
		{"refusals far apart are not abuse", []step{
			{0, true, 0, 0}, {0, true, 0, 0}, {0, true, 0, 0},
			{0, false, 1, 0}, {0, false, 1, 0}, {0, false, 1, 0},
			{11 * time.Second, true, 1, 0}, {11 * time.Second, true, 1, 0}, {11 * time.Second, true, 1, 0},
			{11 * time.Second, false, 2, 0}, // the count starts again: 1 of 3
			{11 * time.Second, false, 2, 0},
			{11 * time.Second, false, 2, 0},
			{11 * time.Second, false, 2, websocket.StatusPolicyViolation},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := New(simModels(), &Options{RateLimit: 1, RateBurst: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			c := newConn(srv, nil, nil, "") // no socket: only the queue and the close asked for are looked at
			c.writing = true                // and no writer
			c.attach(sess)
			start := time.Now()
			for i, s := range tt.steps {
				admitted := c.admitFrame(start.Add(s.at))
				c.mu.Lock()
				errors := 0
				for _, f := range c.queue {
					if bytes.Contains(f, []byte(`"code":"`+wsproto.CodeRateLimited+`"`)) {
						errors++
					}
				}
				code := c.closeCode
				c.mu.Unlock()
				if admitted != s.admitted || errors != s.errors || code != s.close {
					t.Fatalf("frame %d at +%v: admitted %v, %d rate_limited, close %d; want %v, %d, %d",
						i+1, s.at, admitted, errors, code, s.admitted, s.errors, s.close)
				}
			}
		})
	}
}

// TestAdmitUpgrade: the connection limit answers before the upgrade; the
// session cap upgrades with a provisional session, which a frame other
// than a resume closes with 4029; no session's place is held once the
// upgrades are answered.
func TestAdmitUpgrade(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		open        int  // connections that stay open
		status      int  // of the next upgrade
		provisional bool // the next upgrade's session
	}{
		{"no limits", Options{}, 3, http.StatusSwitchingProtocols, false},
		{"per address", Options{MaxConnsPerIP: 3}, 3, http.StatusTooManyRequests, false},
		{"per server", Options{MaxSessions: 3}, 3, http.StatusSwitchingProtocols, true},
		{"under both", Options{MaxConnsPerIP: 4, MaxSessions: 4}, 3, http.StatusSwitchingProtocols, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			srv, err := New(simModels(), &tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			t.Cleanup(func() { hs.Close(); srv.Close(context.Background()) }) // after the connections' cleanups
			url := "ws" + hs.URL[len("http"):]
			for range tt.open {
				wstest.Connect(t, url, nil) // system.connected: the session is made
			}
			c, resp, err := wstest.TryDial(t, url, nil)
			if err == nil {
				// Upgraded: its session is made, or provisional, before
				// system.connected.
				c.Expect(wsproto.EventConnected)
				if tt.provisional {
					c.Send(wsproto.EventUserAck, map[string]any{"last_seq": 0})
					if code := c.CloseCode(); code != wsproto.CloseTooManySessions {
						t.Errorf("after a frame other than a resume: closed with %d, want 4029", code)
					}
				}
				c.WS().CloseNow()
			}
			if resp == nil || resp.StatusCode != tt.status {
				t.Fatalf("response %v (%v), want %d", resp, err, tt.status)
			}
			if tt.status != http.StatusSwitchingProtocols && resp.Header.Get("Retry-After") == "" {
				t.Errorf("no Retry-After")
			}
			srv.mu.Lock()
			making, held := srv.making, len(srv.sessions)
			srv.mu.Unlock()
			want := tt.open // and the next upgrade's, unless refused or provisional
			if err == nil && !tt.provisional {
				want++
			}
			if making != 0 || held != want {
				t.Errorf("%d sessions being made, %d held; want 0 and %d", making, held, want)
			}
		})
	}
}
