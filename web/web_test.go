package web

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

// TestHandler fetches every file the server serves, the aliases too, and
// checks its status, its exact Content-Type (the machine's MIME table must
// not decide it: Debian's says .ts is Qt Linguist) and its security
// headers. A file added to static/ fails the test until it has a row.
func TestHandler(t *testing.T) {
	srv := startServer(t, 0, nil)
	const (
		js   = "text/javascript; charset=utf-8"
		text = "text/plain; charset=utf-8"
	)
	tests := []struct {
		name, path string
		status     int
		ctype      string
		contains   string
		sameAs     string // an alias: the body is this file's, byte for byte
	}{
		{"page", "/", http.StatusOK, "text/html; charset=utf-8", `data-testid="request"`, "index.html"},
		{"client", "/baton-client.mjs", http.StatusOK, js, "export class BatonClient", ""},
		{"client as .js", "/baton-client.js", http.StatusOK, js, "export class BatonClient", "baton-client.mjs"},
		{"types", "/baton-client.d.mts", http.StatusOK, text, "export class BatonClient", ""},
		{"types as .d.ts", "/baton-client.d.ts", http.StatusOK, text, "export class BatonClient", "baton-client.d.mts"},
		{"ui script", "/app.js", http.StatusOK, js, `from "./baton-client.mjs"`, ""},
		{"board", "/board.js", http.StatusOK, js, "export", ""},
		{"confirms", "/confirms.js", http.StatusOK, js, "export", ""},
		{"dom", "/dom.js", http.StatusOK, js, "export", ""},
		{"markdown", "/markdown.js", http.StatusOK, js, "export", ""},
		{"plan", "/plan.js", http.StatusOK, js, "export", ""},
		{"styles", "/style.css", http.StatusOK, "text/css; charset=utf-8", "", ""},
		{"icon", "/favicon.svg", http.StatusOK, "image/svg+xml", "<svg", ""},
		{"unknown", "/nope.js", http.StatusNotFound, text, "404", ""},
	}
	served := map[string]bool{"index.html": true}
	for _, tt := range tests {
		served[strings.TrimPrefix(tt.path, "/")] = true
	}
	if err := fs.WalkDir(Files(), ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !served[name] {
			t.Errorf("static/%s has no row in TestHandler: add one with its Content-Type", name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != tt.status {
				t.Fatalf("GET %s: %s, want %d", tt.path, res.Status, tt.status)
			}
			if got := res.Header.Get("Content-Type"); got != tt.ctype {
				t.Errorf("GET %s: Content-Type %q, want %q", tt.path, got, tt.ctype)
			}
			if got := res.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", tt.path, got)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("GET %s: Content-Security-Policy %q", tt.path, csp)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("GET %s does not contain %q", tt.path, tt.contains)
			}
			if tt.sameAs != "" {
				want, err := fs.ReadFile(Files(), tt.sameAs)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(body, want) {
					t.Errorf("GET %s: %d bytes, not static/%s's %d", tt.path, len(body), tt.sameAs, len(want))
				}
			}
		})
	}
}
