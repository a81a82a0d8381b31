package edge

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// HostOptions configure CheckHost. A nil *HostOptions means the defaults;
// CheckHost does not modify the caller's struct.
type HostOptions struct {
	// Allowed are the host patterns accepted besides loopback names and IP
	// literals: path.Match syntax, matched case-insensitively. A pattern
	// with a port ("app.example.com:8443", "*.example.com:*") matches
	// that host on that port; one without ("app.example.com") matches the
	// host on any port. Defaults to none.
	Allowed []string
	// Exempt are the paths served whatever the Host (health checks).
	// Defaults to none.
	Exempt []string
	// Advice says what an operator should do to serve host, for the
	// refusal's body and log line (a flag to set). Defaults to nothing.
	Advice func(host string) string
	// Logger is told of refusals: at Warn the first time a host is
	// refused (for the first maxLoggedHosts hosts, then at most once a
	// minute), at Debug after. Defaults to slog.Default().
	Logger *slog.Logger
}

// CheckHost returns h behind the Host check against DNS rebinding: a
// request whose Host is not a loopback name (localhost, *.localhost), an
// IP literal or one of Allowed is answered 421 Misdirected Request —
// this server does not answer for that name — before h sees it: no
// upgrade, no stream, no run. A request without a Host (HTTP/1.0, never
// a browser's) passes.
//
// A rebinding page is served from a name its author controls, which he
// then points at the victim's loopback or private address: the browser
// takes the server for the page's own origin, Host and Origin both the
// attacker's name, so an Origin check that accepts Origin == Host lets it
// in. The name in Host is what gives it away. A loopback name resolves to
// loopback in every browser (RFC 6761), and an IP literal is not looked
// up at all, so neither can be rebound.
func CheckHost(h http.Handler, opts *HostOptions) http.Handler {
	var o HostOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	allowed := make([]hostPattern, 0, len(o.Allowed))
	for _, p := range o.Allowed {
		allowed = append(allowed, parsePattern(p))
	}
	exempt := slices.Clone(o.Exempt)
	hl := &hostLog{seen: make(map[string]struct{})}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host == "" || slices.Contains(exempt, r.URL.Path) || hostAllowed(r.Host, allowed) {
			h.ServeHTTP(w, r)
			return
		}
		host := r.Host
		if len(host) > maxHostShown {
			host = host[:maxHostShown]
		}
		advice := ""
		if o.Advice != nil {
			advice = o.Advice(host)
		}
		level := slog.LevelDebug
		if hl.first(host, time.Now()) {
			level = slog.LevelWarn
		}
		o.Logger.Log(r.Context(), level, "request refused: its Host is not a name this server answers for (DNS rebinding?)",
			"host", host, "remote", r.RemoteAddr, "path", r.URL.Path, "advice", advice)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(w, "this server does not answer for host %q: it answers only for loopback names (localhost), IP addresses and the hosts it is told to, so that a page served from another name cannot reach it (DNS rebinding). %s\n",
			host, advice)
	})
}

// maxHostShown bounds a refused Host in a log line and a response body.
const maxHostShown = 256

// hostPattern is an Allowed pattern: a host glob and a port glob, "" for
// any port.
type hostPattern struct{ host, port string }

func parsePattern(p string) hostPattern {
	h, port := splitHostPort(p)
	return hostPattern{host: normalName(h), port: port}
}

// hostAllowed is the check on a request's Host (host[:port]).
func hostAllowed(hostport string, allowed []hostPattern) bool {
	h, port := splitHostPort(hostport)
	name := normalName(h)
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	for _, p := range allowed {
		if ok, _ := path.Match(p.host, name); !ok {
			continue
		}
		if p.port == "" {
			return true
		}
		if ok, _ := path.Match(p.port, port); ok {
			return true
		}
	}
	return false
}

// splitHostPort splits host[:port], an IPv6 host in brackets; port is ""
// when there is none.
func splitHostPort(s string) (host, port string) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), ""
}

// normalName is a host name as matched: lower case, without the final dot
// of a fully qualified name ("localhost." is localhost).
func normalName(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// maxLoggedHosts is how many refused hosts are each logged once at Warn;
// past them, one Warn a minute: a page cannot flood the log by making up
// names.
const maxLoggedHosts = 32

// hostLog decides which refusals are logged at Warn.
type hostLog struct {
	mu       sync.Mutex // guards seen
	seen     map[string]struct{}
	overflow throttle
}

// first reports whether host's refusal is to be logged at Warn.
func (l *hostLog) first(host string, now time.Time) bool {
	l.mu.Lock()
	_, seen := l.seen[host]
	full := len(l.seen) >= maxLoggedHosts
	if !seen && !full {
		l.seen[host] = struct{}{}
	}
	l.mu.Unlock()
	switch {
	case seen:
		return false
	case full:
		_, ok := l.overflow.allow(now)
		return ok
	}
	return true
}
