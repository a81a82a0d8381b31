package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/internal/skipreport"
)

// clusterNodeTimeout is the nodes' cluster-node-timeout: how long a master
// may be unreachable before its replica is promoted in its place.
const clusterNodeTimeout = time.Second

// clusterTimeout bounds how long a cluster may take to form, or to heal
// after a fault (WaitHealthy).
const clusterTimeout = 30 * time.Second

// Cluster is a running Redis Cluster: masters, each with its replicas,
// every node a redis-server of its own (Server). Its methods are called
// from the test's goroutine.
type Cluster struct {
	Nodes []*Server

	cli     string // redis-cli's path
	masters int    // how many masters serve the slots
}

// StartCluster runs a Redis Cluster for t — masters masters, each with
// replicas replicas (3 and 1: three masters and three replicas) — joined
// with `redis-cli --cluster create --cluster-replicas`, and waits until
// every node reports the cluster ok and every slot served. The nodes stop
// when t ends. It skips t (or fails it under CI) when redis-server or
// redis-cli is missing.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		skipreport.Skip(t, "redis-cli not found: install Debian's redis-tools (with redis-server) to run the Redis Cluster tests")
	}
	c := &Cluster{cli: cli, masters: masters}
	for range masters * (1 + replicas) {
		c.Nodes = append(c.Nodes, StartConfig(t, Config{cluster: true, busPort: freePort(t)}))
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}
	c.WaitHealthy(t, masters)
	return c
}

// URL is the cluster's URL as go-redis's cluster client reads it: the
// first node, the others as addr parameters.
func (c *Cluster) URL() string {
	u := "redis://" + c.Nodes[0].Addr()
	for i, n := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr()
	}
	return u
}

// Client returns a cluster client of c, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Masters returns the nodes that are masters now, as the live nodes see
// them (a promoted replica is one).
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var out []*Server
	for _, n := range c.Nodes {
		if n.cmd == nil || n.paused {
			continue
		}
		role, err := nodeInfo(n, "replication")
		if err != nil {
			t.Fatalf("redistest: role of %s: %v", n.Addr(), err)
		}
		if role["role"] == "master" {
			out = append(out, n)
		}
	}
	return out
}

// WaitHealthy waits until every live node reports cluster_state ok, all
// 16,384 slots served, by masters masters that each have a replica in
// sync when the cluster was made with replicas; it fails t after
// clusterTimeout.
func (c *Cluster) WaitHealthy(t testing.TB, masters int) {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	var why string
	for {
		if why = c.unhealthy(masters); why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: the cluster is not healthy after %v: %s", clusterTimeout, why)
		}
		time.Sleep(20 * time.Millisecond) // polls a condition that stays true once reached
	}
}

// unhealthy says what keeps the cluster from being healthy, "" if nothing.
func (c *Cluster) unhealthy(masters int) string {
	live := 0
	for _, n := range c.Nodes {
		if n.cmd == nil || n.paused {
			continue
		}
		live++
		info, err := clusterInfo(n)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" || info["cluster_size"] != strconv.Itoa(masters) {
			return fmt.Sprintf("%s: state %s, slots ok %s, size %s", n.Addr(), info["cluster_state"], info["cluster_slots_ok"], info["cluster_size"])
		}
		repl, err := nodeInfo(n, "replication")
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Sprintf("%s: replica link %s", n.Addr(), repl["master_link_status"])
		}
	}
	if why := c.disagreement(); why != "" {
		return why
	}
	if live > masters {
		// Each master has its replica again once the replicas number the
		// live nodes beyond the masters.
		replicas := 0
		for _, n := range c.Nodes {
			if n.cmd == nil || n.paused {
				continue
			}
			if repl, err := nodeInfo(n, "replication"); err == nil && repl["role"] == "slave" {
				replicas++
			}
		}
		if replicas != live-masters {
			return fmt.Sprintf("%d replicas of %d live nodes and %d masters", replicas, live, masters)
		}
	}
	return ""
}

// clusterInfo reads CLUSTER INFO of n.
func clusterInfo(n *Server) (map[string]string, error) {
	return query(n, "cluster", "info")
}

