package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
)

// cluster is the orchestrator's Cluster on Redis: the session store and
// this node's presence among the others.
type cluster struct {
	store    *redisstore.Store
	node     *redisstore.Node
	capacity int
	rdb      *redis.Client
	tails    *redis.Client
}

var _ orchestrator.Cluster = (*cluster)(nil)

// joinCluster connects to Redis and joins the cluster of Batons using it.
func joinCluster(ctx context.Context, c config, log *slog.Logger) (*cluster, error) {
	opt, err := redis.ParseURL(c.redisURL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (want redis://[:password@]host:port/db)", c.src("redis-url"), err)
	}
	rdb := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("reach Redis at %s: %w", opt.Addr, err)
	}
	// Each running tail (a client served here of a session another node
	// owns) holds a connection in a blocking read: they get their own pool.
	topt := *opt
	topt.PoolSize = 1 << 14
	tails := redis.NewClient(&topt)
	id := "node_" + uuid.NewString()
	store, err := redisstore.New(rdb, redisstore.Options{Node: id, Logger: log, TailClient: tails,
		TTL: max(2*c.opts.SessionTTL, time.Hour)})
	if err != nil {
		rdb.Close()
		tails.Close()
		return nil, err
	}
	node, err := redisstore.Join(pctx, rdb, id, 0)
	if err != nil {
		store.Close()
		rdb.Close()
		tails.Close()
		return nil, err
	}
	log.Info("joined the cluster", "node", id, "redis", opt.Addr)
	return &cluster{store: store, node: node, capacity: c.opts.BufferSize, rdb: rdb, tails: tails}, nil
}

// Close flushes the store and closes the Redis clients. The node has left
// by then (the orchestrator's Close calls Leave).
func (cl *cluster) Close() error {
	err := cl.store.Close()
	return errors.Join(err, cl.tails.Close(), cl.rdb.Close())
}

func (cl *cluster) Node() string { return cl.node.ID() }

func (cl *cluster) Create(ctx context.Context, id string, rec orchestrator.Record, hooks orchestrator.RingHooks) (buffer.Durable, error) {
	err := cl.store.CreateSession(ctx, id, redisstore.SessionMeta{TokenHash: hex.EncodeToString(rec.TokenHash[:]),
		Subject: rec.Subject, Capacity: cl.capacity})
	if err != nil {
		return nil, err
	}
	return cl.store.NewRing(id, cl.capacity, callbacks(hooks)), nil
}

func callbacks(h orchestrator.RingHooks) redisstore.Callbacks {
	return redisstore.Callbacks{OnDurable: h.OnDurable, OnLost: h.OnLost}
}

func (cl *cluster) Lookup(ctx context.Context, id string) (orchestrator.Record, error) {
	info, err := cl.store.Lookup(ctx, id)
	if err != nil {
		return orchestrator.Record{}, noSession(err)
	}
	return record(info)
}

func record(info redisstore.Info) (orchestrator.Record, error) {
	rec := orchestrator.Record{Subject: info.Subject, Owner: info.Owner, Conn: info.Conn}
	if n, err := hex.Decode(rec.TokenHash[:], []byte(info.TokenHash)); err != nil || n != len(rec.TokenHash) {
		return rec, fmt.Errorf("the store's token hash is not a SHA-256 in hex")
	}
	return rec, nil
}

// noSession maps the store's "not there" to the orchestrator's.
func noSession(err error) error {
	if errors.Is(err, redisstore.ErrNotFound) {
		return fmt.Errorf("%w: %w", orchestrator.ErrNoSession, err)
	}
	return err
}

func (cl *cluster) Alive(ctx context.Context, node string) (bool, error) {
	return cl.node.Alive(ctx, node)
}

func (cl *cluster) Claim(ctx context.Context, id, from string) (bool, error) {
	won, err := cl.store.Claim(ctx, id, from)
	if err != nil || !won {
		return won, noSession(err)
	}
	return true, cl.node.Adopted(ctx, id, from)
}

func (cl *cluster) Open(ctx context.Context, id string, hooks orchestrator.RingHooks) (orchestrator.Opened, error) {
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
		CheckpointSeq: loaded.CheckpointSeq, BaseSeq: loaded.BaseSeq}, nil
}

func (cl *cluster) Tail(ctx context.Context, id string, after uint64, fn func([]buffer.Entry) error) error {
	return noSession(cl.store.Tail(ctx, id, after, fn))
}

func (cl *cluster) Attach(ctx context.Context, id, conn string) (string, error) {
	prev, err := cl.store.Attach(ctx, id, conn)
	return prev, noSession(err)
}

func (cl *cluster) Detach(ctx context.Context, id, conn string) error {
	return cl.store.Detach(ctx, id, conn)
}

func (cl *cluster) Touch(ctx context.Context, ids ...string) error {
	return cl.store.Touch(ctx, ids...)
}
func (cl *cluster) Delete(ctx context.Context, id string) error { return cl.store.Delete(ctx, id) }

func (cl *cluster) Running(ctx context.Context, id string, running bool) error {
	return cl.node.Running(ctx, id, running)
}

func (cl *cluster) Orphans(ctx context.Context) ([]orchestrator.Orphan, error) {
	os, err := cl.node.Orphans(ctx)
	out := make([]orchestrator.Orphan, len(os))
	for i, o := range os {
		out[i] = orchestrator.Orphan{Session: o.Session, Node: o.Node}
	}
	return out, err
}

func (cl *cluster) Send(ctx context.Context, node string, msg []byte) (bool, error) {
	return cl.node.Send(ctx, node, msg)
}

func (cl *cluster) Receive(ctx context.Context, fn func([]byte)) error {
	return cl.node.Receive(ctx, fn)
}

func (cl *cluster) Leave(ctx context.Context) error { return cl.node.Leave(ctx) }
