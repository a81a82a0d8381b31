package edge

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestHostAllowed(t *testing.T) {
	allowed := []string{"baton.example.com", "*.corp.example", "app.example.org:8443", "[2001:db8::1]:*"}
	tests := []struct {
		name, host string
		want       bool
	}{
		{"localhost", "localhost", true},
		{"localhost with a port", "localhost:8080", true},
		{"a name under localhost", "app.localhost:3000", true},
		{"localhost, fully qualified", "LocalHost.:8080", true},
		{"IPv4 loopback", "127.0.0.1:8080", true},
		{"another loopback", "127.9.9.9", true},
		{"IPv6 loopback", "[::1]:8080", true},
		{"any IPv4 literal", "192.0.2.7:8080", true},
		{"any IPv6 literal", "[2001:db8::7]", true},
		{"a rebound name", "attacker.example:8080", false},
		{"a name ending in localhost", "evillocalhost:8080", false},
		{"a name before localhost", "localhost.attacker.example", false},
		{"a number that is no address", "2130706433", false},
		{"allowed, any port", "baton.example.com:8080", true},
		{"allowed, no port", "baton.example.com", true},
		{"allowed, case", "BATON.example.COM", true},
		{"allowed glob", "eu.corp.example", true},
		{"the glob's parent", "corp.example", false},
		{"allowed on its port", "app.example.org:8443", true},
		{"allowed on another port", "app.example.org:8080", false},
		{"allowed port missing", "app.example.org", false},
	}
	var patterns []hostPattern
	for _, p := range allowed {
		patterns = append(patterns, parsePattern(p))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostAllowed(tt.host, patterns); got != tt.want {
				t.Errorf("hostAllowed(%q) = %v, want %v", tt.host, got, tt.want)
			}
		})
	}
}

// countHandler counts log records by level.
type countHandler struct {
	mu     sync.Mutex
	counts map[slog.Level]int
	last   slog.Record
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Level]++
	h.last = r
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// TestCheckHost: a refused Host is answered 421 with a body naming the
// advice, before the handler; exempt paths and allowed hosts reach it;
// each refused host is logged at Warn once, and made-up hosts past
// maxLoggedHosts at most once a minute.
func TestCheckHost(t *testing.T) {
	logs := &countHandler{counts: map[slog.Level]int{}}
	reached := 0
	h := CheckHost(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ }), &HostOptions{
		Allowed: []string{"baton.example.com"}, Exempt: []string{"/healthz"}, Logger: slog.New(logs),
		Advice: func(host string) string { return "set --allowed-hosts to serve " + host },
	})
	do := func(host, path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	tests := []struct {
		name, host, path string
		status           int
	}{
		{"rebound", "attacker.example:8080", "/ws", http.StatusMisdirectedRequest},
		{"rebound, the UI", "attacker.example:8080", "/", http.StatusMisdirectedRequest},
		{"rebound, metrics", "attacker.example:8080", "/metrics", http.StatusMisdirectedRequest},
		{"rebound, health is exempt", "attacker.example:8080", "/healthz", http.StatusOK},
		{"allowed", "baton.example.com", "/ws", http.StatusOK},
		{"loopback", "localhost:8080", "/ws", http.StatusOK},
		{"no Host", "", "/ws", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := reached
			w := do(tt.host, tt.path)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d", w.Code, tt.status)
			}
			if tt.status == http.StatusOK && reached != before+1 || tt.status != http.StatusOK && reached != before {
				t.Fatalf("handler reached %d times, want %v", reached-before, tt.status == http.StatusOK)
			}
			if tt.status != http.StatusOK && !strings.Contains(w.Body.String(), "set --allowed-hosts to serve "+tt.host) {
				t.Fatalf("body %q names no advice", w.Body.String())
			}
		})
	}
	logs.counts = map[slog.Level]int{}
	for range 100 {
		do("again.example", "/")
	}
	if logs.counts[slog.LevelWarn] != 1 || logs.counts[slog.LevelDebug] != 99 {
		t.Fatalf("one host refused 100 times: %v, want 1 Warn and 99 Debug", logs.counts)
	}
	for i := range 1000 {
		do(fmt.Sprintf("made-up-%d.example", i), "/")
	}
	// attacker.example and again.example are two of the hosts remembered.
	if n := logs.counts[slog.LevelWarn]; n != maxLoggedHosts {
		t.Fatalf("1000 made-up hosts: %d Warn lines, want %d (the hosts remembered, and one for the overflow)", n, maxLoggedHosts)
	}
	long := strings.Repeat("a", 10000) + ".example"
	if w := do(long, "/"); len(w.Body.String()) > 2*maxHostShown+500 {
		t.Fatalf("a long Host made a %d-byte answer", w.Body.Len())
	}
}
