package edge

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ListenOptions configure a Listener. A nil *ListenOptions means the
// defaults; Listen does not modify the caller's struct.
type ListenOptions struct {
	// MaxConnsPerIP is the most connections one client address (AddrKey:
	// an IPv6 /64) may have open; one more is answered 429 Too Many
	// Requests and closed. Defaults to 0: no limit.
	MaxConnsPerIP int
	// MaxConns is the most connections open at once; one more is answered
	// 503 Service Unavailable and closed. Defaults to 0: no limit
	// (ConnsForFileLimit is a cap the process's file limit allows).
	MaxConns int
	// RetryAfter is what a refusal tells the client to wait. Defaults to 5s.
	RetryAfter time.Duration
	// RefuseTimeout bounds how long a refused connection is kept: the
	// writing of its answer, then the reading of what its client sent
	// until the client closes (closing with unread bytes would reset the
	// connection, and the client might lose the answer). Defaults to 2s.
	RefuseTimeout time.Duration
	// MaxRefusing bounds the refused connections kept at once; one more
	// is closed without an answer. Each holds a file descriptor until
	// RefuseTimeout at most. Defaults to 64, or to a quarter of MaxConns
	// when that is less (at least 1), the share ConnsForFileLimit leaves
	// them.
	MaxRefusing int
	// Logger is told of refusals: each at Debug, and at Warn at most once
	// a minute for each reason (a flood cannot flood the log). Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (o *ListenOptions) withDefaults() ListenOptions {
	var c ListenOptions
	if o != nil {
		c = *o
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.RefuseTimeout <= 0 {
		c.RefuseTimeout = 2 * time.Second
	}
	if c.MaxRefusing <= 0 {
		c.MaxRefusing = 64
		if c.MaxConns > 0 {
			c.MaxRefusing = max(1, min(64, c.MaxConns/4))
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Listener is a net.Listener that counts every connection it accepts, by
// address and in total, and refuses those beyond its limits before any
// server reads them. A connection counts from its accept until its first
// Close; a hijacked connection (a WebSocket) is the same connection and
// counts once. Accept may be called concurrently with Close; Close waits
// for the goroutines that answer refused connections.
type Listener struct {
	ln   net.Listener
	opts ListenOptions
	log  *slog.Logger
	done chan struct{} // closed by Close

	mu       sync.Mutex // guards open, perIP, refusing, closed
	open     int
	perIP    map[string]int // open connections by AddrKey
	refusing map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup // the goroutines answering refused connections

	spareMu sync.Mutex // guards spare; held while it is traded for a connection
	spare   *os.File   // a descriptor held to be freed when the process has none (spare.go)

	warnings [numReasons]throttle
	// shed counts the connections accepted on the spare descriptor and
	// refused, outOfFiles the accepts that failed for want of one: with
	// a spare, one each per connection the process could not take.
	shed, outOfFiles atomic.Int64
}

// Listen wraps ln; the Listener owns it and closes it on Close.
func Listen(ln net.Listener, opts *ListenOptions) *Listener {
	o := opts.withDefaults()
	l := &Listener{ln: ln, opts: o, log: o.Logger, done: make(chan struct{}),
		perIP: make(map[string]int), refusing: make(map[net.Conn]struct{})}
	l.spare = openSpare()
	return l
}

// Accept returns the next connection within the limits. Connections
// beyond them are answered and closed here, and Accept goes on to the
// next; so does an accept that fails for want of a file descriptor
// (EMFILE, ENFILE), which never reaches the server as an error to retry.
func (l *Listener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if !isOutOfFiles(err) {
				return nil, err
			}
			l.outOfFiles.Add(1)
			l.warn(reasonFiles, "connections refused: out of file descriptors (raise the file limit, ulimit -n)", "err", err)
			if l.shedOne() {
				backoff = 0
				continue
			}
			// No spare to trade: wait before accepting again, as
			// net/http would, but without returning the error to it.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.done:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		backoff = 0
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit counts nc and returns it, or refuses it and returns nil.
func (l *Listener) admit(nc net.Conn) net.Conn {
	key := addrKeyOf(nc.RemoteAddr())
	l.mu.Lock()
	var r reason
	switch {
	case l.opts.MaxConnsPerIP > 0 && l.perIP[key] >= l.opts.MaxConnsPerIP:
		r = reasonPerIP
	case l.opts.MaxConns > 0 && l.open >= l.opts.MaxConns:
		r = reasonTotal
	default:
		l.open++
		l.perIP[key]++
		l.mu.Unlock()
		return &conn{Conn: nc, l: l, key: key}
	}
	l.mu.Unlock()
	l.log.Debug("connection refused", "remote", nc.RemoteAddr().String(), "reason", r.String())
	switch r {
	case reasonPerIP:
		l.warn(r, "connections refused: too many from one address (--max-conns-per-ip)", "addr", key, "limit", l.opts.MaxConnsPerIP)
	case reasonTotal:
		l.warn(r, "connections refused: the server holds as many as it may (its file limit)", "limit", l.opts.MaxConns)
	}
	l.refuse(nc, r.status())
	return nil
}

// release gives a closed connection's places back.
func (l *Listener) release(key string) {
	l.mu.Lock()
	l.open--
	if l.perIP[key]--; l.perIP[key] <= 0 {
		delete(l.perIP, key)
	}
	l.mu.Unlock()
}

// Open returns the number of connections open: accepted and not closed.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Close closes the listener and the refused connections still being
// answered, and waits for their goroutines. Connections accepted before
// are their server's to close.
func (l *Listener) Close() error {
	l.mu.Lock()
	already := l.closed
	l.closed = true
	refusing := make([]net.Conn, 0, len(l.refusing))
	for c := range l.refusing {
		refusing = append(refusing, c)
	}
	l.mu.Unlock()
	if !already {
		close(l.done)
	}
	err := l.ln.Close() // ends an Accept, also one trading the spare
	for _, c := range refusing {
		c.Close()
	}
	l.wg.Wait()
	l.spareMu.Lock()
	if l.spare != nil {
		l.spare.Close()
		l.spare = nil
	}
	l.spareMu.Unlock()
	return err
}

// Addr is the listener's address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// conn is an accepted connection; its first Close gives its places back.
type conn struct {
	net.Conn
	l    *Listener
	key  string
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.key) })
	return err
}

// CloseWrite half-closes a TCP connection: net/http uses it to end a
// response gracefully when a request body was left unread.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// isOutOfFiles reports whether an accept failed for want of a file
// descriptor, of the process (EMFILE) or of the system (ENFILE).
func isOutOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// reason is why a connection is refused.
type reason int

const (
	reasonPerIP reason = iota // MaxConnsPerIP
	reasonTotal               // MaxConns
	reasonFiles               // no file descriptor left
	numReasons
)

func (r reason) String() string {
	return [...]string{"per_ip", "total", "files"}[r]
}

// status is the HTTP status a connection refused for r is answered.
func (r reason) status() int {
	if r == reasonPerIP {
		return 429
	}
	return 503
}

// warnEvery is how often a reason's refusals are logged at Warn at most.
const warnEvery = time.Minute

// warn logs msg at Warn unless the reason was logged within warnEvery;
// the next line says how many refusals went unlogged meanwhile.
func (l *Listener) warn(r reason, msg string, args ...any) {
	if n, ok := l.warnings[r].allow(time.Now()); ok {
		l.log.Warn(msg, append(args, "refused_since_last_warning", n)...)
	}
}

// throttle lets one event through per warnEvery, counting the others.
type throttle struct {
	mu      sync.Mutex // guards last, skipped
	last    time.Time
	skipped int
}

func (t *throttle) allow(now time.Time) (skipped int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < warnEvery {
		t.skipped++
		return 0, false
	}
	skipped, t.skipped, t.last = t.skipped, 0, now
	return skipped, true
}
