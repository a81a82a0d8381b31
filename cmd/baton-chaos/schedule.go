package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// kind is a kind of fault the chaos run injects.
type kind string

const (
	// faultLatency delays every byte between one node and Redis.
	faultLatency kind = "latency"
	// faultStall holds every byte between one node and Redis, its
	// connections open, as a stalled network or server does.
	faultStall kind = "stall"
	// faultReset resets every Redis connection of one node (TCP RST).
	faultReset kind = "reset"
	// faultPartition cuts one node from Redis while the others keep it.
	faultPartition kind = "partition"
	// faultPubSubKill closes every pub/sub connection of Redis (CLIENT
	// KILL TYPE pubsub): every node's subscriber blinks.
	faultPubSubKill kind = "pubsub_kill"
	// faultRedisRestart kills redis-server (SIGKILL) and starts it again
	// on the same port and directory: what it had persisted (AOF) is
	// all it has.
	faultRedisRestart kind = "redis_restart"
	// faultNodeKill kills one Baton node (SIGKILL) and starts it again.
	faultNodeKill kind = "node_kill"
	// faultFailover is a Sentinel failover: scheduled only with --sentinel.
	faultFailover kind = "sentinel_failover"

	// The faults of a Redis Cluster, scheduled only with --cluster
	// (rediscluster.go). With --cluster, faultRedisRestart restarts one
	// master, at once (the cluster may or may not fail it over first),
	// and faultPubSubKill kills the pub/sub connections of every server.

	// faultMasterKill kills one master (SIGKILL); the cluster promotes its
	// replica, and the killed server, started again once it has, rejoins
	// as the new master's replica.
	faultMasterKill kind = "master_kill"
	// faultClusterFailover is a manual failover (CLUSTER FAILOVER) asked
	// of one master's replica.
	faultClusterFailover kind = "cluster_failover"
	// faultReshard moves slots from one master to another (redis-cli
	// --cluster reshard), keys and all, and when healed moves as many
	// back.
	faultReshard kind = "reshard"
)

// kinds are the faults a run injects unless --faults says otherwise:
// every one but the Sentinel failover, which --sentinel adds.
var kinds = []kind{faultLatency, faultStall, faultReset, faultPartition, faultPubSubKill, faultRedisRestart, faultNodeKill}

// sentinelKinds are the faults a run with --sentinel injects unless
// --faults says otherwise: the nodes reach the master directly, so the
// faults of their proxies would do nothing.
var sentinelKinds = []kind{faultPubSubKill, faultRedisRestart, faultNodeKill, faultFailover}

// clusterKinds are the faults a run with --cluster injects unless
// --faults says otherwise: the proxy faults (each node reaches every
// server of the cluster through proxies of its own, front.go), those of
// Redis and the nodes, and the cluster's own.
var clusterKinds = append(slices.Clone(kinds), clusterOnly...)

// clusterOnly are the faults only a Redis Cluster has.
var clusterOnly = []kind{faultMasterKill, faultClusterFailover, faultReshard}

// allKinds are every kind there is, in the order the report lists them.
var allKinds = append(append(slices.Clone(kinds), faultFailover), clusterOnly...)

// redisMode is what the run's Redis is.
type redisMode int

const (
	modeSingle   redisMode = iota // one redis-server
	modeSentinel                  // --sentinel: a Sentinel setup
	modeCluster                   // --cluster: a Redis Cluster
)

func (m redisMode) String() string {
	switch m {
	case modeSentinel:
		return "sentinel"
	case modeCluster:
		return "cluster"
	}
	return "single"
}

// kinds are the faults a run of mode m can make, and makes unless
// --faults says otherwise.
func (m redisMode) kinds() []kind {
	switch m {
	case modeSentinel:
		return sentinelKinds
	case modeCluster:
		return clusterKinds
	}
	return kinds
}

// hitsRedis reports whether a fault of kind k is aimed at Redis, not at
// a node.
func (k kind) hitsRedis() bool {
	switch k {
	case faultPubSubKill, faultRedisRestart, faultFailover, faultMasterKill, faultClusterFailover, faultReshard:
		return true
	}
	return false
}

// hitsMaster reports whether a fault of kind k is aimed at one master of
// a Redis Cluster (fault.Master).
func (k kind) hitsMaster() bool {
	switch k {
	case faultRedisRestart, faultMasterKill, faultClusterFailover, faultReshard:
		return true
	}
	return false
}