// nodeInfo reads one section of INFO of n.
func nodeInfo(n *Server, section string) (map[string]string, error) {
	return query(n, "info", section)
}

// query runs a command whose answer is "key:value" lines on n alone.
func query(n *Server, args ...any) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
	defer rc.Close()
	text, err := rc.Do(ctx, args...).Text()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// disagreement says which live nodes see different masters serving the
// slots, "" when they all agree (as redis-cli's check requires before a
// reshard).
func (c *Cluster) disagreement() string {
	var first, firstAddr string
	for _, n := range c.live() {
		nodes, err := clusterNodes(n)
		if err != nil {
			return fmt.Sprintf("%s: %v", n.Addr(), err)
		}
		var view []string
		for _, cn := range nodes {
			if len(cn.slots) > 0 {
				view = append(view, fmt.Sprint(cn.id, cn.slots))
			}
		}
		slices.Sort(view)
		v := strings.Join(view, " ")
		switch {
		case firstAddr == "":
			first, firstAddr = v, n.Addr()
		case v != first:
			return fmt.Sprintf("%s and %s see different masters serving the slots", firstAddr, n.Addr())
		}
	}
	return ""
}

// live returns the nodes running and not paused.
func (c *Cluster) live() []*Server {
	var out []*Server
	for _, n := range c.Nodes {
		if n.cmd != nil && !n.paused {
			out = append(out, n)
		}
	}
	return out
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string // host:port, without the bus port
	flags  string // myself, master, slave, fail…, comma-separated
	master string // the id of its master; "-" for a master
	slots  [][2]int
}

// clusterNodes reads CLUSTER NODES of n. Slots being migrated or
// imported ("[slot->-id]") are left out: the node that serves them is
// listed with them.
func clusterNodes(n *Server) ([]clusterNode, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
	defer rc.Close()
	text, err := rc.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES: %w", err)
	}
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		cn := clusterNode{id: f[0], addr: addr, flags: f[2], master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES: slots %q", r)
			}
			cn.slots = append(cn.slots, [2]int{a, b})
		}
		out = append(out, cn)
	}
	return out, nil
}

// myself is n's own line of CLUSTER NODES.
func myself(n *Server) (clusterNode, error) {
	nodes, err := clusterNodes(n)
	if err != nil {
		return clusterNode{}, err
	}
	for _, cn := range nodes {
		if strings.Contains(cn.flags, "myself") {
			return cn, nil
		}
	}
	return clusterNode{}, fmt.Errorf("CLUSTER NODES of %s lists no myself", n.Addr())
}

// NodeID returns n's id in the cluster (CLUSTER MYID).
func (c *Cluster) NodeID(t testing.TB, n *Server) string {
	t.Helper()
	cn, err := myself(n)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return cn.id
}

// KeySlot returns the hash slot of key (CLUSTER KEYSLOT).
func (c *Cluster) KeySlot(t testing.TB, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.live() {
		rc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		slot, err := rc.ClusterKeySlot(ctx, key).Result()
		rc.Close()
		if err == nil {
			return int(slot)
		}
	}
	t.Fatalf("redistest: CLUSTER KEYSLOT %s: no live node answered", key)
	return 0
}

// Slots returns the slots master serves now, lowest first, as it sees
// them itself.
func (c *Cluster) Slots(t testing.TB, master *Server) []int {
	t.Helper()
	cn, err := myself(master)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var out []int
	for _, r := range cn.slots {
		for s := r[0]; s <= r[1]; s++ {
			out = append(out, s)
		}
	}
	return out
}

// Serving returns the master that serves slot now: the live node that
// is, in its own view, a master with the slot. It waits out a failover
// or a move under way (no node, or two, claiming it), failing t after
// clusterTimeout.
func (c *Cluster) Serving(t testing.TB, slot int) *Server {
	t.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		var claim []*Server
		var why string
		for _, n := range c.live() {
			cn, err := myself(n)
			if err != nil {
				why = err.Error()
				continue
			}
			for _, r := range cn.slots {
				if strings.Contains(cn.flags, "master") && r[0] <= slot && slot <= r[1] {
					claim = append(claim, n)
				}
			}
		}
		if len(claim) == 1 {
			return claim[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %d nodes serve slot %d after %v (%s)", len(claim), slot, clusterTimeout, why)
		}
		time.Sleep(20 * time.Millisecond) // polls a condition that stays true once reached
	}
}

