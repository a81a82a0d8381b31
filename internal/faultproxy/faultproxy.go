// Package faultproxy is a TCP proxy that injects the faults a network and a
// server produce: latency, a stall, connection resets and a partition. The
// tests and the chaos command put one between a Baton node and
// redis-server, so one node can lose Redis while another keeps it. A Proxy
// made with New has no listener of its own: a listener shared by several
// proxies hands each its connections (Serve), as the chaos command's fronts
// of a Redis Cluster do, telling one Baton node's connections from
// another's. It knows nothing of Redis or Baton: it moves bytes, or refuses
// to.
//
// A Proxy's methods may be called concurrently.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds a dial of the target; a client whose dial fails is
// reset, as the target itself would have refused it.
const dialTimeout = 5 * time.Second

// chunkSize is the largest read forwarded as one chunk.
const chunkSize = 32 << 10

// Proxy forwards each accepted connection to its target, with the faults
// set on it.
type Proxy struct {
	ln     net.Listener    // nil for a Proxy made with New
	ctx    context.Context // cancelled by Close: ends dials under way
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine the proxy started

	// mu guards the fields below it.
	mu          sync.Mutex
	target      string
	latency     time.Duration
	flowing     chan struct{} // closed while not stalled; Stall makes a new one
	partitioned bool
	closed      bool
	conns       map[*pair]struct{}
}

// pair is one proxied connection: the client's and the target's ends.
type pair struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the pair is torn down
}

// Start listens on a free loopback port and forwards each connection to
// target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := New(target)
	p.ln = ln
	p.wg.Add(1)
	go p.accept() // owned by p: Close waits for it
	return p, nil
}

// New returns a Proxy to target with no listener of its own: it proxies
// the connections given to Serve.
func New(target string) *Proxy {
	ctx, cancel := context.WithCancel(context.Background())
	flowing := make(chan struct{})
	close(flowing)
	return &Proxy{ctx: ctx, cancel: cancel, target: target,
		flowing: flowing, conns: make(map[*pair]struct{})}
}

// Addr returns the host:port to give a client (Baton) as its server; ""
// for a Proxy made with New.
func (p *Proxy) Addr() string {
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// Serve proxies c, a connection accepted by a listener of the caller's, as
// if the proxy's own had accepted it: the proxy owns c from now on (a
// closed proxy resets it). It returns at once.
func (p *Proxy) Serve(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		rst(c)
		return
	}
	// Added under mu, before Close (which sets closed under mu) waits.
	p.wg.Add(1)
	go p.serve(c) // owned by p: Close waits for it
}

// SetLatency delays every chunk forwarded, both ways, by d (0 = none). A
// chunk is what one read returned, so pipelined commands may share one
// delay; the delay applies to chunks read from now on.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall stops forwarding bytes both ways, as a server stopped with SIGSTOP
// does: connections stay open, new ones are accepted and stall too, until
// Unstall. Nothing read is lost; it is forwarded after Unstall.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already stalled
	}
}

// Unstall forwards again what a Stall held.
func (p *Proxy) Unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// Reset closes every current connection with a TCP RST on both sides (the
// client's and the target's); new connections work.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := p.take()
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Partition cuts the proxy's clients off from the target: current
// connections are reset and new ones are reset as soon as accepted, until
// Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.partitioned = true
	conns := p.take()
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Heal ends a Partition: new connections are forwarded again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.partitioned = false
	p.mu.Unlock()
}

// SetTarget sets where new connections go (after a restart of the server on
// another port, or a failover); current ones stay where they are.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Conns returns how many connections are open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy: it stops listening, resets every connection
// (and every one given to Serve after) and waits for every goroutine it
// started.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.take()
	p.mu.Unlock()
	p.cancel()
	var err error
	if p.ln != nil {
		err = p.ln.Close()
	}
	for _, c := range conns {
		c.reset()
	}
	p.wg.Wait()
	return err
}

// take empties the connection set and returns what it held; p.mu is held.
func (p *Proxy) take() []*pair {
	conns := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
		delete(p.conns, c)
	}
	return conns
}

// accept serves each accepted connection until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (too many files): try again, not
			// in a tight loop.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c) // owned by p: Close waits for it
	}
}

// serve dials the target for client and forwards both ways until either
// side closes or the pair is reset.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target, refuse := p.target, p.partitioned || p.closed
	p.mu.Unlock()
	if refuse {
		rst(client)
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", target)
	if err != nil {
		rst(client)
		return
	}
	c := &pair{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	// A Partition, Reset or Close may have come while dialling: a
	// partition or Close refuses the pair, a Reset missed it (it was not
	// current yet), which is fine.
	if p.partitioned || p.closed {
		p.mu.Unlock()
		c.reset()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	p.wg.Add(1)
	go func() { // owned by p: Close waits for it
		defer p.wg.Done()
		p.pipe(c, server, client)
	}()
	p.pipe(c, client, server)
}

// pipe copies src to dst, chunk by chunk, holding each chunk while stalled
// and for the latency, and tears the pair down when either side ends.
func (p *Proxy) pipe(c *pair, src, dst net.Conn) {
	defer p.drop(c)
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			p.mu.Lock()
			flowing, latency := p.flowing, p.latency
			p.mu.Unlock()
			select {
			case <-flowing:
			case <-c.done:
				return
			}
			if wait := time.Until(read.Add(latency)); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-c.done:
					t.Stop()
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Either side's end (EOF or error) ends the pair: Redis
			// clients do not half-close, so a FIN need not be passed on
			// alone.
			return
		}
	}
}

// drop removes c from the connection set and closes it.
func (p *Proxy) drop(c *pair) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close(false)
}

// reset closes both ends of c with a TCP RST.
func (c *pair) reset() { c.close(true) }

// close closes both ends of c once, with an RST when reset.
func (c *pair) close(reset bool) {
	c.once.Do(func() {
		close(c.done)
		if reset {
			rst(c.client)
			rst(c.server)
			return
		}
		c.client.Close()
		c.server.Close()
	})
}

// rst closes conn with a TCP RST rather than a FIN, as a crashed peer or a
// middlebox does.
func rst(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}
