package web

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(skipreport.Reporting(m)) }

func TestHandler(t *testing.T) {
	srv := startServer(t, 0, nil)
	tests := []struct {
		name, path, ctype, contains string
	}{
		{"page", "/", "text/html", `data-testid="request"`},
		{"client", "/baton-client.js", "text/javascript", "export class BatonClient"},
		{"types", "/baton-client.d.ts", "", "export class BatonClient"},
		{"ui script", "/app.js", "text/javascript", "baton-client.js"},
		{"styles", "/style.css", "text/css", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", tt.path, res.Status)
			}
			if got := res.Header.Get("Content-Type"); !strings.HasPrefix(got, tt.ctype) {
				t.Errorf("Content-Type %q, want %s…", got, tt.ctype)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("GET %s does not contain %q", tt.path, tt.contains)
			}
		})
	}
}
