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

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/wsproto"
)

// capServer serves srv over real WebSockets, each connection from the
// address its dialer names in the X-Test-Peer header (the TCP peer is
// always loopback here), authenticated as the subject of its
// "Authorization: Bearer SUBJECT" header, if any.
func capServer(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Authenticate = func(r *http.Request) (auth.Identity, error) {
		sub, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		return auth.Identity{Subject: sub}, nil
	}
	srv, err := New(simModels(), &opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if peer := r.Header.Get("X-Test-Peer"); peer != "" {
			r.RemoteAddr = peer
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { hs.Close(); srv.Close(context.Background()) })
	return srv, "ws" + hs.URL[len("http"):]
}

// capConn is a test connection and its system.connected.
type capConn struct {
	*wstest.Conn
	hello wsproto.Connected
}

// dialCap connects from peer as subject; nil and the response when the
// upgrade is refused.
func dialCap(t *testing.T, url, peer, subject string) (*capConn, *http.Response) {
	t.Helper()
	h := http.Header{"X-Test-Peer": {peer}}
	if subject != "" {
		h.Set("Authorization", "Bearer "+subject)
	}
	ws, resp, err := wstest.TryDial(t, url, &wstest.Options{HTTPHeader: h})
	if err != nil {
		return nil, resp
	}
	c := &capConn{Conn: ws}
	c.ExpectMeta(wsproto.EventConnected, &c.hello)
	return c, resp
}

func (c *capConn) resume(hello wsproto.Connected) {
	c.Send(wsproto.EventUserReconnect, map[string]any{"session_id": hello.SessionID, "resume_token": hello.ResumeToken,
		"last_seq": 0, "state_checksum": ""})
}

// closedOverCap reads until the close, which must be 4029.
func (c *capConn) closedOverCap(t *testing.T) {
	t.Helper()
	if code := c.CloseCode(); code != wsproto.CloseTooManySessions {
		t.Fatalf("closed with %d, want 4029", code)
	}
}

// TestPerAddressLimitsByPrefix: through the server, the per-address
// limits count an IPv6 client by its /64 and an IPv4-mapped one as its
// IPv4 address: a second connection from the same key is refused (429),
// or its session is provisional; from another key it is not.
func TestPerAddressLimitsByPrefix(t *testing.T) {
	tests := []struct {
		name        string
		opts        Options
		held, next  string // the peers of the connection held and of the next one
		refused     bool   // the next is answered 429
		provisional bool   // the next gets a provisional session
	}{
		{"connections, same /64", Options{MaxConnsPerIP: 1}, "[2001:db8:1:2::1]:1000", "[2001:db8:1:2:ffff::9]:1001", true, false},
		{"connections, next /64", Options{MaxConnsPerIP: 1}, "[2001:db8:1:2::1]:1000", "[2001:db8:1:3::1]:1001", false, false},
		{"connections, IPv4-mapped", Options{MaxConnsPerIP: 1}, "192.0.2.7:1000", "[::ffff:192.0.2.7]:1001", true, false},
		{"connections, IPv4 neighbour", Options{MaxConnsPerIP: 1}, "192.0.2.7:1000", "192.0.2.8:1001", false, false},
		{"sessions, same /64", Options{MaxSessionsPerIP: 1}, "[2001:db8:1:2::1]:1000", "[2001:db8:1:2::2]:1001", false, true},
		{"sessions, next /64", Options{MaxSessionsPerIP: 1}, "[2001:db8:1:2::1]:1000", "[2001:db8:1:3::2]:1001", false, false},
		{"sessions, IPv4-mapped", Options{MaxSessionsPerIP: 1}, "192.0.2.7:1000", "[::ffff:192.0.2.7]:1001", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, url := capServer(t, tt.opts)
			if c, resp := dialCap(t, url, tt.held, ""); c == nil {
				t.Fatalf("the first connection: %v", resp)
			}
			c, resp := dialCap(t, url, tt.next, "")
			if refused := c == nil; refused != tt.refused {
				t.Fatalf("next connection refused %v (%v), want %v", refused, resp, tt.refused)
			}
			if tt.refused {
				if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("refused with %v, want 429", resp)
				}
				return
			}
			if got := srv.lookup(c.hello.SessionID) == nil; got != tt.provisional {
				t.Fatalf("the next session is provisional: %v, want %v", got, tt.provisional)
			}
		})
	}
}

