package orchestrator

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/baton-run/baton/edge"
	"github.com/baton-run/baton/wsproto"
)

// The abuse limits: connections per client address, checked before the
// upgrade; client frames per connection (a token bucket); and the size of
// the frames Baton sends. The session caps are sessioncap.go's.

// limits counts what the connection limits are checked against.
type limits struct {
	mu    sync.Mutex     // guards perIP
	perIP map[string]int // open connections (and upgrades under way) by client address (addrKey)
}

// retryAfter is what a refused upgrade tells the client to wait.
const retryAfter = 5 * time.Second

// admission is a connection let through the limits; done gives its place
// back when it ends.
type admission struct {
	srv *Server
	ip  string // addrKey of the client's address
}

// admit checks the connection limit before the upgrade: beyond
// MaxConnsPerIP from the request's address it answers 429 with a
// Retry-After, and reports false.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (*admission, bool) {
	a := &admission{srv: s, ip: clientIP(r)}
	l := &s.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if max := s.opts.MaxConnsPerIP; max > 0 && l.perIP[a.ip] >= max {
		s.log.Debug("upgrade refused: too many connections from the address", "remote", r.RemoteAddr, "limit", max)
		refuse(w, http.StatusTooManyRequests, "too many connections from your address")
		return nil, false
	}
	if l.perIP == nil {
		l.perIP = make(map[string]int)
	}
	l.perIP[a.ip]++
	return a, true
}

func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	http.Error(w, msg, status)
}

// done gives the connection's place back.
func (a *admission) done() {
	l := &a.srv.limits
	l.mu.Lock()
	if l.perIP[a.ip]--; l.perIP[a.ip] <= 0 {
		delete(l.perIP, a.ip)
	}
	l.mu.Unlock()
}

// clientIP is the address connections and anonymous sessions are counted
// by: the TCP peer's IP as addrKey groups it. Behind a proxy every client
// has the proxy's.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return addrKey(host)
}

// addrKey is the key of a client address for the per-address limits:
// edge.AddrKey, an IPv4 address or an IPv6 /64, the one rule for it.
func addrKey(host string) string { return edge.AddrKey(host) }

// abuseWindow is how long refused frames are counted for: more than
// RateBurst of them within it close the connection with 1008.
const abuseWindow = 10 * time.Second

// flood is a connection's rate limit on client frames. Only the reader
// goroutine uses it.
type flood struct {
	bucket   *rate.Limiter
	burst    int
	refused  int       // frames refused since windowAt
	windowAt time.Time // when the current count of refusals started
	answered bool      // the current run of refused frames has had its system.error
}

func newFlood(o *Options) *flood {
	if o.RateLimit <= 0 {
		return nil
	}
	return &flood{bucket: rate.NewLimiter(rate.Limit(o.RateLimit), o.RateBurst), burst: o.RateBurst}
}

// admitFrame reports whether the frame just read, at now, may be applied. A frame
// over the rate limit is not: the first of a run of them is answered
// rate_limited, the others not at all (answering each would let a flood
// make the server write as much as it reads); more than RateBurst refused
// within abuseWindow close the connection with 1008. Nothing is applied
// once the connection is closing.
func (c *conn) admitFrame(now time.Time) bool {
	if c.closing.Load() {
		return false
	}
	f := c.flood
	if f == nil {
		return true
	}
	if f.bucket.AllowN(now, 1) {
		f.answered = false
		return true
	}
	if now.Sub(f.windowAt) > abuseWindow {
		f.refused, f.windowAt = 0, now
	}
	if f.refused++; f.refused > f.burst {
		c.logger().Warn("client frames over the rate limit; closing", "refused", f.refused, "window", abuseWindow)
		c.closeWith(websocket.StatusCode(wsproto.CloseRateLimited), "rate limit exceeded")
		return false
	}
	if !f.answered {
		f.answered = true
		c.sendError(&wsproto.Error{Code: wsproto.CodeRateLimited,
			Message: "too many frames: this one and those that follow too fast are not applied; slow down"})
	}
	return false
}

// fitLocked is emitLocked's rare case: an event whose frame is longer
// than MaxFrameBytes, cut to fit (wsproto.FitFrame). The frame as cut is
// left in sess.cut for the state, which must hold what clients see.
func (sess *session) fitLocked(f wsproto.Frame) ([]byte, error) {
	limit := sess.srv.opts.MaxFrameBytes
	b, cut, fits, err := wsproto.FitFrame(nil, f, limit)
	if err != nil {
		return nil, err
	}
	sess.cut = &cut
	if !fits {
		sess.srv.log.Warn("frame over the size limit even with its texts cut", "session", sess.id, "event", f.Event,
			"bytes", len(b), "limit", limit)
	}
	return b, nil
}
