package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// With --cluster, Redis is a Redis Cluster: six redis-servers
// (cluster-enabled, each with its append-only file as the other modes
// have, cluster-node-timeout 1 s), joined by `redis-cli --cluster create
// --cluster-replicas 1` as an operator joins one — three masters, each
// with a replica — and each announcing the address of its front
// (front.go). The nodes' --redis-url is the cluster URL of the six
// fronts. The cluster's faults are made as in production: a master killed
// and its replica promoted by the cluster itself, a manual CLUSTER
// FAILOVER, slots moved with `redis-cli --cluster reshard`. Each begins
// once the cluster is whole (ready) and is healed once it is whole again.

// clusterMasters is how many masters the cluster has, each with one
// replica.
const clusterMasters = 3

// clusterNodeTimeout is the servers' cluster-node-timeout: how long a
// master may be unreachable before its replica is promoted in its place.
const clusterNodeTimeout = time.Second

// reshardTimeout bounds one `redis-cli --cluster reshard`, keys and all.
const reshardTimeout = 3 * time.Minute

// clusterSet is the run's Redis Cluster. Its methods are called by one
// goroutine at a time (the run's, then the injector's).
type clusterSet struct {
	cli     string // redis-cli
	log     string // the file redis-cli's output is appended to
	servers []*redisServer
	fronts  []*front // fronts[i] is the address servers[i] announces
	admin   []*redis.Client
	routes  *routes
	out     io.Writer // a line per step of a fault, at its wall-clock time (the nodes' logs' UTC)

	lostSince map[string]time.Time // slots lost from a master's own configuration, since when seen (lostslots.go)
	defects   []string             // what Redis did wrong, and the run repaired
}

func (cs *clusterSet) logf(format string, args ...any) {
	fmt.Fprintf(cs.out, "chaos:   %s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05.000")}, args...)...)
}

// startCluster starts the servers and their fronts, joins them, and waits
// until the cluster is ready. The set it returns is killed by its kill,
// even with an error.
func startCluster(ctx context.Context, dir string, out io.Writer) (*redisSet, error) {
	cs := &clusterSet{log: filepath.Join(dir, "redis-cli.log"), routes: newRoutes(), out: out}
	rs := &redisSet{cluster: cs}
	var err error
	if cs.cli, err = exec.LookPath("redis-cli"); err != nil {
		return rs, fmt.Errorf("redis-cli not found: install Debian's redis-tools: %w", err)
	}
	for i := range clusterMasters * 2 {
		f, err := newFront(i, cs.routes)
		if err != nil {
			return rs, err
		}
		cs.fronts = append(cs.fronts, f)
		d := filepath.Join(dir, fmt.Sprintf("redis-%d", i+1))
		if err := os.Mkdir(d, 0o755); err != nil {
			return rs, err
		}
		r, err := startRedis(ctx, d, redisOptions{announce: f.port()})
		if err != nil {
			return rs, fmt.Errorf("redis-%d: %w", i+1, err)
		}
		f.setTarget(r.addr())
		rs.servers = append(rs.servers, r)
		cs.servers = rs.servers
		cs.admin = append(cs.admin, redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, PoolSize: 2,
			DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second}))
	}
	args := []string{"--cluster", "create"}
	for _, f := range cs.fronts {
		args = append(args, f.addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if err := cs.redisCLI(ctx, failoverTimeout, args...); err != nil {
		return rs, err
	}
	return rs, cs.waitReady(ctx)
}

// url is the nodes' --redis-url: go-redis's cluster URL of every front.
func (cs *clusterSet) url() string {
	q := make([]string, 0, len(cs.fronts)-1)
	for _, f := range cs.fronts[1:] {
		q = append(q, "addr="+f.addr)
	}
	return "redis://" + cs.fronts[0].addr + "?" + strings.Join(q, "&")
}

// redisCLI runs redis-cli with args, its output appended to the log.
func (cs *clusterSet) redisCLI(ctx context.Context, timeout time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cs.cli, args...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	if f, ferr := os.OpenFile(cs.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); ferr == nil {
		fmt.Fprintf(f, "%s redis-cli %s\n%s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "), out)
		f.Close()
	}
	if err != nil {
		s := strings.TrimSpace(string(out))
		if len(s) > 1000 {
			s = s[len(s)-1000:]
		}
		return fmt.Errorf("redis-cli %s: %w: %s", args[1], err, s)
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string   // addr: the address it announces, less the bus port
	myself   bool     // the server asked
	master   bool     // a master (it may serve no slot)
	failing  bool     // flagged fail, fail?, handshake or noaddr
	of       string   // a replica's master's id
	slots    []string // its slot fields: "0-5460", "[93->-id]" while migrating
}

// parseNodes reads CLUSTER NODES.
func parseNodes(text string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := clusterNode{id: f[0], addr: addr, slots: f[8:]}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "myself":
				n.myself = true
			case "master":
				n.master = true
			case "fail", "fail?", "handshake", "noaddr":
				n.failing = true
			}
		}
		if f[3] != "-" {
			n.of = f[3]
		}
		out = append(out, n)
	}
	return out
}

