package orchestrator

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/internal/wstest"
)

// TestAuthenticateBeforeUpgrade: a handshake Authenticate refuses is
// answered 401 with a Bearer challenge, and makes no connection and no
// session; one it accepts gets a session of its subject.
func TestAuthenticateBeforeUpgrade(t *testing.T) {
	srv, err := New(simModels(), &Options{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Authenticate: func(r *http.Request) (auth.Identity, error) {
			switch r.Header.Get("Authorization") {
			case "":
				return auth.Identity{}, auth.ErrNoCredential
			case "Bearer good":
				return auth.Identity{Subject: "alice"}, nil
			}
			return auth.Identity{}, fmt.Errorf("%w: unknown token", auth.ErrInvalid)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(context.Background()) }) // after the connections' cleanups
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	url := "ws" + hs.URL[len("http"):]

	tests := []struct {
		name, header, challenge string
	}{
		{"none", "", `Bearer realm="baton"`},
		{"bad", "Bearer bad", `Bearer realm="baton", error="invalid_token"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.header != "" {
				h.Set("Authorization", tt.header)
			}
			c, resp, err := wstest.TryDial(t, url, &wstest.Options{HTTPHeader: h})
			if err == nil {
				c.WS().CloseNow()
				t.Fatal("upgraded")
			}
			if resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != tt.challenge {
				t.Fatalf("%v: want 401 with %q", resp, tt.challenge)
			}
			if srv.Sessions() != 0 || srv.Connections() != 0 {
				t.Fatalf("%d sessions, %d connections after a refused handshake", srv.Sessions(), srv.Connections())
			}
		})
	}

	// system.connected: the session exists
	wstest.Connect(t, url, &wstest.Options{HTTPHeader: http.Header{"Authorization": {"Bearer good"}}})
	srv.mu.Lock()
	var subjects []string
	for _, sess := range srv.sessions {
		subjects = append(subjects, sess.subject)
	}
	srv.mu.Unlock()
	if len(subjects) != 1 || subjects[0] != "alice" {
		t.Fatalf("sessions of %q, want one of alice", subjects)
	}
}
