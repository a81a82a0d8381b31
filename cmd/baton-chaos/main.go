// Command baton-chaos runs a small Baton cluster under real faults and
// checks, with zero tolerance, that nothing is lost, nothing is done
// twice, and no run is stranded (issue 24). It starts a redis-server
// (appendonly yes, appendfsync always) and two or three Baton processes
// (--store redis), each reaching Redis through its own fault proxy
// (internal/faultproxy); runs clients (package client) that start runs,
// answer confirmations, drop their connections at random and resume on
// another node, each checking its own stream; and injects, on a random
// schedule drawn from --seed, latency, stalls, connection resets, a
// partition of one node from Redis, a pub/sub kill, a Redis restart from
// its append-only file, and kill -9 of a node (started again); with
// --sentinel, Redis is a master, two replicas and three sentinels, and
// failovers are among the faults (sentinel.go); with --cluster, Redis is
// a Redis Cluster of three masters, each with a replica, and among the
// faults are a master killed (its replica promoted by the cluster, the
// killed server started again as a replica), a manual CLUSTER FAILOVER
// and slots moved with redis-cli --cluster reshard (rediscluster.go). A
// cluster's servers announce the addresses of fronts, which hand each
// node's connections to proxies of that node's, so a node can still be
// cut from Redis alone (front.go). Every task
// that calls a tool calls a counting MCP server (this command, run as
// "baton-chaos mcp-count"), whose ledger shows a tool call Baton made
// twice without knowing it (tools.go).
//
// After --duration it stops the faults, heals everything, waits (at most
// --settle) for every run to end, and reports: faults by kind, runs
// started and ended, resumes, resyncs, rejections, duplicates, gaps,
// forks, runs stranded and tool calls repeated. See docs/chaos.md.
//
//	go run ./cmd/baton-chaos -duration 1m -seed 7
//
// It exits 1 on a duplicate, a gap, a fork, a stranded run or a tool call
// repeated unknowing, and kills every process it started on the way out
// (on an error and on SIGINT too).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
)