// nodes reads server i's CLUSTER NODES.
func (cs *clusterSet) nodes(ctx context.Context, i int) ([]clusterNode, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := cs.admin[i].ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redis-%d: CLUSTER NODES: %w", i+1, err)
	}
	return parseNodes(text), nil
}

// fields runs a command whose answer is "key:value" lines (INFO, CLUSTER
// INFO) on server i.
func (cs *clusterSet) fields(ctx context.Context, i int, args ...any) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	text, err := cs.admin[i].Do(ctx, args...).Text()
	if err != nil {
		return nil, fmt.Errorf("redis-%d: %v: %w", i+1, args, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// server returns the index of the server announcing addr, -1 for none.
func (cs *clusterSet) server(addr string) int {
	for i, f := range cs.fronts {
		if f.addr == addr {
			return i
		}
	}
	return -1
}

// shard is a master, by its server's index and node id, with its replica.
type shard struct {
	master, replica     int
	masterID, replicaID string
}

// shards reads the masters serving slots, in the order of their servers,
// each with its replica (-1 when it has none), as server i sees them.
func (cs *clusterSet) shards(ctx context.Context, i int) ([]shard, error) {
	nodes, err := cs.nodes(ctx, i)
	if err != nil {
		return nil, err
	}
	var out []shard
	for _, n := range nodes {
		if n.master && len(n.slots) > 0 {
			out = append(out, shard{master: cs.server(n.addr), masterID: n.id, replica: -1})
		}
	}
	for _, n := range nodes {
		for k := range out {
			if n.of == out[k].masterID {
				out[k].replica, out[k].replicaID = cs.server(n.addr), n.id
			}
		}
	}
	slices.SortFunc(out, func(a, b shard) int { return a.master - b.master })
	return out, nil
}

// ready says why the cluster is not whole, nil when it is: every server
// up, every one seeing the cluster ok, every slot served, no slot
// migrating, no node failing, and the same masters, slots and replicas;
// every master with one replica, linked, done syncing and caught up with
// the offset the master had when asked.
func (cs *clusterSet) ready(ctx context.Context) error {
	infos := make([]map[string]string, len(cs.servers))
	views := make([][]clusterNode, len(cs.servers))
	for i, s := range cs.servers {
		if !s.running() {
			return fmt.Errorf("redis-%d is down", i+1)
		}
		var err error
		if infos[i], err = cs.fields(ctx, i, "cluster", "info"); err != nil {
			return err
		}
		if views[i], err = cs.nodes(ctx, i); err != nil {
			return err
		}
	}
	// The most telling first: a master that lost slots (lostslots.go)
	// also sees the cluster failing.
	if err := cs.checkLost(ctx, views); err != nil {
		return err
	}
	var want string // the cluster as the first server sees it
	for i, info := range infos {
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" ||
			info["cluster_known_nodes"] != strconv.Itoa(len(cs.servers)) || info["cluster_size"] != strconv.Itoa(clusterMasters) {
			return fmt.Errorf("redis-%d: cluster %s, slots ok %s, nodes %s, size %s", i+1,
				info["cluster_state"], info["cluster_slots_ok"], info["cluster_known_nodes"], info["cluster_size"])
		}
		var seen []string
		for _, n := range views[i] {
			if n.failing {
				return fmt.Errorf("redis-%d sees %s failing", i+1, n.addr)
			}
			for _, sl := range n.slots {
				if strings.HasPrefix(sl, "[") {
					return fmt.Errorf("redis-%d: slot %s migrating", i+1, sl)
				}
			}
			seen = append(seen, fmt.Sprintf("%s %v %s %v", n.id, n.master, n.of, n.slots))
		}
		slices.Sort(seen)
		if got := strings.Join(seen, "\n"); i == 0 {
			want = got
		} else if got != want {
			return fmt.Errorf("redis-%d and redis-1 do not agree on the cluster", i+1)
		}
	}
	shards, err := cs.shards(ctx, 0)
	if err != nil {
		return err
	}
	if len(shards) != clusterMasters {
		return fmt.Errorf("%d masters serve slots", len(shards))
	}
	for _, sh := range shards {
		if sh.master < 0 || sh.replica < 0 {
			return fmt.Errorf("master %s has no replica", sh.masterID)
		}
		m, err := cs.fields(ctx, sh.master, "info", "replication")
		if err != nil {
			return err
		}
		r, err := cs.fields(ctx, sh.replica, "info", "replication")
		if err != nil {
			return err
		}
		offset, _ := strconv.ParseInt(m["master_repl_offset"], 10, 64)
		got, _ := strconv.ParseInt(r["slave_repl_offset"], 10, 64)
		if m["role"] != "master" || r["role"] != "slave" || r["master_link_status"] != "up" ||
			r["master_sync_in_progress"] != "0" || r["master_port"] != strconv.Itoa(cs.fronts[sh.master].port()) || got < offset {
			return fmt.Errorf("redis-%d (%s) and its replica redis-%d (%s, link %s to port %s, at %d of %d)", sh.master+1, m["role"],
				sh.replica+1, r["role"], r["master_link_status"], r["master_port"], got, offset)
		}
	}
	return nil
}

func (cs *clusterSet) waitReady(ctx context.Context) error {
	return waitFor(ctx, "the Redis Cluster whole", cs.ready)
}

// shardOf returns the k-th shard (modulo their number) of a ready
// cluster.
func (cs *clusterSet) shardOf(ctx context.Context, k int) ([]shard, shard, error) {
	if err := cs.waitReady(ctx); err != nil {
		return nil, shard{}, err
	}
	shards, err := cs.shards(ctx, 0)
	if err != nil {
		return nil, shard{}, err
	}
	return shards, shards[k%len(shards)], nil
}

// killServer kills server i (SIGKILL) and stops its front, so that its
// address refuses connections as a dead server's does.
func (cs *clusterSet) killServer(i int) error {
	err := cs.servers[i].kill()
	cs.fronts[i].down()
	return err
}

// startServer starts server i again, from its append-only file and its
// nodes.conf, and its front.
func (cs *clusterSet) startServer(ctx context.Context, i int) error {
	if err := cs.servers[i].start(ctx); err != nil {
		return err
	}
	return cs.fronts[i].up()
}

// killMaster kills the k-th master (SIGKILL) and waits until the cluster
// has promoted its replica; the heal it returns starts the killed server
// again and waits until it has rejoined, as the replica of the promoted
// one, and the cluster is whole.
func (cs *clusterSet) killMaster(ctx context.Context, k int) (heal func(context.Context) error, err error) {
	_, sh, err := cs.shardOf(ctx, k)
	if err != nil {
		return nil, err
	}
	heal = func(ctx context.Context) error {
		if err := cs.startServer(ctx, sh.master); err != nil {
			return err
		}
		cs.logf("redis-%d started again", sh.master+1)
		return cs.waitReady(ctx)
	}
	killed := time.Now()
	if err := cs.killServer(sh.master); err != nil {
		return heal, err
	}
	cs.logf("redis-%d killed, a master; its replica redis-%d", sh.master+1, sh.replica+1)
	err = waitFor(ctx, fmt.Sprintf("redis-%d promoted in place of redis-%d", sh.replica+1, sh.master+1), func(ctx context.Context) error {
		return cs.promoted(ctx, sh.replica)
	})
	if err == nil {
		cs.logf("redis-%d promoted, %v after the kill", sh.replica+1, time.Since(killed).Round(time.Millisecond))
	}
	return heal, err
}

// promoted says why server i is not yet the master every live server
// sees serving slots in a cluster ok, nil once it is.
func (cs *clusterSet) promoted(ctx context.Context, i int) error {
	for j, s := range cs.servers {
		if !s.running() {
			continue
		}
		info, err := cs.fields(ctx, j, "cluster", "info")
		if err != nil {
			return err
		}
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" {
			return fmt.Errorf("redis-%d: cluster %s, slots ok %s", j+1, info["cluster_state"], info["cluster_slots_ok"])
		}
		shards, err := cs.shards(ctx, j)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(shards, func(sh shard) bool { return sh.master == i }) {
			return fmt.Errorf("redis-%d does not see redis-%d a master", j+1, i+1)
		}
	}
	return nil
}

// failover asks the k-th master's replica for a manual failover (CLUSTER
// FAILOVER: the master stops taking writes, the replica catches up and
// takes its slots), and waits until it is the master and the cluster is
// whole again, the old master its replica.
func (cs *clusterSet) failover(ctx context.Context, k int) error {
	_, sh, err := cs.shardOf(ctx, k)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	asked := time.Now()
	err = cs.admin[sh.replica].Do(fctx, "cluster", "failover").Err()
	cancel()
	if err != nil {
		return fmt.Errorf("redis-%d: CLUSTER FAILOVER: %w", sh.replica+1, err)
	}
	cs.logf("CLUSTER FAILOVER asked of redis-%d, the replica of redis-%d", sh.replica+1, sh.master+1)
	err = waitFor(ctx, fmt.Sprintf("redis-%d promoted in place of redis-%d", sh.replica+1, sh.master+1), func(ctx context.Context) error {
		if err := cs.promoted(ctx, sh.replica); err != nil {
			return err
		}
		return cs.ready(ctx)
	})
	if err == nil {
		cs.logf("redis-%d promoted, and the cluster whole, %v after", sh.replica+1, time.Since(asked).Round(time.Millisecond))
	}
	return err
}

// reshard moves n slots, keys and all, from the k-th master to the to-th
// (redis-cli --cluster reshard), and waits until the cluster is whole;
// the heal it returns moves n slots back the same way.
func (cs *clusterSet) reshard(ctx context.Context, k, to, n int) (heal func(context.Context) error, err error) {
	shards, from, err := cs.shardOf(ctx, k)
	if err != nil {
		return nil, err
	}
	dest := shards[to%len(shards)]
	if dest.masterID == from.masterID {
		return nil, errors.New("a reshard from a master to itself")
	}
	move := func(ctx context.Context, from, to shard) error {
		began := time.Now()
		cs.logf("moving %d slots from redis-%d to redis-%d", n, from.master+1, to.master+1)
		if err := cs.redisCLI(ctx, reshardTimeout, "--cluster", "reshard", cs.fronts[from.master].addr,
			"--cluster-from", from.masterID, "--cluster-to", to.masterID, "--cluster-slots", strconv.Itoa(n), "--cluster-yes"); err != nil {
			// A slot left half moved (migrating on one side, importing
			// on the other) would keep the cluster from ever being whole
			// again: the fault is a failure, and the run goes on.
			if ferr := cs.redisCLI(ctx, reshardTimeout, "--cluster", "fix", cs.fronts[from.master].addr, "--cluster-yes"); ferr != nil {
				err = errors.Join(err, ferr)
			}
			return err
		}
		cs.logf("%d slots moved from redis-%d to redis-%d in %v", n, from.master+1, to.master+1, time.Since(began).Round(time.Millisecond))
		return cs.waitReady(ctx)
	}
	if err := move(ctx, from, dest); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return move(ctx, dest, from) }, nil
}

