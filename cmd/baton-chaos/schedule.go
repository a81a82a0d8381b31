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
)

// kinds are the faults a run injects unless --faults says otherwise:
// every one but the Sentinel failover, which --sentinel adds.
var kinds = []kind{faultLatency, faultStall, faultReset, faultPartition, faultPubSubKill, faultRedisRestart, faultNodeKill}

// sentinelKinds are the faults a run with --sentinel injects unless
// --faults says otherwise: the nodes reach the master directly, so the
// faults of their proxies would do nothing.
var sentinelKinds = []kind{faultPubSubKill, faultRedisRestart, faultNodeKill, faultFailover}

// parseKinds reads --faults, a comma-separated list of kinds, of those a
// run with or without --sentinel can make.
func parseKinds(s string, sentinel bool) ([]kind, error) {
	valid := kinds
	if sentinel {
		valid = sentinelKinds
	}
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
}

func (f fault) String() string {
	s := fmt.Sprintf("%7.2fs %s", f.At.Seconds(), f.Kind)
	if f.Node >= 0 {
		s += fmt.Sprintf(" node %c", nodeName(f.Node))
	}
	if f.Latency > 0 {
		s += " +" + f.Latency.String()
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
}

// schedule draws, from seed, the faults of a run of duration: one at a
// time (each healed before the next begins), the gaps between them
// exponential with mean every, each of a kind drawn from ks and aimed at
// one of nodes nodes (or at Redis). The same arguments give the same
// schedule, which is what makes a failing seed a reproducible one.
func schedule(seed uint64, duration, every time.Duration, nodes int, ks []kind) []fault {
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
		f := fault{At: at, Kind: ks[rng.IntN(len(ks))], Node: rng.IntN(nodes)}
		switch f.Kind {
		case faultPubSubKill, faultRedisRestart, faultFailover:
			f.Node = -1
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
