package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/orchestrator"
)

// Cluster is orchestrator.Cluster on Redis: a Store of sessions and this
// server's Node among the others. Make it with NewCluster, hand it to
// orchestrator.Options.Cluster, and Close it after the orchestrator's
// Close (which leaves the cluster).
type Cluster struct {
	store    *Store
	node     *Node
	capacity int
	tails    redis.UniversalClient
	lease    redis.UniversalClient // the node's renewals'
}

var _ orchestrator.Cluster = (*Cluster)(nil)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Capacity is each session's ring capacity (the server's BufferSize).
	Capacity int
	// TTL is how long a session's keys live without a write or a Touch;
	// the orchestrator touches its sessions every SessionTTL/4. Defaults
	// to one hour.
	TTL time.Duration
	// SessionTTL is the orchestrator's Options.SessionTTL: a detached
	// session's keys expire that long after its client left
	// (Options.SessionTTL).
	SessionTTL time.Duration
	// Logger receives the writer's retries and losses.
	Logger *slog.Logger
	// GiveUpAfter is how long a session's writes are retried through
	// transient errors before its ring gives it up (Options.GiveUpAfter).
	// Defaults to 30s.
	GiveUpAfter time.Duration
	// LeaseTTL is how long the node is taken to be alive after its last
	// renewal (Join's leaseTTL). Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Replicas is how many replicas must hold a write before it counts
	// (Options.Replicas, NodeOptions.Replicas): set it with a Sentinel
	// setup, so that a failover never loses what a client received, a
	// run acted on, or a lease renewal. Zero (the default): the master's
	// reply counts.
	Replicas int
	// EveryReplica is Options.EveryReplica (and NodeOptions'): set it on a
	// Redis Cluster with a replica per master.
	EveryReplica bool
	// Failover, when rdb is a failover client (redis.NewFailoverClient),
	// is the options it was made with: the tails' client is then a
	// failover client of its own, which follows the master through a
	// failover as rdb does. Nil (the default) for a single server.
	Failover *redis.FailoverOptions
	// Shards, when rdb is a Redis Cluster's client
	// (redis.NewClusterClient), is the options it was made with: the
	// tails' and the renewals' clients are cluster clients of their own.
	// Nil (the default) otherwise.
	Shards *redis.ClusterOptions
	// RenewHook is a test seam: NodeOptions.RenewHook. Defaults to nil.
	RenewHook func(ctx context.Context) error
}

// NewCluster joins the cluster of Batons using rdb's Redis, as a new node:
// one server, a Sentinel's master (a failover client, with
// ClusterOptions.Failover) or a Redis Cluster (a cluster client, with
// ClusterOptions.Shards). It does not close rdb; on a cluster it has rdb
// reload its slot map whenever a connection fails (followSlots).
func NewCluster(ctx context.Context, rdb redis.UniversalClient, opt ClusterOptions) (*Cluster, error) {
	if opt.TTL <= 0 {
		opt.TTL = time.Hour
	}
	if (clusterOf(rdb) != nil) != (opt.Shards != nil) {
		return nil, errors.New("redisstore: ClusterOptions.Shards is for a cluster client, and a cluster client needs it")
	}
	tails := ownClient(rdb, opt, 1<<14, false)
	id := "node_" + uuid.NewString()
	store, err := New(rdb, Options{Node: id, Logger: opt.Logger, TailClient: tails, TTL: opt.TTL,
		SessionTTL: opt.SessionTTL, GiveUpAfter: opt.GiveUpAfter, Replicas: opt.Replicas, EveryReplica: opt.EveryReplica})
	if err != nil {
		tails.Close()
		return nil, err
	}
	lease := ownClient(rdb, opt, 2, true)
	node, err := Join(ctx, rdb, id, NodeOptions{LeaseTTL: opt.LeaseTTL, Replicas: opt.Replicas, EveryReplica: opt.EveryReplica, LeaseClient: lease,
		RenewHook: opt.RenewHook})
	if err != nil {
		store.Close()
		tails.Close()
		lease.Close()
		return nil, err
	}
	return &Cluster{store: store, node: node, capacity: opt.Capacity, tails: tails, lease: lease}, nil
}