// parseKinds reads --faults, a comma-separated list of kinds, of those a
// run of mode m can make.
func parseKinds(s string, m redisMode) ([]kind, error) {
	valid := m.kinds()
	var out []kind
	for _, name := range strings.Split(s, ",") {
		k := kind(strings.TrimSpace(name))
		if k == "" {
			continue
		}
		if !slices.Contains(valid, k) {
			return nil, fmt.Errorf("--faults: fault %q is not one of %v", k, valid)
		}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out, nil
}

// fault is one fault of the schedule.
type fault struct {
	At   time.Duration `json:"at"`   // from the run's start
	Kind kind          `json:"kind"` // what
	// Node is the node it hits (0-based); -1 for a fault of Redis itself.
	Node int `json:"node"`
	// For is how long it lasts before it is healed (a node killed is
	// started again then); 0 for one that is over once made.
	For time.Duration `json:"for"`
	// Latency is the delay a latency fault adds.
	Latency time.Duration `json:"latency,omitempty"`
	// Master is, with --cluster, the master a fault of one master hits (a
	// restart, a kill, a failover, the source of a reshard): the Master-th
	// of the masters there are then, in the order of their servers; -1
	// for any other fault.
	Master int `json:"master"`
	// To is the master a reshard moves slots to (as Master), Slots how
	// many it moves.
	To    int `json:"to,omitempty"`
	Slots int `json:"slots,omitempty"`
}

func (f fault) String() string {
	s := fmt.Sprintf("%7.2fs %s", f.At.Seconds(), f.Kind)
	if f.Node >= 0 {
		s += fmt.Sprintf(" node %c", nodeName(f.Node))
	}
	if f.Latency > 0 {
		s += " +" + f.Latency.String()
	}
	switch {
	case f.Kind == faultReshard:
		s += fmt.Sprintf(" %d slots, master %d to %d", f.Slots, f.Master, f.To)
	case f.Kind.hitsMaster() && f.Master >= 0:
		s += fmt.Sprintf(" master %d", f.Master)
	}
	if f.For > 0 {
		s += " for " + f.For.Round(time.Millisecond).String()
	}
	return s
}

// nodeName is the letter node i goes by: a, b, c.
func nodeName(i int) byte { return byte('a' + i) }

// lasting is how long each kind of fault lasts, between the two bounds.
// A stall or a partition past the lease (3 s by default) lets another
// node take the sessions over; shorter ones must be ridden out.
var lasting = map[kind][2]time.Duration{
	faultLatency:   {time.Second, 5 * time.Second},
	faultStall:     {200 * time.Millisecond, 4 * time.Second},
	faultPartition: {500 * time.Millisecond, 6 * time.Second},
	faultNodeKill:  {200 * time.Millisecond, 3 * time.Second},
	faultFailover:  {0, 0},
	// How long a killed master stays down once its replica is promoted.
	faultMasterKill:      {time.Second, 5 * time.Second},
	faultClusterFailover: {0, 0},
	// How long the slots stay where a reshard moved them.
	faultReshard: {time.Second, 5 * time.Second},
}

// reshardSlots bounds how many slots a reshard moves (of 16,384).
var reshardSlots = [2]int{100, 400}

// schedule draws, from seed, the faults of a run of duration: one at a
// time (each healed before the next begins), the gaps between them
// exponential with mean every, each of a kind drawn from ks and aimed at
// one of nodes nodes (or at Redis: with masters masters, a Redis Cluster,
// at one of them). The same arguments give the same schedule, which is
// what makes a failing seed a reproducible one; masters 0 (one server, or
// Sentinel) draws nothing more than before --cluster.
func schedule(seed uint64, duration, every time.Duration, nodes, masters int, ks []kind) []fault {
	if len(ks) == 0 || every <= 0 || nodes < 1 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x6368616f73)) // "chaos"
	between := func(b [2]time.Duration) time.Duration {
		if b[1] <= b[0] {
			return b[0]
		}
		return b[0] + time.Duration(rng.Int64N(int64(b[1]-b[0])))
	}
	var out []fault
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() * float64(every))
		if at >= duration {
			return out
		}
		f := fault{At: at, Kind: ks[rng.IntN(len(ks))], Node: rng.IntN(nodes), Master: -1}
		if f.Kind.hitsRedis() {
			f.Node = -1
		}
		if masters > 0 && f.Kind.hitsMaster() {
			f.Master = rng.IntN(masters)
			if f.Kind == faultReshard && masters > 1 {
				f.To = (f.Master + 1 + rng.IntN(masters-1)) % masters
				f.Slots = reshardSlots[0] + rng.IntN(reshardSlots[1]-reshardSlots[0]+1)
			}
		}
		f.For = between(lasting[f.Kind])
		if f.Kind == faultLatency {
			f.Latency = time.Duration(5+rng.IntN(96)) * time.Millisecond
		}
		f.For = min(f.For, duration-at) // healed by the end, whatever
		out = append(out, f)
		at += f.For
	}
}
