package main

import (
	"encoding/json"
	"net/http"

	"github.com/baton-run/baton/orchestrator"
)

// routes is Baton's whole HTTP surface.
func routes(orch *orchestrator.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /ws", orch)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"status": "ok", "sessions": orch.Sessions(), "connections": orch.Connections()})
	})
	return mux
}