// ownClient returns a client of rdb's Redis with a pool of its own, of
// pool connections (per master on a cluster): the tails' (the clients
// served here of sessions another node owns: one of its connections
// blocks in the Store's one XREAD for all of them, and the others answer
// their checks, apart from the writer's pool) and the lease renewals'
// (which must not queue behind the node's other traffic, and end at
// their context's deadline: deadlines). A failover client's copy would
// dial through rdb's sentinels but keep its pooled connections to a
// demoted master, which only rdb's pool drops on a switch: these get a
// failover client of their own instead.
func ownClient(rdb redis.UniversalClient, opt ClusterOptions, pool int, deadlines bool) redis.UniversalClient {
	if opt.Shards != nil {
		copt := *opt.Shards
		copt.PoolSize = pool
		copt.ContextTimeoutEnabled = copt.ContextTimeoutEnabled || deadlines
		copt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return redis.NewClusterClient(&copt)
	}
	if failover := opt.Failover; failover != nil {
		fopt := *failover
		fopt.PoolSize = pool
		fopt.ContextTimeoutEnabled = fopt.ContextTimeoutEnabled || deadlines
		return redis.NewFailoverClient(&fopt)
	}
	c, ok := rdb.(*redis.Client)
	if !ok {
		return rdb // another kind of client: shared
	}
	topt := *c.Options()
	topt.PoolSize = pool
	topt.ContextTimeoutEnabled = topt.ContextTimeoutEnabled || deadlines
	// Its own notification config: the copied one is rdb's, already bound.
	topt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&topt)
}

// Close flushes the store and closes the tails' and the lease's clients.
func (cl *Cluster) Close() error {
	return errors.Join(cl.store.Close(), cl.tails.Close(), cl.lease.Close())
}

// Node, and the methods below, implement orchestrator.Cluster.
func (cl *Cluster) Node() string { return cl.node.ID() }

func (cl *Cluster) NewRing(id string, hooks orchestrator.RingHooks) buffer.Durable {
	return cl.store.NewRing(id, cl.capacity, callbacks(hooks))
}

func (cl *Cluster) Create(ctx context.Context, id string, rec orchestrator.Record) error {
	return cl.store.CreateSession(ctx, id, SessionMeta{TokenHash: hex.EncodeToString(rec.TokenHash[:]),
		FollowHash: followHex(rec.FollowHash), Subject: rec.Subject, Capacity: cl.capacity, Conn: rec.Conn})
}

// followHex is a follow token hash as the store keeps it: "" for none.
func followHex(h [32]byte) string {
	if h == [32]byte{} {
		return ""
	}
	return hex.EncodeToString(h[:])
}

func callbacks(h orchestrator.RingHooks) Callbacks {
	return Callbacks{OnDurable: h.OnDurable, OnLost: h.OnLost}
}

func (cl *Cluster) Lookup(ctx context.Context, id string) (orchestrator.Record, error) {
	info, err := cl.store.Lookup(ctx, id)
	if err != nil {
		return orchestrator.Record{}, noSession(err)
	}
	return record(info)
}

func record(info Info) (orchestrator.Record, error) {
	rec := orchestrator.Record{Subject: info.Subject, Owner: info.Owner, Conn: info.Conn, ConnRot: info.ConnRot, Detached: info.Detached}
	if n, err := hex.Decode(rec.TokenHash[:], []byte(info.TokenHash)); err != nil || n != len(rec.TokenHash) {
		return rec, fmt.Errorf("the store's token hash is not a SHA-256 in hex")
	}
	if info.FollowHash != "" {
		if n, err := hex.Decode(rec.FollowHash[:], []byte(info.FollowHash)); err != nil || n != len(rec.FollowHash) {
			return rec, fmt.Errorf("the store's follow token hash is not a SHA-256 in hex")
		}
	}
	if info.PrevTokenHash != "" {
		if n, err := hex.Decode(rec.PrevTokenHash[:], []byte(info.PrevTokenHash)); err != nil || n != len(rec.PrevTokenHash) {
			return rec, fmt.Errorf("the store's previous token hash is not a SHA-256 in hex")
		}
	}
	return rec, nil
}

// noSession maps the store's "not there" to the orchestrator's.
func noSession(err error) error {
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: %w", orchestrator.ErrNoSession, err)
	}
	return err
}

