package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/baton-run/baton/edge"
)

// edgeConfig is what the flags say about the HTTP edge (package edge):
// what every connection may hold, and which Hosts are served.
type edgeConfig struct {
	maxConnsPerIP int           // --max-conns-per-ip: counted by the listener, for every connection
	bodyTimeout   time.Duration // --body-timeout: http.Server.ReadTimeout
	idleTimeout   time.Duration // --idle-timeout: http.Server.IdleTimeout
	allowedHosts  string        // --allowed-hosts
	hosts         []string      // --allowed-hosts, split and checked
}

func edgeFlags(fs *flag.FlagSet, e *edgeConfig) {
	fs.IntVar(&e.maxConnsPerIP, "max-conns-per-ip", 100, "most open connections from one client IP (an IPv6 /64): every one counts, HTTP, SSE (/agui) and WebSocket alike; more are refused with 429 (0: no limit)")
	fs.DurationVar(&e.bodyTimeout, "body-timeout", 30*time.Second, "longest a request, its body included, may take to arrive; a slower one fails and its connection is closed (streams and WebSockets that follow are not cut)")
	fs.DurationVar(&e.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection is kept open between requests")
	fs.StringVar(&e.allowedHosts, "allowed-hosts", "", "comma-separated Host patterns served besides loopback names (localhost), IP addresses and the hosts of --allowed-origins (path.Match syntax; a port optional: baton.example.com, *.corp.example); other Hosts are refused with 421 against DNS rebinding. Checked without authentication, and with it only when set")
}

// check validates --allowed-hosts.
func (e *edgeConfig) check(src func(string) string) error {
	hosts, err := hostPatterns(e.allowedHosts, "a pattern is a host name, with a port or without (then any port), e.g. baton.example.com, *.corp.example, baton.example.com:8443")
	if err != nil {
		return fmt.Errorf("%s: %w", src("allowed-hosts"), err)
	}
	e.hosts = hosts
	return nil
}

// listenEdge wraps ln in the edge's listener: every connection counted by
// address (--max-conns-per-ip) and in total, up to what the process's file
// limit allows. The orchestrator's own count of WebSockets stays off
// (orchestrator.Options.MaxConnsPerIP 0): a WebSocket counts once, as the
// connection it is, and the in-process connections of AG-UI and the myagent
// dialect, which carry their client's address, are not counted again.
func listenEdge(ln net.Listener, c config, log *slog.Logger) *edge.Listener {
	limit := edge.FileLimit()
	maxConns := edge.ConnsForFileLimit(limit)
	log.Info("connections bounded", "max_conns", maxConns, "file_limit", limit, "max_conns_per_ip", c.edge.maxConnsPerIP,
		"body_timeout", c.edge.bodyTimeout.String(), "idle_timeout", c.edge.idleTimeout.String())
	return edge.Listen(ln, &edge.ListenOptions{MaxConnsPerIP: c.edge.maxConnsPerIP, MaxConns: maxConns, Logger: log})
}

// healthPaths are served whatever the Host: a load balancer's probe may
// name any host, and these say nothing a page could use (/metrics does
// say more, so it is checked).
var healthPaths = []string{"/healthz", "/readyz"}

// checkHosts puts the Host check against DNS rebinding in front of h:
// always without authentication, and with it only when --allowed-hosts
// is set (a rebound page has no bearer token, so every endpoint that
// acts refuses it anyway; docs/security.md §7). Allowed are the patterns
// of --allowed-hosts and the hosts of --allowed-origins.
func checkHosts(h http.Handler, c config, log *slog.Logger) http.Handler {
	if c.opts.Authenticate != nil && len(c.edge.hosts) == 0 {
		log.Info("Host check off: authentication is on and --allowed-hosts is not set")
		return h
	}
	allowed := append([]string(nil), c.edge.hosts...)
	for _, p := range c.opts.AllowedOrigins {
		allowed = append(allowed, originHost(p))
	}
	return edge.CheckHost(h, &edge.HostOptions{Allowed: allowed, Exempt: healthPaths, Logger: log,
		Advice: func(host string) string {
			name, _, err := net.SplitHostPort(host)
			if err != nil {
				name = host
			}
			return fmt.Sprintf("If %s is this server's name (behind a proxy, the name clients use), start Baton with --allowed-hosts %s (or BATON_ALLOWED_HOSTS).", name, name)
		}})
}

// originHost is an --allowed-origins pattern's host, without its port:
// a page allowed to connect may be served from that host, and Baton
// from another port of it.
func originHost(p string) string {
	if h, _, err := net.SplitHostPort(p); err == nil {
		return h
	}
	return p
}

// hostPatterns splits and checks a comma-separated list of host[:port]
// patterns (--allowed-origins, --allowed-hosts): path.Match syntax, no
// scheme, no path; form says what a pattern looks like.
func hostPatterns(list, form string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	var out []string
	for i, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return nil, fmt.Errorf("entry %d of %q is empty (a stray comma?)", i+1, list)
		case strings.Contains(p, "://"):
			return nil, fmt.Errorf("pattern %q has a scheme; %s", p, form)
		case strings.Contains(p, "/"):
			return nil, fmt.Errorf("pattern %q has a path; %s", p, form)
		case strings.ContainsAny(p, " \t"):
			return nil, fmt.Errorf("pattern %q contains a space; separate patterns with commas", p)
		}
		if _, err := pathMatch(p); err != nil {
			return nil, fmt.Errorf("pattern %q is not valid path.Match syntax (*, ?, [a-z], \\ escapes): %w", p, err)
		}
		out = append(out, p)
	}
	return out, nil
}
