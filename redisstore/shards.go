package redisstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Store, a Node and a Cluster work on a Redis Cluster when their client
// is a *redis.ClusterClient. Every key of a session carries its id as a
// hash tag (keysOf), so a session lives in one slot and its scripts stay
// atomic; the node keys share the tag {nodes} (node.go). What one server
// allowed and a cluster does not is done per shard:
//
//   - Tails: one reader per master (shardtails.go) — an XREAD may not
//     span slots.
//   - The writer: go-redis's cluster pipeline splits a round trip into
//     one pipeline per master, sent in parallel, and follows MOVED and
//     ASK. With Options.Replicas each master's writes go on one of its
//     connections and end with that master's own INFO and WAIT
//     (writeShards): WAIT counts only its connection's writes. A node's
//     lease renewals with NodeOptions.Replicas likewise go on a connection
//     of the node keys' master (masterPipeline).
//   - Node messages go over sharded pub/sub (SPUBLISH, SSUBSCRIBE).
//
// go-redis learns where slots moved from MOVED and ASK replies, but not
// from a master that died: it goes on dialling the dead address until
// something reloads its slot map (seen: over 55 s after a kill -9, long
// after the cluster had promoted the replica). followSlots reloads it on
// every failed connection.

// clusterOf is c as a cluster client, or nil.
func clusterOf(c redis.UniversalClient) *redis.ClusterClient {
	cc, _ := c.(*redis.ClusterClient)
	return cc
}

// followSlots has cc reload its slot map whenever a command fails for a
// reason a moved slot may explain: a connection refused, reset or timed
// out, CLUSTERDOWN, or a redirection go-redis did not follow itself (the
// replica-aware writes of writeShards). A reload is lazy and go-redis
// runs at most one at a time, so a storm of errors costs one CLUSTER
// SLOTS per few hundred milliseconds. Calling it twice adds nothing.
func followSlots(cc *redis.ClusterClient) {
	if cc == nil {
		return
	}
	followed.Lock()
	defer followed.Unlock()
	if followed.clients == nil {
		followed.clients = make(map[*redis.ClusterClient]bool)
	}
	if followed.clients[cc] {
		return
	}
	followed.clients[cc] = true
	cc.AddHook(slotHook{cc})
}

// followed is the cluster clients followSlots has hooked.
var followed struct {
	sync.Mutex
	clients map[*redis.ClusterClient]bool
}

type slotHook struct{ cc *redis.ClusterClient }

func (h slotHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			h.cc.ReloadState(context.Background())
		}
		return c, err
	}
}

func (h slotHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if slotsMoved(err) {
			h.cc.ReloadState(context.Background())
		}
		return err
	}
}

func (h slotHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if slotsMoved(c.Err()) {
				h.cc.ReloadState(context.Background())
				break
			}
		}
		return err
	}
}

// slotsMoved reports whether err may mean that the slot map is stale.
func slotsMoved(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) {
		return false
	}
	if redirected(err) {
		return true
	}
	var rerr redis.Error
	return !errors.As(err, &rerr) // a network error, a timeout
}

// redirected reports whether err is a cluster's answer that the key is
// elsewhere, or between two nodes for now.
func redirected(err error) bool {
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// masterPipeline returns a pipeline of c whose commands all go on one
// connection of key's master, for a WAIT that must count their writes:
// c's own pipeline on one server or a failover client's master, and on a
// cluster one of the master's, which a cluster pipeline is not — it
// sends a command without a key (INFO, WAIT) to any master. A redirection
// it meets is not followed: cc reloads its slot map (followSlots does not
// see a master's own client), and the caller tries again.
func masterPipeline(ctx context.Context, c redis.UniversalClient, key string) (redis.Pipeliner, error) {
	cc := clusterOf(c)
	if cc == nil {
		return c.Pipeline(), nil
	}
	master, err := cc.MasterForKey(ctx, key)
	if err != nil {
		cc.ReloadState(context.Background())
		return nil, err
	}
	return &followingPipeline{Pipeliner: master.Pipeline(), cc: cc}, nil
}

// followingPipeline is a master's pipeline that has cc reload its slot
// map when a command in it was redirected or its connection failed.
type followingPipeline struct {
	redis.Pipeliner
	cc *redis.ClusterClient
}

func (p *followingPipeline) Exec(ctx context.Context) ([]redis.Cmder, error) {
	cmds, err := p.Pipeliner.Exec(ctx)
	for _, c := range cmds {
		if slotsMoved(c.Err()) {
			p.cc.ReloadState(context.Background())
			break
		}
	}
	return cmds, err
}

// shardReplicas is a replicaSet per master, for a cluster's WAITs.
type shardReplicas struct {
	min   int
	every bool
	hold  time.Duration

	mu   sync.Mutex
	sets map[string]*replicaSet // by master address
}

func (sr *shardReplicas) of(addr string) *replicaSet {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	if sr.sets == nil {
		sr.sets = make(map[string]*replicaSet)
	}
	rs := sr.sets[addr]
	if rs == nil {
		rs = &replicaSet{min: sr.min, every: sr.every, hold: sr.hold}
		sr.sets[addr] = rs
	}
	return rs
}

// writeShards sends jobs' append scripts to their masters with
// Options.Replicas on a cluster: one pipeline per master, in parallel,
// on one of its connections, ending with its INFO and WAIT. cmds[i] is
// job i's script; unreplicated[i] says why its master's replicas do not
// count it yet (nil: they do). A job whose slot is not where the map
// said gets its master's MOVED or ASK: it is sent again by the writer's
// next round, once the map is reloaded (followSlots), and meanwhile held
// as a failure that does not count.
func (s *Store) writeShards(ctx context.Context, cc *redis.ClusterClient, jobs []job) (cmds []*redis.Cmd, unreplicated []error) {
	cmds = make([]*redis.Cmd, len(jobs))
	unreplicated = make([]error, len(jobs))
	byMaster := make(map[*redis.Client][]int)
	for i, j := range jobs {
		node, err := cc.MasterForKey(ctx, j.r.keys[0])
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		byMaster[node] = append(byMaster[node], i)
	}
	var wg sync.WaitGroup
	for node, idx := range byMaster {
		wg.Add(1)
		go func() { // owned by writeShards: it waits for wg
			defer wg.Done()
			pipe := node.Pipeline()
			for _, i := range idx {
				cmds[i] = appendScript.EvalSha(ctx, pipe, jobs[i].scriptKeys(), jobs[i].args()...)
			}
			round := s.shardReplicas.of(node.Options().Addr).queue(ctx, pipe, replicaWait)
			_, _ = pipe.Exec(ctx)
			err := round.check()
			for _, i := range idx {
				unreplicated[i] = err
			}
		}()
	}
	wg.Wait()
	for _, c := range cmds {
		if slotsMoved(c.Err()) {
			cc.ReloadState(context.Background())
			break
		}
	}
	return cmds, unreplicated
}
