package redistest

import (
	"context"
	"fmt"
	"os/exec"
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
	c := &Cluster{}
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
