package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Baton server's presence in the cluster: a liveness key it
// renews, a channel other servers send it messages on, and the set of
// sessions with a run of its in flight, which the others take over when
// it dies.
//
// Keys: baton:{nodes}:ID (liveness, with a TTL of LeaseTTL),
// baton:{nodes}:ID:runs (a set of session ids), baton:{nodes} (a set of
// node ids); channel baton:node:{ID}:msgs.
//
// In a Redis Cluster every node key lives in the one slot of the hash
// tag {nodes}, so that a renewal, an adoption and a forgotten node stay
// one atomic step over the keys of several nodes (renewScript, Adopted,
// forgetScript). They are few and cold — a renewal per node every third
// of the lease, a write per run started or ended, a hunt every few
// seconds — next to the sessions' keys, which spread over every slot. A
// node's channel is tagged with its own id instead, and sharded
// (SPUBLISH, SSUBSCRIBE): a message goes to the one shard of its slot,
// where PUBLISH would be broadcast to every node of the cluster.
type Node struct {
	rdb      redis.UniversalClient
	lease    redis.UniversalClient // the renewals' (NodeOptions.LeaseClient)
	id       string
	ttl      time.Duration
	replicas *replicaSet // NodeOptions.Replicas
	// sharded: rdb is a Redis Cluster's, and the node's channel is
	// sharded (SSUBSCRIBE, SPUBLISH).
	sharded bool
	// sub is the node's subscription to its channel, made by Join so that
	// the node is never seen alive without it; on a cluster, made again
	// where the channel's slot went when it moves (guarded by subMu).
	subMu sync.Mutex
	sub   *redis.PubSub

	// held is the time until which the latest renewal holds the lease
	// for sure (guarded by heldMu); renewed wakes watch when it moved
	// (cap 1); lapses tells the node's user that the lease may have
	// lapsed (Lapses).
	heldMu  sync.Mutex
	held    time.Time
	renewed chan struct{}
	lapses  chan struct{}

	// renewHook is NodeOptions.RenewHook.
	renewHook func(context.Context) error

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// DefaultLeaseTTL is how long a server that stops renewing its liveness is
// still taken to be alive. The lease alone tells life: a channel without
// its subscriber may be a reconnect (a blink), and a live node's session
// must never move.
const DefaultLeaseTTL = 3 * time.Second

// NodeOptions configure a Node.
type NodeOptions struct {
	// LeaseTTL is how long the node is taken to be alive after its last
	// renewal. Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Replicas, when > 0, has a renewal count only once every replica
	// holds it, and at least Replicas of them (Redis WAIT; see
	// Options.Replicas): a renewal a failover loses would have the others
	// take this node's runs over while it counts its lease held. Zero
	// (the default): the master's reply counts. Unlike a Store's writes,
	// a renewal does not wait for a replica that left the master's list
	// (Options.ReplicaHold): renewals come every third of the lease, so
	// a hold would have every node's lease lapse whenever a replica
	// restarts.
	Replicas int
	// EveryReplica is Options.EveryReplica for the renewals.
	EveryReplica bool
	// LeaseClient, if set, is the client the renewals go through: a
	// client of the same Redis with a pool of its own (NewCluster's holds
	// two connections), so that a renewal never queues for a connection
	// behind the node's other traffic — a takeover storm fills the shared
	// pool for seconds, longer than the lease lasts. Nil: the renewals
	// share rdb.
	LeaseClient redis.UniversalClient
	// RenewHook is a test seam: when set, it is called before each
	// renewal of the lease after Join's first, and an error it returns
	// fails that renewal as a Redis that does not answer would. A test
	// lapses the node's lease with it, in this node's view and in
	// Redis's, while the node's other traffic flows. Defaults to nil.
	RenewHook func(ctx context.Context) error
}

// Join announces a server in the cluster and keeps it alive until Leave.
func Join(ctx context.Context, rdb redis.UniversalClient, id string, opt NodeOptions) (*Node, error) {
	if opt.LeaseTTL <= 0 {
		opt.LeaseTTL = DefaultLeaseTTL
	}
	lease := opt.LeaseClient
	if lease == nil {
		lease = rdb
	}
	n := &Node{rdb: rdb, lease: lease, id: id, ttl: opt.LeaseTTL, replicas: &replicaSet{min: opt.Replicas, every: opt.EveryReplica, hold: noHold}, stop: make(chan struct{}),
		renewed: make(chan struct{}, 1), lapses: make(chan struct{}, 1), renewHook: opt.RenewHook, sharded: clusterOf(rdb) != nil}
	followSlots(clusterOf(rdb))
	followSlots(clusterOf(lease))
	sub, err := n.subscribe(ctx)
	if err != nil {
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	n.sub = sub
	began, err := n.firstRenew(ctx)
	if err != nil {
		n.sub.Close()
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	n.wg.Add(2)
	go n.heartbeat()           // owned by n: Leave waits for it
	go n.watch(n.holds(began)) // owned by n: Leave waits for it
	return n, nil
}

func aliveKey(node string) string { return nodesKey + ":" + node }
func runsKey(node string) string  { return nodesKey + ":" + node + ":runs" }
func channel(node string) string  { return "baton:node:{" + node + "}:msgs" }

const nodesKey = "baton:{nodes}"

// subscribe subscribes to the node's channel and waits for Redis to
// confirm it.
func (n *Node) subscribe(ctx context.Context) (*redis.PubSub, error) {
	var sub *redis.PubSub
	if n.sharded {
		sub = n.rdb.SSubscribe(ctx, channel(n.id))
	} else {
		sub = n.rdb.Subscribe(ctx, channel(n.id))
	}
	if _, err := sub.Receive(ctx); err != nil {
		sub.Close()
		return nil, fmt.Errorf("subscribe to %s: %w", channel(n.id), err)
	}
	return sub, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.id }

// renewScript sets the node's liveness key ARGV[1] for ARGV[2] ms and
// lists the node ARGV[3], in one atomic step.
//
// KEYS: the liveness key, the node list.
var renewScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
`)

// renew renews the lease; with NodeOptions.Replicas, only once the
// replicas hold the renewal (replicaSet: WAIT on the same connection, in
// one pipeline — on a cluster, the connection of the node keys' master:
// masterPipeline).
func (n *Node) renew(ctx context.Context) error {
	p := n.lease.Pipeline()
	if n.replicas.waits() {
		var err error
		if p, err = masterPipeline(ctx, n.lease, nodesKey); err != nil {
			return fmt.Errorf("renew the lease: %w", err)
		}
	}
	// EVAL, not EVALSHA: a restarted Redis has no script cache, and a
	// pipeline does not fall back.
	renewScript.Eval(ctx, p, []string{aliveKey(n.id), nodesKey},
		time.Now().UTC().Format(time.RFC3339Nano), n.ttl.Milliseconds(), n.id)
	replicas := n.replicas.queue(ctx, p, n.ttl/6)
	cmds, err := p.Exec(ctx)
	if err != nil {
		return fmt.Errorf("renew the lease: %w", err)
	}
	if err := cmds[0].Err(); err != nil {
		return fmt.Errorf("renew the lease: %w", err)
	}
	if err := replicas.check(); err != nil {
		return fmt.Errorf("renew the lease: %w", err)
	}
	return nil
}

// firstRenew takes the lease, and returns when the renewal that took it
// was sent. Too few replicas holding it is retried until ctx is done: a
// node started while its Redis's replica resyncs (after a restart or a
// failover, for a moment) waits for it rather than fail to start.
func (n *Node) firstRenew(ctx context.Context) (time.Time, error) {
	for {
		began := time.Now()
		err := n.renew(ctx)
		if !errors.Is(err, ErrUnreplicated) {
			return began, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return began, err
		case <-t.C:
		}
	}
}

// heartbeat renews the liveness key three times per TTL. A renewal does
// not wait for the one before it, up to two at once: on a node so loaded
// that a renewal takes most of a second (a takeover storm), renewals
// started one after another would leave gaps longer than the lease
// holds, and the node would give every session up for want of a renewal
// that was only slow.
func (n *Node) heartbeat() {
	defer n.wg.Done()
	t := time.NewTicker(n.ttl / 3)
	defer t.Stop()
	var renewals sync.WaitGroup // heartbeat owns them: it returns once they end
	defer renewals.Wait()
	slots := make(chan struct{}, 2)
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			select {
			case slots <- struct{}{}:
			default:
				continue // two under way: this tick is skipped, as a miss
			}
			renewals.Add(1)
			go func() {
				defer renewals.Done()
				defer func() { <-slots }()
				began := time.Now()
				// Past holds(began) its success would come too late to count.
				ctx, cancel := context.WithDeadline(context.Background(), n.holds(began))
				defer cancel()
				if n.renewAgain(ctx) == nil { // a miss: the next tick's renewal may make it
					n.renewedAt(n.holds(began))
				}
			}()
		}
	}
}

// renewAgain is a renewal after the first: renew, unless RenewHook fails it.
func (n *Node) renewAgain(ctx context.Context) error {
	if h := n.renewHook; h != nil {
		if err := h(ctx); err != nil {
			return fmt.Errorf("renew the lease: %w", err)
		}
	}
	return n.renew(ctx)
}

// renewedAt records that the lease is held until held, unless a later
// renewal already holds it longer, and wakes watch.
func (n *Node) renewedAt(held time.Time) {
	n.heldMu.Lock()
	if held.After(n.held) {
		n.held = held
	}
	n.heldMu.Unlock()
	select {
	case n.renewed <- struct{}{}:
	default: // watch has one to read already: it reads held then
	}
}

// holds returns until when a renewal sent at began holds the lease for
// sure, as this node's user must count it: Redis sets the key's TTL when
// the renewal arrives, after began, and the others find the lease lapsed
// no sooner than that plus the TTL. A fifth of the TTL is kept in hand
// for what stopping takes (a run's cancel reaching its tool calls); more
// would have a short stall of Redis (a fork, an fsync) give every session
// up while no other node could take one.
func (n *Node) holds(began time.Time) time.Time { return began.Add(n.ttl - n.ttl/5) }

// watch tells Lapses when the lease may have lapsed: no renewal has
// succeeded in time, as when Redis stalls or is cut off from this node.
// By then the other nodes may take this node's runs over, so its user
// must stop them. Once a renewal succeeds again the lease is held anew,
// and a later lapse is told again.
func (n *Node) watch(held time.Time) {
	defer n.wg.Done()
	n.renewedAt(held)
	lapse := time.NewTimer(time.Until(held))
	defer lapse.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.renewed:
			n.heldMu.Lock()
			held = n.held
			n.heldMu.Unlock()
			lapse.Reset(time.Until(held))
		case <-lapse.C:
			select {
			case n.lapses <- struct{}{}:
			default: // one not taken yet says it already
			}
		}
	}
}

// Lapses receives a value each time this node's lease may have lapsed
// (see watch). A node whose lease lapsed is dead to the others: they take
// its runs over, and its own writes are refused once they have (fencing),
// but what its runs do outside Redis — tool calls — only it can stop.
func (n *Node) Lapses() <-chan struct{} { return n.lapses }

// Held reports whether this node holds its lease for sure now: the hold
// of its latest successful renewal (holds) has not run out. It turns
// false when a lapse is due to be told (Lapses), and true again once a
// renewal succeeds — which does not undo what the lapse allowed: the
// others may have taken this node's runs over meanwhile.
func (n *Node) Held() bool {
	n.heldMu.Lock()
	defer n.heldMu.Unlock()
	return time.Now().Before(n.held)
}

// Alive reports whether node is alive: its lease (liveness key) is there.
// Its channel's subscriber is no sign either way: go-redis resubscribes
// after a reconnect, and a session taken from a live owner would have its
// run cancelled there and its running tasks run twice.
func (n *Node) Alive(ctx context.Context, node string) (bool, error) {
	exists, err := n.rdb.Exists(ctx, aliveKey(node)).Result()
	if err != nil {
		return false, fmt.Errorf("is %s alive: %w", node, err)
	}
	return exists == 1, nil
}

// Send publishes msg on node's channel, reporting whether a subscriber
// took it.
func (n *Node) Send(ctx context.Context, node string, msg []byte) (bool, error) {
	publish := n.rdb.Publish
	if n.sharded {
		publish = n.rdb.SPublish
	}
	got, err := publish(ctx, channel(node), msg).Result()
	if err != nil {
		return false, fmt.Errorf("send to %s: %w", node, err)
	}
	return got > 0, nil
}

// Receive calls fn with each message sent to this node, in order, until
// ctx is done or the node leaves. go-redis resubscribes by itself after a
// network error; on a cluster, when the channel's slot moves to another
// master (resharded, failed over), that master ends the subscription and
// Receive subscribes again where the slot is now. A message sent between
// the two finds no subscriber, and its sender is told so (Send). One
// Receive at a time.
func (n *Node) Receive(ctx context.Context, fn func([]byte)) error {
	for {
		n.subMu.Lock()
		sub := n.sub
		n.subMu.Unlock()
		if sub == nil {
			return nil // left
		}
		moved, err := n.receive(ctx, sub, fn)
		if err != nil || !moved {
			return err
		}
		if !n.resubscribe(ctx, sub) {
			return nil
		}
	}
}

// receive calls fn with the messages of sub until ctx is done or the node
// leaves (moved false), or Redis ends the subscription (moved true).
func (n *Node) receive(ctx context.Context, sub *redis.PubSub, fn func([]byte)) (moved bool, err error) {
	ch := sub.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case <-n.stop:
			return false, nil
		case m, ok := <-ch:
			if !ok {
				select {
				case <-n.stop:
					return false, nil // closed by Leave
				default:
				}
				return false, errors.New("subscription closed")
			}
			switch m := m.(type) {
			case *redis.Message:
				fn([]byte(m.Payload))
			case *redis.Subscription:
				if m.Kind == "sunsubscribe" && m.Channel == channel(n.id) {
					return true, nil
				}
			}
		}
	}
}

// resubscribe replaces old, a sharded subscription its master ended, with
// one where the channel's slot is now, trying until it is made, ctx is
// done or the node leaves (false).
func (n *Node) resubscribe(ctx context.Context, old *redis.PubSub) bool {
	retry := tailRetryMin
	for {
		if cc := clusterOf(n.rdb); cc != nil {
			cc.ReloadState(ctx)
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		sub, err := n.subscribe(sctx)
		cancel()
		if err == nil {
			n.subMu.Lock()
			defer n.subMu.Unlock()
			if n.sub != old { // left meanwhile
				sub.Close()
				return false
			}
			old.Close()
			n.sub = sub
			return true
		}
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		case <-n.stop:
			t.Stop()
			return false
		}
		retry = min(2*retry, tailRetryMax)
	}
}

// Running records whether a run of this node's is in flight in a session.
func (n *Node) Running(ctx context.Context, session string, running bool) error {
	var err error
	if running {
		err = n.rdb.SAdd(ctx, runsKey(n.id), session).Err()
	} else {
		err = n.rdb.SRem(ctx, runsKey(n.id), session).Err()
	}
	if err != nil {
		return fmt.Errorf("record the run of %s: %w", session, err)
	}
	return nil
}

// Runs returns the sessions this node has recorded a run in flight in.
func (n *Node) Runs(ctx context.Context) ([]string, error) {
	sessions, err := n.rdb.SMembers(ctx, runsKey(n.id)).Result()
	if err != nil {
		return nil, fmt.Errorf("list this node's runs: %w", err)
	}
	return sessions, nil
}

// Orphan is a session with a run in flight whose node is dead.
type Orphan struct{ Session, Node string }

// Orphans returns the sessions with a run in flight on nodes that are
// dead. A dead node with none left is forgotten.
func (n *Node) Orphans(ctx context.Context) ([]Orphan, error) {
	nodes, err := n.rdb.SMembers(ctx, nodesKey).Result()
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []Orphan
	for _, node := range nodes {
		if node == n.id {
			continue
		}
		// Only a lapsed lease makes a node's runs orphans: a subscription
		// that blinked (a reconnect) must not.
		exists, err := n.rdb.Exists(ctx, aliveKey(node)).Result()
		if err != nil {
			return out, fmt.Errorf("is %s alive: %w", node, err)
		}
		if exists == 1 {
			continue
		}
		sessions, err := n.rdb.SMembers(ctx, runsKey(node)).Result()
		if err != nil {
			return out, fmt.Errorf("list the runs of %s: %w", node, err)
		}
		if len(sessions) == 0 {
			if err := n.forget(ctx, node, ""); err != nil {
				return out, err
			}
			continue
		}
		for _, s := range sessions {
			out = append(out, Orphan{Session: s, Node: node})
		}
	}
	return out, nil
}

// Adopted moves a session's run from a dead node's set to this one's.
func (n *Node) Adopted(ctx context.Context, session, from string) error {
	_, err := n.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SRem(ctx, runsKey(from), session)
		p.SAdd(ctx, runsKey(n.id), session)
		return nil
	})
	if err != nil {
		return fmt.Errorf("adopt the run of %s: %w", session, err)
	}
	return nil
}

// forgetScript removes ARGV[2] (unless "") from node ARGV[1]'s runs set,
// then the node from the node list if it is dead (no lease) and has no
// run left, in one atomic step: a node that comes back to life renews
// its lease, and one of its runs is never dropped with it.
//
// KEYS: the node's runs set, its liveness key, the node list.
var forgetScript = redis.NewScript(`
if ARGV[2] ~= '' then
  redis.call('SREM', KEYS[1], ARGV[2])
end
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('SCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], ARGV[1])
end
return 0
`)

// Gone forgets a run of a dead node's whose session is gone from the store
// (its keys expired or were deleted): nothing is left to continue, and
// every node would otherwise try to claim it again at every hunt. A dead
// node with no run left leaves the node list.
func (n *Node) Gone(ctx context.Context, session, from string) error {
	return n.forget(ctx, from, session)
}

func (n *Node) forget(ctx context.Context, node, session string) error {
	keys := []string{runsKey(node), aliveKey(node), nodesKey}
	if err := forgetScript.Run(ctx, n.rdb, keys, node, session).Err(); err != nil {
		return fmt.Errorf("forget the run of %s on %s: %w", session, node, err)
	}
	return nil
}

// Leave stops renewing and deletes the liveness key, so that the others
// take this node's runs over at once.
func (n *Node) Leave(ctx context.Context) error {
	n.once.Do(func() { close(n.stop) })
	n.wg.Wait()
	n.subMu.Lock()
	if n.sub != nil {
		n.sub.Close() // ends Receive
		n.sub = nil
	}
	n.subMu.Unlock()
	if err := n.rdb.Del(ctx, aliveKey(n.id)).Err(); err != nil {
		return fmt.Errorf("leave the cluster: %w", err)
	}
	return nil
}
