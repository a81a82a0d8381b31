package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
)

// With --cluster a node cannot have one proxy to Redis as it has to one
// server: a cluster client dials the addresses the servers announce for
// themselves (CLUSTER SLOTS, MOVED, ASK), not the one it was given, and a
// server announces one address to every client. So each server announces
// the address of a front (cluster-announce-port; the cluster bus,
// cluster-announce-bus-port, stays direct), and every client of the
// cluster — the nodes, redis-cli, a replica's link to its master, a
// MIGRATE — reaches the server there. A front tells a node's connections
// from the others by the process at their other end (socketPID: Linux's
// /proc) and hands each to that node's proxy to that server. A node's
// proxies, one per server, are its path to the cluster: a partition of
// them cuts the node from every server while the other nodes and the
// cluster's own traffic keep theirs. Any other connection goes through a
// proxy of the front's that no fault touches. A killed server's front
// stops listening until the server is started again, so its address
// refuses connections as a dead server's port does.

// proxySet is a node's path to Redis: one proxy, or with --cluster one
// per server. A fault of the path is made on every proxy of it.
type proxySet []*faultproxy.Proxy

func (ps proxySet) SetLatency(d time.Duration) {
	for _, p := range ps {
		p.SetLatency(d)
	}
}

func (ps proxySet) Stall() {
	for _, p := range ps {
		p.Stall()
	}
}

func (ps proxySet) Unstall() {
	for _, p := range ps {
		p.Unstall()
	}
}

func (ps proxySet) Reset() {
	for _, p := range ps {
		p.Reset()
	}
}

func (ps proxySet) Partition() {
	for _, p := range ps {
		p.Partition()
	}
}

func (ps proxySet) Heal() {
	for _, p := range ps {
		p.Heal()
	}
}

func (ps proxySet) Close() {
	for _, p := range ps {
		p.Close()
	}
}

// routes is whose proxies the fronts hand a node's connections to: each
// node's process and its proxySet. Its methods may be called
// concurrently.
type routes struct {
	mu       sync.Mutex // guards the fields below
	byPID    map[int]proxySet
	starting int           // nodes started and not yet registered (end)
	settled  chan struct{} // closed while starting is 0
	err      error         // the first failure to tell a connection's process
}

func newRoutes() *routes {
	settled := make(chan struct{})
	close(settled)
	return &routes{byPID: map[int]proxySet{}, settled: settled}
}

// begin marks a node as being started: until its end, a connection no
// registered process holds (it may be the new node's) waits for it to be
// registered before it is taken for another client's.
func (r *routes) begin() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.starting == 0 {
		r.settled = make(chan struct{})
	}
	r.starting++
}

// end registers pid as the process of the node whose proxies ps are (pid
// 0: the start failed), and ends its begin.
func (r *routes) end(pid int, ps proxySet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid != 0 {
		r.byPID[pid] = ps
	}
	if r.starting--; r.starting == 0 {
		close(r.settled)
	}
}

// remove forgets pid, the process of a node that has ended.
func (r *routes) remove(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byPID, pid)
}

// route returns the proxy to server i of the node whose process holds
// c's other end; nil when it is no node's.
func (r *routes) route(c net.Conn, server int) *faultproxy.Proxy {
	for attempt := 0; ; attempt++ {
		r.mu.Lock()
		pids := make([]int, 0, len(r.byPID))
		for pid := range r.byPID {
			pids = append(pids, pid)
		}
		settled, starting := r.settled, r.starting > 0
		r.mu.Unlock()
		pid, err := socketPID(c, pids)
		r.mu.Lock()
		ps := r.byPID[pid]
		if err != nil && r.err == nil {
			r.err = err
		}
		r.mu.Unlock()
		if ps != nil {
			return ps[server]
		}
		if !starting || attempt > 0 {
			return nil
		}
		select {
		case <-settled:
		case <-time.After(startTimeout):
			return nil
		}
	}
}

// failed returns the first failure to tell a connection's process: the
// nodes' faults may then have missed connections of theirs.
func (r *routes) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// front is the address a server of the cluster announces. Its methods are
// called by one goroutine at a time (the run's, then the injector's).
type front struct {
	addr   string // 127.0.0.1:PORT, for good: the server announces it
	server int    // the server's index in the cluster
	routes *routes
	pass   *faultproxy.Proxy // every connection that is no node's

	mu sync.Mutex   // guards ln
	ln net.Listener // nil while down
	wg sync.WaitGroup
}

// newFront listens on a free port, for server i; setTarget names the
// server once it has a port.
func newFront(i int, r *routes) (*front, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("front of server %d: %w", i, err)
	}
	f := &front{addr: ln.Addr().String(), server: i, routes: r, pass: faultproxy.New("")}
	f.serve(ln)
	return f, nil
}

func (f *front) port() int {
	_, p, _ := net.SplitHostPort(f.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// setTarget is where connections that are no node's go.
func (f *front) setTarget(addr string) { f.pass.SetTarget(addr) }

func (f *front) serve(ln net.Listener) {
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	f.wg.Add(1)
	go f.accept(ln) // owned by f: down waits for it
}

// accept hands each connection to the proxy of the node it comes from,
// or to pass, until ln is closed.
func (f *front) accept(ln net.Listener) {
	defer f.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient accept error (too many files): pacing, not synchronisation
			continue
		}
		f.wg.Add(1)
		go func() { // owned by f: down waits for it
			defer f.wg.Done()
			p := f.routes.route(c, f.server)
			if p == nil {
				p = f.pass
			}
			p.Serve(c)
		}()
	}
}

// down stops listening (a connection is refused, as at a dead server's
// port) and waits for the connections accepted to be handed on; those
// end with the server's.
func (f *front) down() {
	f.mu.Lock()
	ln := f.ln
	f.ln = nil
	f.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	f.wg.Wait()
}

// up listens on the front's address again. Should another socket have
// taken the port as its own (an outgoing connection's), it tries again
// for a while.
func (f *front) up() error {
	f.mu.Lock()
	listening := f.ln != nil
	f.mu.Unlock()
	if listening {
		return nil
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ln, err := net.Listen("tcp", f.addr)
		if err == nil {
			f.serve(ln)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("front of server %d: %w", f.server, err)
		}
		time.Sleep(100 * time.Millisecond) // pacing between attempts
	}
}

// close stops the front and its proxy; the nodes' proxies are the nodes'.
func (f *front) close() {
	f.down()
	f.pass.Close()
}