// restartMaster kills the k-th master (SIGKILL) and starts it again at
// once, from its append-only file, as the other modes' redis_restart
// does: a restart quicker than the node timeout fails nothing over, a
// slower one lets the cluster promote the replica first, and the server
// rejoins as its replica. It waits until the cluster is whole again.
func (cs *clusterSet) restartMaster(ctx context.Context, k int) error {
	_, sh, err := cs.shardOf(ctx, k)
	if err != nil {
		return err
	}
	if err := cs.killServer(sh.master); err != nil {
		return err
	}
	if err := cs.startServer(ctx, sh.master); err != nil {
		return err
	}
	cs.logf("redis-%d, a master, killed and started again", sh.master+1)
	return cs.waitReady(ctx)
}

// killPubSub closes every pub/sub connection (sharded ones too) of every
// server that is up: every node's subscribers blink and subscribe again.
func (cs *clusterSet) killPubSub(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var errs []error
	for i, s := range cs.servers {
		if s.running() {
			if err := cs.admin[i].ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
				errs = append(errs, fmt.Errorf("redis-%d: %w", i+1, err))
			}
		}
	}
	return errors.Join(errs...)
}

// heal starts every server that is down and waits until the cluster is
// whole: the end of the run, when every run must be able to end.
func (cs *clusterSet) heal(ctx context.Context) error {
	for i, s := range cs.servers {
		if !s.running() {
			if err := cs.startServer(ctx, i); err != nil {
				return err
			}
		}
	}
	return cs.waitReady(ctx)
}

// close stops the fronts and the admin clients; the servers are the
// redisSet's to kill.
func (cs *clusterSet) close() {
	for _, f := range cs.fronts {
		f.close()
	}
	for _, c := range cs.admin {
		c.Close()
	}
}
