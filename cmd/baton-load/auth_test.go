package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/orchestrator"
)

// TestLoadWithTokens: against a server with authentication on, sessions
// take the -token values in turn (here from the server's own token file);
// without a token every session's handshake is refused, and the tool says
// it could not connect (no violation: nothing was delivered wrong).
func TestLoadWithTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("alice=tok-alice\nbob=tok-bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pairs, err := auth.LoadPairs("@" + file)
	if err != nil {
		t.Fatal(err)
	}
	static, err := auth.NewStatic(pairs)
	if err != nil {
		t.Fatal(err)
	}
	url := batonWith(t, orchestrator.Options{Authenticate: auth.Authenticator(static)})

	tests := []struct {
		name   string
		tokens []string
		ok     bool
	}{
		{"one token", []string{"-token", "tok-alice"}, true},
		{"the server's file", []string{"-token", "@" + file}, true},
		{"no token", nil, false},
		{"a wrong token", []string{"-token", "tok-alice", "-token", "tok-carol"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := load(t, append([]string{"-url", url, "-sessions", "4", "-runs", "2", "-ramp", "0s"}, tt.tokens...)...)
			if tt.ok {
				if err != nil || rep.ViolationsNum != 0 || rep.Runs != 8 {
					t.Fatalf("run: %v; %d runs; violations %v", err, rep.Runs, rep.Violations)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), "could not connect") || !strings.Contains(err.Error(), "401") ||
				rep.ViolationsNum != 0 {
				t.Fatalf("run: %v; violations %v; want the refused handshakes reported as could not connect", err, rep.Violations)
			}
		})
	}
}