// TestResumeBeyondCaps: beyond the caps (sessions per subject, per server)
// a connection is upgraded with a provisional session that only resumes:
// the resume of a session that exists succeeds and its run goes on; a
// frame other than a resume, or a rejected resume, closes it with 4029 and
// nothing starts. Another subject under its cap is not affected until the
// server's cap. No place is held afterwards.
func TestResumeBeyondCaps(t *testing.T) {
	srv, url := capServer(t, Options{MaxSessionsPerSubject: 1, MaxSessions: 2})
	const peer = "192.0.2.1:1000"
	alice, _ := dialCap(t, url, peer, "alice")
	alice.WS().CloseNow() // its session stays

	tests := []struct {
		name string
		do   func(t *testing.T, c *capConn)
	}{
		{"a resume of the subject's session", func(t *testing.T, c *capConn) {
			c.resume(alice.hello)
			var m wsproto.Connected
			if f := c.ExpectMeta(wsproto.EventConnected, &m); !m.Resumed {
				t.Fatalf("answer %s, want a resume", f.Metadata)
			}
			c.Message("plan a trip")
			if f := c.Next(); f.Event == wsproto.EventError {
				t.Fatalf("after the resume, a run start: %s %s", f.Event, f.Metadata)
			}
		}},
		{"a run start", func(t *testing.T, c *capConn) {
			c.Message("plan a trip")
			c.closedOverCap(t)
		}},
		{"a rejected resume", func(t *testing.T, c *capConn) {
			c.resume(wsproto.Connected{SessionID: alice.hello.SessionID, ResumeToken: "wrong"})
			c.ExpectError(wsproto.CodeResumeRejected)
			c.closedOverCap(t)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp := dialCap(t, url, peer, "alice")
			if c == nil {
				t.Fatalf("refused: %v", resp)
			}
			if srv.lookup(c.hello.SessionID) != nil {
				t.Fatal("beyond the subject's cap, a session was counted")
			}
			tt.do(t, c)
		})
	}

	bob, _ := dialCap(t, url, peer, "bob") // under his cap and the server's: 2 sessions
	if srv.lookup(bob.hello.SessionID) == nil {
		t.Fatal("bob, under every cap, got a provisional session")
	}
	carol, _ := dialCap(t, url, peer, "carol") // the server's cap
	if srv.lookup(carol.hello.SessionID) != nil {
		t.Fatal("beyond the server's cap, a session was counted")
	}
	carol.resume(bob.hello) // another subject's session is as unknown as a wrong token
	carol.Expect(wsproto.EventError)
	carol.closedOverCap(t)

	srv.mu.Lock()
	making, held, owned := srv.making, len(srv.sessions), len(srv.owned)
	srv.mu.Unlock()
	if making != 0 || held != 2 || owned != 2 {
		t.Errorf("%d sessions being made, %d held, %d owners; want 0, 2 (alice's and bob's), 2", making, held, owned)
	}
}

// TestIdleSessionTTL: a session that never sequenced an event is freed
// IdleSessionTTL after its connection left; one with a run keeps
// SessionTTL.
func TestIdleSessionTTL(t *testing.T) {
	srv, url := capServer(t, Options{IdleSessionTTL: 50 * time.Millisecond, SessionTTL: time.Hour})
	used, _ := dialCap(t, url, "", "u")
	used.Message("plan a trip")
	if f := used.Next(); f.Event == wsproto.EventError {
		t.Fatalf("run start: %s", f.Metadata)
	}
	used.WS().CloseNow()
	// Freed one after the other: the sweeper that frees the second has
	// finished the pass that would have freed the used one, had it the
	// idle TTL.
	for range 2 {
		idle, _ := dialCap(t, url, "", "u")
		idle.WS().CloseNow()
		deadline := time.Now().Add(20 * time.Second)
		for srv.lookup(idle.hello.SessionID) != nil {
			if time.Now().After(deadline) {
				t.Fatal("an idle session was not freed within 20 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if srv.lookup(used.hello.SessionID) == nil {
		t.Fatal("a session with a run was freed at the idle TTL")
	}
}