func (cl *Cluster) Rotate(ctx context.Context, id string, old, next [32]byte, at time.Time) (uint64, error) {
	n, err := cl.store.RotateToken(ctx, id, hex.EncodeToString(old[:]), hex.EncodeToString(next[:]), at, orchestrator.RotationSkew)
	if errors.Is(err, ErrSuperseded) {
		return 0, fmt.Errorf("%w: %w", orchestrator.ErrSuperseded, err)
	}
	return n, noSession(err)
}

func (cl *Cluster) Commit(ctx context.Context, id string, current [32]byte) (bool, error) {
	return cl.store.CommitToken(ctx, id, hex.EncodeToString(current[:]))
}

func (cl *Cluster) Alive(ctx context.Context, node string) (bool, error) {
	return cl.node.Alive(ctx, node)
}

func (cl *Cluster) Claim(ctx context.Context, id, from string) (bool, error) {
	won, err := cl.store.Claim(ctx, id, from)
	if errors.Is(err, ErrNotFound) {
		// The session is gone: from's run in it is nothing to continue.
		return false, errors.Join(noSession(err), cl.node.Gone(ctx, id, from))
	}
	if err != nil || !won {
		return won, noSession(err)
	}
	return true, cl.node.Adopted(ctx, id, from)
}

func (cl *Cluster) Open(ctx context.Context, id string, hooks orchestrator.RingHooks) (orchestrator.Opened, error) {
	ring, loaded, err := cl.store.OpenRing(ctx, id, callbacks(hooks))
	if err != nil {
		return orchestrator.Opened{}, noSession(err)
	}
	rec, err := record(loaded.Info)
	if err != nil {
		ring.Close()
		return orchestrator.Opened{}, err
	}
	return orchestrator.Opened{Record: rec, Ring: ring, Checkpoint: loaded.Checkpoint,
		CheckpointParts: loaded.CheckpointParts, CheckpointSeq: loaded.CheckpointSeq, BaseSeq: loaded.BaseSeq}, nil
}

func (cl *Cluster) Tail(ctx context.Context, id string, after uint64, fn func([]buffer.Entry) error) error {
	return noSession(cl.store.Tail(ctx, id, after, fn))
}

func (cl *Cluster) Attach(ctx context.Context, id, conn string, rot uint64) (string, bool, error) {
	prev, ok, err := cl.store.Attach(ctx, id, conn, rot)
	return prev, ok, noSession(err)
}

func (cl *Cluster) Detach(ctx context.Context, id, conn string) error {
	return cl.store.Detach(ctx, id, conn)
}

func (cl *Cluster) Present(ctx context.Context, id string) error {
	return cl.store.Present(ctx, id)
}

func (cl *Cluster) Touch(ctx context.Context, ids ...string) error {
	return cl.store.Touch(ctx, ids...)
}
func (cl *Cluster) Delete(ctx context.Context, id string) error { return cl.store.Delete(ctx, id) }

func (cl *Cluster) Running(ctx context.Context, id string, running bool) error {
	return cl.node.Running(ctx, id, running)
}

// Orphans lists the runs of dead nodes, then this node's own: those it
// gave up (Redis stalled past its patience, or its lease lapsed) are
// orphans too, and the orchestrator adopts the ones it does not hold.
func (cl *Cluster) Orphans(ctx context.Context) ([]orchestrator.Orphan, error) {
	os, err := cl.node.Orphans(ctx)
	out := make([]orchestrator.Orphan, len(os))
	for i, o := range os {
		out[i] = orchestrator.Orphan{Session: o.Session, Node: o.Node}
	}
	if err != nil {
		return out, err
	}
	own, err := cl.node.Runs(ctx)
	for _, id := range own {
		out = append(out, orchestrator.Orphan{Session: id, Node: cl.node.ID()})
	}
	return out, err
}

func (cl *Cluster) Send(ctx context.Context, node string, msg []byte) (bool, error) {
	return cl.node.Send(ctx, node, msg)
}

func (cl *Cluster) Receive(ctx context.Context, fn func([]byte)) error {
	return cl.node.Receive(ctx, fn)
}

func (cl *Cluster) Leave(ctx context.Context) error { return cl.node.Leave(ctx) }

// Lapses and LeaseHeld implement orchestrator.LeaseWatcher: Node.Lapses
// and Node.Held.
func (cl *Cluster) Lapses() <-chan struct{} { return cl.node.Lapses() }
func (cl *Cluster) LeaseHeld() bool         { return cl.node.Held() }

var _ orchestrator.LeaseWatcher = (*Cluster)(nil)
