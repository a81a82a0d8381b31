package main

import (
	"encoding/json"
	"expvar"
	"net/http"
	"net/http/pprof"

	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/web"
)

// routes is Baton's whole HTTP surface.
func routes(orch *orchestrator.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", orch)
	mux.Handle("GET /", web.Handler()) // the UI, and the JS client at /baton-client.js
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "ok", "sessions": orch.Sessions(), "connections": orch.Connections()})
	})
	return mux
}

// debugRoutes is the profiling surface, served only on --debug-addr.
func debugRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/vars", expvar.Handler())
	return mux
}
