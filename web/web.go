package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Files are the UI and the client as embedded: index.html, app.js and
// the page's other modules, style.css, baton-client.mjs and
// baton-client.d.mts.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}

// aliases are the names the client is also served under: the same bytes
// as the file each maps to, so that no second copy can drift. .js and
// .d.ts are the names tools that do not know .mjs look for (and the URLs
// Baton served the client at before).
var aliases = map[string]string{
	"baton-client.js":   "baton-client.mjs",
	"baton-client.d.ts": "baton-client.d.mts",
}

// contentTypes are the types Files are served with, by extension. They
// are set here, not read from the machine's MIME table: that table
// varies (Debian's maps .ts to Qt Linguist's text/vnd.trolltech.linguist
// and .mts to model/vnd.mts), and with nosniff a wrong type is final.
// Type declarations are text/plain, so that a browser shows them.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".ts":   "text/plain; charset=utf-8",
	".mts":  "text/plain; charset=utf-8",
}

// contentType is the Content-Type Handler serves the file name with (""
// is the root: index.html), or "" for an extension it has no type for
// (then http.FileServer's guess applies).
func contentType(name string) string {
	if name == "" {
		name = "index.html"
	}
	return contentTypes[path.Ext(name)]
}

// Handler serves Files at the root: the UI at /, the client at
// /baton-client.mjs (and /baton-client.js, see aliases). The pages may
// load only their own scripts and styles and connect only to their own
// origin, so text that slipped into the page as HTML still could not run
// or load anything.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// No build step means no content hashes in file names: revalidate.
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, "/")
		if ct := contentType(name); ct != "" {
			h.Set("Content-Type", ct)
		}
		if target, ok := aliases[name]; ok {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/" + target
			r2.URL.RawPath = ""
			r = r2
		}
		files.ServeHTTP(w, r)
	})
}
