package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// injector makes the faults of a schedule and heals them.
type injector struct {
	redis *redisSet
	nodes []*node
	log   io.Writer // a line per fault; io.Discard when quiet
	// pending heals the fault under way, when making it said how (a
	// cluster's master killed, slots moved). Only run, and healAll after
	// it, touch it.
	pending func(context.Context) error

	mu     sync.Mutex // guards the fields below
	counts map[kind]int
	errs   []string // faults that could not be made or healed
}

func newInjector(r *redisSet, nodes []*node, log io.Writer) *injector {
	return &injector{redis: r, nodes: nodes, log: log, counts: map[kind]int{}}
}

// run makes the faults of sched, each at its time from start, until the
// schedule is over or stop is closed; a fault under way then is healed
// at once. ctx bounds the restarts.
func (in *injector) run(ctx context.Context, sched []fault, start time.Time, stop <-chan struct{}) {
	for _, f := range sched {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(f.At))):
		}
		fmt.Fprintf(in.log, "chaos: %s\n", f)
		in.make(ctx, f)
		if f.For > 0 {
			select {
			case <-stop:
			case <-time.After(f.For):
			}
		}
		in.heal(ctx, f)
	}
}

// make makes fault f, and counts it.
func (in *injector) make(ctx context.Context, f fault) {
	in.mu.Lock()
	in.counts[f.Kind]++
	in.mu.Unlock()
	var n *node
	if f.Node >= 0 {
		n = in.nodes[f.Node]
	}
	var err error
	cluster := in.redis.cluster
	if cluster == nil && slices.Contains(clusterOnly, f.Kind) {
		in.fail("%s: needs --cluster", f)
		return
	}
	switch f.Kind {
	case faultLatency:
		n.proxy.SetLatency(f.Latency)
	case faultStall:
		n.proxy.Stall()
	case faultReset:
		n.proxy.Reset()
	case faultPartition:
		n.proxy.Partition()
	case faultPubSubKill:
		err = in.killPubSub(ctx)
	case faultRedisRestart:
		if cluster != nil {
			err = cluster.restartMaster(ctx, f.Master)
			break
		}
		// The master, under Sentinel: a restart quicker than the
		// sentinels' down-after time fails nothing over.
		var m *redisServer
		if m, err = in.redis.master(ctx); err == nil {
			err = m.restart(ctx)
		}
	case faultFailover:
		err = in.redis.failover(ctx)
	case faultMasterKill:
		in.pending, err = cluster.killMaster(ctx, f.Master)
	case faultClusterFailover:
		err = cluster.failover(ctx, f.Master)
	case faultReshard:
		in.pending, err = cluster.reshard(ctx, f.Master, f.To, f.Slots)
	case faultNodeKill:
		err = n.kill()
	default:
		err = fmt.Errorf("unknown fault")
	}
	if err != nil {
		in.fail("%s: %v", f, err)
	}
}

// heal undoes fault f: a node killed is started again, a cluster's
// master killed too, slots moved are moved back.
func (in *injector) heal(ctx context.Context, f fault) {
	if in.pending != nil {
		err := in.pending(ctx)
		in.pending = nil
		if err != nil {
			in.fail("heal %s: %v", f, err)
		}
	}
	if f.Node < 0 {
		return
	}
	n := in.nodes[f.Node]
	switch f.Kind {
	case faultLatency:
		n.proxy.SetLatency(0)
	case faultStall:
		n.proxy.Unstall()
	case faultPartition:
		n.proxy.Heal()
	case faultNodeKill:
		if err := n.start(ctx); err != nil {
			in.fail("heal %s: %v", f, err)
		}
	}
}

// healAll undoes every fault there may be, whatever the schedule did: the
// end of the run, when every run must be able to end.
func (in *injector) healAll(ctx context.Context) {
	if in.pending != nil {
		if err := in.pending(ctx); err != nil {
			in.fail("heal: %v", err)
		}
		in.pending = nil
	}
	if c := in.redis.cluster; c != nil {
		if err := c.heal(ctx); err != nil {
			in.fail("heal the Redis Cluster: %v", err)
		}
		for _, d := range c.defects {
			in.fail("%s", d)
		}
		if err := c.routes.failed(); err != nil {
			in.fail("the fronts could not tell every node's connections: %v", err)
		}
	}
	for _, r := range in.redis.all() {
		if !r.running() {
			if err := r.start(ctx); err != nil {
				in.fail("heal redis-server %s: %v", r.addr(), err)
			}
		}
	}
	for _, n := range in.nodes {
		n.proxy.SetLatency(0)
		n.proxy.Unstall()
		n.proxy.Heal()
		if !n.running() {
			if err := n.start(ctx); err != nil {
				in.fail("heal node %s: %v", n.name, err)
			}
		}
	}
}

// killPubSub closes every pub/sub connection of Redis (the master):
// every node's subscriber blinks and reconnects.
func (in *injector) killPubSub(ctx context.Context) error {
	if c := in.redis.cluster; c != nil {
		return c.killPubSub(ctx)
	}
	m, err := in.redis.master(ctx)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err()
}

func (in *injector) fail(format string, args ...any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.errs = append(in.errs, fmt.Sprintf(format, args...))
}

// result returns the faults made by kind, and those that failed.
func (in *injector) result() (map[kind]int, []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	counts := make(map[kind]int, len(in.counts))
	for k, v := range in.counts {
		counts[k] = v
	}
	return counts, append([]string(nil), in.errs...)
}
