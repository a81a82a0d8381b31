package main

import (
	"context"
	"encoding/json"
	"expvar"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/myagent"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/web"
)

// routes is Baton's whole HTTP surface. ready says why Baton should get no
// new clients now, "" when it should (readiness); version is what /healthz
// says Baton is (buildInfo.Version); ag serves AG-UI (package agui),
// dialect the myagent dialect (package myagent).
func routes(orch *orchestrator.Server, ag http.Handler, metrics http.Handler, ready func(context.Context) string, version string,
	dialect *myagent.Handler, myagentPath string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", orch)
	mux.Handle("POST /agui", ag)         // AG-UI: a run, streamed as SSE
	mux.Handle("GET /agui/{thread}", ag) // AG-UI: resume a stream (Last-Event-ID)
	// The UI, and the JS client at /baton-client.mjs (and .js); the
	// WebSocket upgrades of / (and --myagent-path) speak the myagent dialect.
	myagentRoutes(mux, dialect, web.Handler(), myagentPath)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "ok", "version": version,
			"sessions": orch.Sessions(), "connections": orch.Connections()})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if reason := ready(r.Context()); reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(map[string]any{"status": "not ready", "reason": reason})
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"status": "ready"})
	})
	mux.Handle("GET /metrics", metrics) // counts only, but keep it from the public: see the README
	return mux
}

// readyPingTimeout bounds the PING a readiness check sends Redis.
const readyPingTimeout = time.Second

// readiness is /readyz's check: not ready while draining, nor, with the
// Redis store (ping not nil), while Redis does not answer a PING within
// readyPingTimeout.
func readiness(orch *orchestrator.Server, ping func(context.Context) error, log *slog.Logger) func(context.Context) string {
	return func(ctx context.Context) string {
		if orch.Draining() {
			return "draining"
		}
		if ping == nil {
			return ""
		}
		ctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
		defer cancel()
		if err := ping(ctx); err != nil {
			log.Debug("not ready: Redis did not answer", "err", err)
			return "redis unreachable"
		}
		return ""
	}
}

// publishProcess publishes the "process" var once: expvar's registry is
// the process's, and run may be called more than once in it (tests).
var publishProcess sync.Once

// debugRoutes is the profiling surface, served only on --debug-addr. Its
// /debug/vars has a "process" var, {"cpu_ns", "write_syscalls"} (the
// latter left out off Linux), which baton-load -debug-addr divides by the
// events of a load. Its /debug/vars and /debug/pprof/cmdline show the
// command line with the secrets redacted (redact.go).
func debugRoutes() http.Handler {
	publishProcess.Do(func() { expvar.Publish("process", expvar.Func(func() any { return proc.Read() })) })
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/vars", vars)
	return mux
}