// ReplicasOf returns the live replicas of master (INFO replication of
// each node: its master's port).
func (c *Cluster) ReplicasOf(t testing.TB, master *Server) []*Server {
	t.Helper()
	var out []*Server
	for _, n := range c.live() {
		repl, err := nodeInfo(n, "replication")
		if err != nil {
			t.Fatalf("redistest: role of %s: %v", n.Addr(), err)
		}
		if repl["role"] == "slave" && repl["master_port"] == strconv.Itoa(master.port) {
			out = append(out, n)
		}
	}
	return out
}

// Failover has replica take its master's place with CLUSTER FAILOVER, as
// an operator does before taking the master down: the master stops
// taking writes, the replica catches up with it and is promoted, and the
// master becomes its replica — nothing the master acknowledged is lost.
// It returns once the cluster is healthy again, failing t after
// clusterTimeout.
func (c *Cluster) Failover(t testing.TB, replica *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr(), MaxRetries: -1})
	defer rc.Close()
	if err := rc.ClusterFailover(ctx).Err(); err != nil {
		t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	for {
		repl, err := nodeInfo(replica, "replication")
		if err == nil && repl["role"] == "master" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redistest: %s is no master %v after CLUSTER FAILOVER: %v %v", replica.Addr(), clusterTimeout, repl, err)
		case <-time.After(20 * time.Millisecond): // polls a condition that stays true once reached
		}
	}
	c.WaitHealthy(t, c.masters)
}

// Reshard moves n of from's slots, with their keys, to the master to,
// with `redis-cli --cluster reshard`, as an operator does while clients
// write: redis-cli moves from's lowest-numbered slots (Slots), one at a
// time (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE of its keys,
// CLUSTER SETSLOT NODE). It waits for the nodes to agree on the slots
// first, as redis-cli requires, and returns once the cluster is healthy.
func (c *Cluster) Reshard(t testing.TB, from, to *Server, n int) {
	t.Helper()
	c.WaitHealthy(t, c.masters)
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.cli, "--cluster", "reshard", from.Addr(),
		"--cluster-from", c.NodeID(t, from), "--cluster-to", c.NodeID(t, to),
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes").CombinedOutput()
	if err != nil || strings.Contains(string(out), "[ERR]") {
		t.Fatalf("redistest: redis-cli --cluster reshard: %v: %s", err, out)
	}
	c.WaitHealthy(t, c.masters)
}

// MoveSlot moves one slot, with its keys, from the master serving it to
// the master to, by the steps redis-cli takes for each slot of a
// reshard: the slot importing on to and migrating on its master, its
// keys migrated (MIGRATE) a batch at a time, then the slot given to to
// (CLUSTER SETSLOT NODE) on both and on the other masters. Clients of a
// key already moved are sent on (ASK) meanwhile. It returns once the
// cluster is healthy.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to *Server) {
	t.Helper()
	c.WaitHealthy(t, c.masters)
	from := c.Serving(t, slot)
	if from == to {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	src := redis.NewClient(&redis.Options{Addr: from.Addr(), MaxRetries: -1})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.Addr(), MaxRetries: -1})
	defer dst.Close()
	fromID, toID := c.NodeID(t, from), c.NodeID(t, to)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err(); err != nil {
		t.Fatalf("redistest: slot %d importing on %s: %v", slot, to.Addr(), err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err(); err != nil {
		t.Fatalf("redistest: slot %d migrating on %s: %v", slot, from.Addr(), err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			t.Fatalf("redistest: keys of slot %d: %v", slot, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("redistest: migrate %d keys of slot %d: %v", len(keys), slot, err)
		}
	}
	others := slices.DeleteFunc(c.Masters(t), func(m *Server) bool { return m == to || m == from })
	for _, n := range append([]*Server{to, from}, others...) {
		rc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		err := rc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		rc.Close()
		if err != nil {
			t.Fatalf("redistest: slot %d given to %s on %s: %v", slot, to.Addr(), n.Addr(), err)
		}
	}
	c.WaitHealthy(t, c.masters)
}
