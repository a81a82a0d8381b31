package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Files are the UI and the client as served: index.html, app.js,
// style.css, baton-client.js and baton-client.d.ts.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// Handler serves Files at the root: the UI at /, the client at
// /baton-client.js. The pages may load only their own scripts and styles
// and connect only to their own origin, so text that slipped into the
// page as HTML still could not run or load anything.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// No build step means no content hashes in file names: revalidate.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
