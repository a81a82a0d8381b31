package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a redis-server or a Baton node may take to
// be ready, and a process to end once killed.
const startTimeout = 30 * time.Second

// process is a child process: it is killed (SIGKILL) and waited for by
// kill, which every path out of the command calls.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
}

// startProcess starts cmd; ready, when not nil, reads its stdout (which it must
// read to the end) and sends the first line for which ok says true.
func startProcess(cmd *exec.Cmd, ready func(line string) bool) (*process, <-chan string, error) {
	var stdout io.ReadCloser
	if ready != nil {
		var err error
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, nil, err
		}
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() { // owned by p: kill waits for done
		if stdout != nil {
			sc := bufio.NewScanner(stdout)
			sent := false
			for sc.Scan() {
				if !sent && ready(sc.Text()) {
					lines <- sc.Text()
					sent = true
				}
			}
		}
		// Wait only once stdout is read to its end, as os/exec asks.
		cmd.Wait()
		close(p.done)
	}()
	return p, lines, nil
}

// kill ends the process at once (SIGKILL, and SIGCONT should it be
// stopped) and waits for it.
func (p *process) kill() error {
	if p == nil {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(startTimeout):
		return fmt.Errorf("process %d did not end within %v of SIGKILL", p.cmd.Process.Pid, startTimeout)
	}
}

// redisServer is one of the run's redis-servers: with an append-only file
// synced on every write (appendfsync always), so a restart keeps every
// write it acknowledged; or a sentinel.
type redisServer struct {
	bin, dir string
	port     int
	busPort  int // a cluster node's bus port (--cluster-port)
	opt      redisOptions
	started  bool       // once: set by start, read by start
	mu       sync.Mutex // guards proc
	proc     *process
}

// redisOptions say what a redisServer is besides a master.
type redisOptions struct {
	replicaOf string // host:port of its master: a replica
	// sentinel is the configuration of a sentinel (the server in Sentinel
	// mode); its file is written at the first start, and the sentinel
	// rewrites it.
	sentinel func(port int) string
	// announce, when not 0, makes the server a node of a Redis Cluster
	// that announces this port (its front's, front.go) to its clients.
	announce int
}

// startRedis starts a redis-server in dir (which must exist) on a free port.
func startRedis(ctx context.Context, dir string, opt redisOptions) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: install Debian's redis-server: %w", err)
	}
	r := &redisServer{bin: bin, dir: dir, opt: opt}
	// A port found free may be taken before redis-server binds it.
	for attempt := 1; ; attempt++ {
		if r.port, err = freePort(); err != nil {
			return nil, err
		}
		if opt.announce != 0 {
			if r.busPort, err = freePort(); err != nil {
				return nil, err
			}
		}
		if err = r.start(ctx); err == nil {
			return r, nil
		}
		if attempt == 3 {
			return nil, err
		}
	}
}

func (r *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// start runs redis-server on its port and dir, and waits until it answers
// PING: after a restart, once it has loaded its append-only file.
func (r *redisServer) start(ctx context.Context) error {
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"), "--daemonize", "no"}
	switch {
	case r.opt.sentinel != nil:
		conf := filepath.Join(r.dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil {
			if err := os.WriteFile(conf, []byte(r.opt.sentinel(r.port)), 0o600); err != nil {
				return fmt.Errorf("sentinel config: %w", err)
			}
		}
		args = append([]string{conf, "--sentinel"}, args...)
	default:
		// A replica's full resync (after a restart or a failover) starts
		// at once, not after the default 5 s wait for more replicas: the
		// nodes count no write (--redis-replicas) until it is done.
		args = append(args, "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
		if r.opt.announce != 0 {
			// The cluster's configuration (nodes.conf) survives a
			// restart: the server rejoins as the node it was.
			bus := strconv.Itoa(r.busPort)
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(r.dir, "nodes.conf"),
				"--cluster-port", bus, "--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)),
				"--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", strconv.Itoa(r.opt.announce),
				"--cluster-announce-bus-port", bus)
		}
		// Only at the first start: restarted, a server comes back as a
		// master with what it had, and the sentinels make it a replica
		// again if another is the master now.
		if r.opt.replicaOf != "" && !r.started {
			host, port, _ := net.SplitHostPort(r.opt.replicaOf)
			args = append(args, "--replicaof", host, port)
		}
	}
	p, _, err := startProcess(exec.Command(r.bin, args...), nil)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		err := ping(ctx, r.addr())
		if err == nil {
			r.started = true
			r.mu.Lock()
			r.proc = p
			r.mu.Unlock()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("redis-server on port %d exited: %s", r.port, tail(filepath.Join(r.dir, "redis.log")))
		case <-ctx.Done():
			p.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %w", r.port, startTimeout, err)
		case <-time.After(20 * time.Millisecond): // polling pace, not synchronisation
		}
	}
}

// restart kills redis-server (SIGKILL) and starts it again on the same
// port and directory, from its append-only file.
func (r *redisServer) restart(ctx context.Context) error {
	if err := r.kill(); err != nil {
		return err
	}
	return r.start(ctx)
}

func (r *redisServer) kill() error {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	return p.kill()
}

// ping sends one PING over a fresh connection and expects PONG.
func ping(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	return rdb.Ping(ctx).Err()
}

// node is one Baton process, on a fixed address (a restarted node comes
// back where its clients look for it), reaching Redis through its own
// fault proxies.
type node struct {
	name   string
	addr   string
	args   []string // the baton command line, less the binary
	bin    string
	log    string   // file its stderr (the log) is appended to
	proxy  proxySet // between it and Redis: one proxy, or one per server of a cluster
	routes *routes  // with --cluster, where the fronts learn its process

	mu   sync.Mutex // guards proc
	proc *process
}

func (n *node) url() string { return "ws://" + n.addr + "/ws" }

// start starts the node and waits until it listens.
func (n *node) start(ctx context.Context) error {
	logf, err := os.OpenFile(n.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stderr = logf
	// The fronts learn the process before it can dial Redis.
	if n.routes != nil {
		n.routes.begin()
	}
	p, listening, err := startProcess(cmd, func(line string) bool { return strings.HasPrefix(line, "baton listening on ") })
	if n.routes != nil {
		pid := 0
		if err == nil {
			pid = p.cmd.Process.Pid
		}
		n.routes.end(pid, n.proxy)
	}
	if err != nil {
		return fmt.Errorf("node %s: %w", n.name, err)
	}
	select {
	case <-listening:
		n.mu.Lock()
		n.proc = p
		n.mu.Unlock()
		return nil
	case <-p.done:
		n.forget(p)
		return fmt.Errorf("node %s exited before listening: %s", n.name, tail(n.log))
	case <-time.After(startTimeout):
		p.kill()
		n.forget(p)
		return fmt.Errorf("node %s did not listen within %v: %s", n.name, startTimeout, tail(n.log))
	case <-ctx.Done():
		p.kill()
		n.forget(p)
		return ctx.Err()
	}
}

// forget removes p, a process of the node's that has ended, from the
// fronts' routes.
func (n *node) forget(p *process) {
	if n.routes != nil && p != nil {
		n.routes.remove(p.cmd.Process.Pid)
	}
}

// kill kills the node (SIGKILL), as a crash would, and waits for it.
func (n *node) kill() error {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	err := p.kill()
	n.forget(p)
	return err
}

// running reports whether the node's process is up.
func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil
}

// freePort returns a loopback port nothing listens on at the moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the end of a log file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// running reports whether redis-server is up.
func (r *redisServer) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil
}
