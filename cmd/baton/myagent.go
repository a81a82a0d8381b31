package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/baton-run/baton/myagent"
	"github.com/baton-run/baton/orchestrator"
)

// myagentConfig is the myagent dialect's settings (package myagent).
type myagentConfig struct {
	path     string // --myagent-path: where the dialect is served besides the upgrades of /
	stateKey string // --state-key: signs the states it exports
}

func myagentFlags(fs *flag.FlagSet, c *myagentConfig) {
	fs.StringVar(&c.path, "myagent-path", "", "also serve the myagent dialect (myagent's clients, unchanged) at this path, e.g. /myagent; it is always served on the WebSocket upgrades of /")
	fs.StringVar(&c.stateKey, "state-key", "", "secret (16 bytes or more) that signs (HMAC-SHA256) the states the myagent dialect exports (user.request_state); unset: a random key per process, so exported states do not survive a restart nor reach another node")
}

// minStateKey is the shortest --state-key: a guessable key would let
// anyone forge a state (HMAC-SHA256 wants one as long as its output).
const minStateKey = 16

// check validates --state-key and --myagent-path: a path of its own, not one of Baton's.
func (c *myagentConfig) check(src func(string) string) error {
	if n := len(c.stateKey); n > 0 && n < minStateKey {
		return fmt.Errorf("%s: must be at least %d bytes (got %d)", src("state-key"), minStateKey, n)
	}
	p := c.path
	switch {
	case p == "":
		return nil
	case !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# {}") || p == "/":
		return fmt.Errorf("%s: %q is not a path such as /myagent", src("myagent-path"), p)
	}
	for _, taken := range []string{"/ws", "/healthz", "/readyz", "/metrics", "/agui"} {
		if p == taken || strings.HasPrefix(p, taken+"/") {
			return fmt.Errorf("%s: %s is Baton's own; choose another path", src("myagent-path"), p)
		}
	}
	return nil
}

// noStateKey is logged at start without --state-key.
const noStateKey = "myagent dialect: no --state-key; exported states are signed with a random key of this process (they do not survive a restart nor reach another node)"

// newMyagent is the myagent dialect over orch, as configured.
func newMyagent(orch *orchestrator.Server, c config, log *slog.Logger) *myagent.Handler {
	h := myagent.New(orch, &myagent.Options{StateKey: []byte(c.myagent.stateKey),
		AllowedOrigins: c.opts.AllowedOrigins, ReadLimit: c.opts.ReadLimit, Logger: log,
		SpareTTL: min(2*time.Second, c.opts.PingInterval/2)})
	if h.KeyGenerated {
		log.Warn(noStateKey)
	}
	return h
}

// myagentRoutes mounts the dialect: on the WebSocket upgrades of / (its
// plain GETs stay the UI's) and at --myagent-path.
func myagentRoutes(mux *http.ServeMux, dialect *myagent.Handler, ui http.Handler, path string) {
	mux.Handle("GET /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && myagent.IsUpgrade(r) {
			dialect.ServeHTTP(w, r)
			return
		}
		ui.ServeHTTP(w, r)
	}))
	if path != "" {
		mux.Handle("GET "+path, dialect)
	}
}