func main() {
	ctx := context.Background()
	if len(os.Args) > 1 && os.Args[1] == mcpCommand {
		if err := serveCounter(ctx, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "baton-chaos:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "baton-chaos:", err)
		os.Exit(1)
	}
}

type config struct {
	nodes    int
	clients  int
	duration time.Duration
	settle   time.Duration
	every    time.Duration
	kinds    []kind
	seed     uint64
	dropRate float64
	sentinel bool
	cluster  bool
	baton    string
	race     bool
	simDelay time.Duration
	json     bool
	keep     bool
	quiet    bool
	giveUp   time.Duration // the nodes' --redis-give-up
	leaseTTL time.Duration // the nodes' --lease-ttl
	replicas int           // the nodes' --redis-replicas, with --sentinel or --cluster
}

// mode is what the run's Redis is.
func (c config) mode() redisMode {
	switch {
	case c.cluster:
		return modeCluster
	case c.sentinel:
		return modeSentinel
	}
	return modeSingle
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	c := config{}
	fs := flag.NewFlagSet("baton-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.nodes, "nodes", 3, "Baton processes (2 or 3)")
	fs.IntVar(&c.clients, "clients", 6, "concurrent clients, each one session at a time")
	fs.DurationVar(&c.duration, "duration", time.Minute, "how long faults are injected and runs started")
	fs.DurationVar(&c.settle, "settle", 2*time.Minute, "after --duration, how long the runs still open may take to end (a run open after it is stranded)")
	fs.DurationVar(&c.every, "fault-every", 3*time.Second, "mean time between the end of one fault and the start of the next")
	faults := fs.String("faults", "", "the faults to inject, comma-separated (default "+joinKinds(kinds)+"; with --sentinel "+joinKinds(sentinelKinds)+"; with --cluster "+joinKinds(clusterKinds)+")")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed of the schedule and the clients (0: one from the clock, printed)")
	fs.Float64Var(&c.dropRate, "drop-rate", 6, "connection drops per client per minute")
	fs.BoolVar(&c.sentinel, "sentinel", false, "run Redis as a Sentinel setup (a master, two replicas, three sentinels) and inject failovers; the nodes then reach Redis directly, not through their fault proxies, and need a baton whose --redis-url takes a Sentinel URL")
	fs.BoolVar(&c.cluster, "cluster", false, "run Redis as a Redis Cluster (three masters, each with a replica) and inject its faults: masters killed, manual failovers, slots moved; each node reaches every server through a proxy of its own (Linux only), and needs a baton whose --redis-url takes a Redis Cluster")
	fs.StringVar(&c.baton, "baton", "", "the baton binary (default: go build ./cmd/baton of this module into a temporary directory)")
	fs.BoolVar(&c.race, "race", false, "build baton with -race (without --baton)")
	fs.DurationVar(&c.simDelay, "sim-delay", 30*time.Millisecond, "the nodes' --sim-delay")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	fs.BoolVar(&c.keep, "keep", false, "keep the directory of logs, Redis data and the tool ledger (kept anyway on failure)")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress or fault lines")
	fs.DurationVar(&c.giveUp, "redis-give-up", 2*time.Second, "the nodes' --redis-give-up: short, so a stall makes a node give sessions up and a resume adopt them (0: the node's default)")
	fs.IntVar(&c.replicas, "redis-replicas", 0, "with --sentinel or --cluster, the nodes' --redis-replicas (0: the node's default, 1: every replica the master lists, and at least one)")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 0, "the nodes' --lease-ttl: a stall or partition longer lets another node take a node's runs over (0: the node's default, 3s)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.nodes < 2 || c.nodes > 3 {
		return c, errors.New("--nodes must be 2 or 3")
	}
	if c.clients < 1 || c.duration <= 0 || c.settle <= 0 || c.every <= 0 || c.dropRate < 0 || c.giveUp < 0 || c.leaseTTL < 0 || c.replicas < 0 {
		return c, errors.New("--clients must be at least 1; --duration, --settle and --fault-every above 0; --drop-rate, --redis-give-up, --lease-ttl and --redis-replicas not negative")
	}
	if c.sentinel && c.cluster {
		return c, errors.New("--sentinel and --cluster: one or the other")
	}
	if c.cluster && !canTellPeers {
		return c, errors.New("--cluster needs Linux: its fronts tell the nodes' connections apart by /proc")
	}
	c.kinds = c.mode().kinds()
	if *faults != "" {
		var err error
		if c.kinds, err = parseKinds(*faults, c.mode()); err != nil {
			return c, err
		}
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return c, nil
}

func joinKinds(ks []kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// errFailed makes run (and so main) fail when the chaos run found a defect.
var errFailed = errors.New("chaos run failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress := stderr
	if cfg.quiet {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "baton-chaos: seed %d\n", cfg.seed)

	dir, err := os.MkdirTemp("", "baton-chaos-")
	if err != nil {
		return err
	}
	keep := cfg.keep
	defer func() {
		if keep || err != nil {
			fmt.Fprintf(progress, "baton-chaos: logs in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()

	bin := cfg.baton
	if bin == "" {
		if bin, err = buildBaton(ctx, dir, cfg.race); err != nil {
			return err
		}
	}
	// This command (or, in its test, the test binary) is the counting
	// tool's MCP server.
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the counting tool: %w", err)
	}
	mcpCmd := []string{exe, mcpCommand}
	ledger := filepath.Join(dir, "tools.ledger")

	// Every process is killed on the way out, whatever the way.
	rs, err := startRedisSet(ctx, dir, cfg.mode(), progress)
	defer rs.kill()
	if err != nil {
		return err
	}
	nodes := make([]*node, cfg.nodes)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.kill()
				n.proxy.Close()
			}
		}
	}()
	urls := make([]string, cfg.nodes)
	for i := range nodes {
		n, err := newNode(i, dir, bin, rs, cfg, append(mcpCmd, "-ledger", ledger, "-node", string(nodeName(i))))
		if err != nil {
			return err
		}
		nodes[i] = n
		if err := n.start(ctx); err != nil {
			return err
		}
		urls[i] = n.url()
	}

	start := time.Now()
	ph := phases{stopRuns: start.Add(cfg.duration), hardEnd: start.Add(cfg.duration + cfg.settle)}
	masters := 0
	if cfg.cluster {
		masters = clusterMasters
	}
	sched := schedule(cfg.seed, cfg.duration, cfg.every, cfg.nodes, masters, cfg.kinds)
	in := newInjector(rs, nodes, progress)
	stopFaults := make(chan struct{})
	var faultsWG sync.WaitGroup
	faultsWG.Add(1)
	go func() {
		defer faultsWG.Done()
		in.run(ctx, sched, start, stopFaults)
	}()

	results := make([]clientResult, cfg.clients)
	var clientsWG sync.WaitGroup
	for i := range cfg.clients {
		clientsWG.Add(1)
		go func() {
			defer clientsWG.Done()
			results[i] = runClient(ctx, cfg, urls, i, ph)
		}()
	}

	// The faults stop at --duration (or on SIGINT), and everything is
	// healed so that every run can end.
	select {
	case <-time.After(cfg.duration):
	case <-ctx.Done():
	}
	close(stopFaults)
	faultsWG.Wait()
	fmt.Fprintf(progress, "baton-chaos: faults over after %v; healing, and waiting at most %v for the runs to end\n",
		time.Since(start).Round(time.Millisecond), cfg.settle)
	in.healAll(ctx)
	clientsWG.Wait()

	rep := &report{Seed: cfg.seed, Duration: cfg.duration.Seconds(), Nodes: cfg.nodes, Clients: cfg.clients, Redis: cfg.mode().String()}
	rep.Faults, rep.FaultErrors = in.result()
	var connectErr error
	for _, r := range results {
		rep.add(r)
		if r.ConnectErr != nil {
			connectErr = r.ConnectErr
		}
	}
	if f, err := os.Open(ledger); err == nil {
		rep.Tools, err = countLedger(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	failed := rep.failed()
	if cfg.keep || failed != "" {
		rep.Dir = dir
		keep = true
	}
	if cfg.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printReport(stdout, rep)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", ctx.Err())
	case failed != "":
		return fmt.Errorf("%w: %s (seed %d)", errFailed, failed, cfg.seed)
	case rep.Sessions == 0:
		return fmt.Errorf("no client could connect: %w", connectErr)
	case len(rep.FaultErrors) > 0:
		return fmt.Errorf("faults could not be made or healed: %s", strings.Join(rep.FaultErrors, "; "))
	}
	return nil
}

// newNode makes node i's fault proxies and command line.
func newNode(i int, dir, bin string, rs *redisSet, cfg config, mcp []string) (*node, error) {
	var ps proxySet
	var redisURL string
	switch {
	case rs.cluster != nil:
		// A proxy per server, handed the node's connections by the
		// server's front (front.go), which is the address in the URL.
		for _, s := range rs.servers {
			ps = append(ps, faultproxy.New(s.addr()))
		}
		redisURL = rs.url()
	default:
		p, err := faultproxy.Start(rs.servers[0].addr())
		if err != nil {
			return nil, err
		}
		ps = proxySet{p}
		redisURL = "redis://" + p.Addr() + "/0"
		if cfg.sentinel {
			redisURL = rs.url() // the sentinels name the master: no proxy in the way
		}
	}
	port, err := freePort()
	if err != nil {
		ps.Close()
		return nil, err
	}
	name := string(nodeName(i))
	n := &node{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin, proxy: ps,
		log: filepath.Join(dir, "node-"+name+".log")}
	if rs.cluster != nil {
		n.routes = rs.cluster.routes
	}
	n.args = []string{"--addr", n.addr, "--store", "redis", "--redis-url", redisURL,
		"--sim-delay", cfg.simDelay.String(), "--retry-base", "20ms", "--log-level", "debug",
		"--mcp", "count=" + strings.Join(mcp, " "), "--mcp-trust", "count",
		// Every client comes from 127.0.0.1.
		"--max-conns-per-ip", "0", "--max-sessions-per-ip", "0", "--rate-limit", "0"}
	// 0 leaves the node's default, and a baton older than the flag works.
	if cfg.giveUp > 0 {
		n.args = append(n.args, "--redis-give-up", cfg.giveUp.String())
	}
	if cfg.leaseTTL > 0 {
		n.args = append(n.args, "--lease-ttl", cfg.leaseTTL.String())
	}
	if (cfg.sentinel || cfg.cluster) && cfg.replicas > 0 {
		n.args = append(n.args, "--redis-replicas", strconv.Itoa(cfg.replicas))
	}
	return n, nil
}

// buildBaton builds cmd/baton of this module into dir.
func buildBaton(ctx context.Context, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "baton")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "github.com/baton-run/baton/cmd/baton")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/baton: %w\n%s", err, out)
	}
	return bin, nil
}
