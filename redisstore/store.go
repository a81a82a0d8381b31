package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
)

var (
	// ErrNotFound means the session is not in Redis: never created,
	// expired, or lost with a Redis restart.
	ErrNotFound = errors.New("redisstore: session not found")
	// ErrExists means CreateSession found the session already there.
	ErrExists = errors.New("redisstore: session already exists")
	// ErrNotOwner means another node owns the session: this one may not
	// write to it.
	ErrNotOwner = errors.New("redisstore: session owned by another node")
	// ErrConflict means Redis holds a history that does not follow the
	// ring's (another writer got there first).
	ErrConflict = errors.New("redisstore: the store's copy does not follow this ring")
	// ErrSuperseded means RotateToken refused a rotation from the pending
	// previous token: a resume that arrived later made the current one.
	ErrSuperseded = errors.New("redisstore: a later resume holds the token")
	// ErrBacklog means more entries waited unwritten than Options.MaxPending.
	ErrBacklog = errors.New("redisstore: too many entries wait unwritten")
	// ErrClosed means the Store was closed before the ring's units were
	// written.
	ErrClosed = errors.New("redisstore: store closed")
)

// Options configure a Store. Node is required; every other field has a
// default.
type Options struct {
	// Node is this server's id, written as the owner of the sessions it
	// creates or claims. Required.
	Node string
	// TTL is how long a session's keys live without a write. Every write
	// refreshes it, so it must exceed the longest a live session may go
	// without one. Defaults to 24 hours.
	TTL time.Duration
	// SessionTTL, when set, is how long a session outlives the moment its
	// client left (Detach): a detached session's keys expire then, exactly,
	// whatever is written meanwhile and whichever node writes it. Zero:
	// detached sessions' keys expire as attached ones' do (TTL).
	SessionTTL time.Duration
	// Logger receives the writer's retries and losses. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// GiveUpAfter is how long the writer retries a session's write through
	// transient errors (a Redis down, a timeout) before it reports the
	// ring lost. Defaults to 30 seconds.
	GiveUpAfter time.Duration
	// FlushTimeout bounds how long Close of a ring, and Close of the
	// Store, wait for committed units to be written. Defaults to 5 seconds.
	FlushTimeout time.Duration
	// MaxPending is how many entries of one session may wait unwritten;
	// past it the ring is lost (ErrBacklog) rather than grow. Defaults to
	// twice the ring's capacity, and at least 1024.
	MaxPending int
	// Replicas, when > 0, has a write count as written only once every
	// replica the master has holds it, and at least Replicas of
	// them (Redis WAIT; replicaSet): before OnDurable hands its events on,
	// and before Flush or Settled return. What a client receives or a run
	// acts on is then never lost by a failover, whichever replica the
	// sentinels promote. A write the master took but too few replicas
	// acknowledged in time is sent again (the append script skips what
	// the store holds) and counts as a failure toward GiveUpAfter. Zero
	// (the default): the master's reply counts.
	Replicas int
	// EveryReplica has a write count once every replica its master lists
	// holds it, as Replicas does, but with none needed: a master with no
	// replica (a promoted one, until its old master is back as its
	// replica) counts its own reply. For a Redis Cluster, where a failover
	// leaves the promoted master alone with one replica per master, and
	// Replicas 1 would stall its writes until it has one again. Defaults
	// to false.
	EveryReplica bool
	// ReplicaHold is how long, with Replicas, a replica that left the
	// master's list is still waited for (a failover begins by detaching
	// the replica it promotes). Defaults to 5 seconds.
	ReplicaHold time.Duration
	// MaxBatch is how many sessions one round trip writes at most.
	// Defaults to 1000.
	MaxBatch int
	// TailBlock is how long one blocking read of Tail waits for new
	// entries; it bounds how late Tail notices its ctx is done. Defaults
	// to 1 second.
	TailBlock time.Duration
	// TailClient is the client Tail's reads use. When it is a
	// *redis.Client, every Tail of the Store shares one of its
	// connections, blocked in one XREAD for all of them, and its pool
	// answers the Tails' other reads; a *redis.ClusterClient has one
	// reader per master (shardtails.go); with another client each running
	// Tail holds one of its pooled connections. Give Tail its own client
	// when its reads would queue the writer behind them. Defaults to the
	// store's client.
	TailClient redis.UniversalClient
}

// Store is a Redis store of sessions, for one node. Its methods may be
// called concurrently. It runs one writer goroutine, shared by all its
// rings; Close stops it.
type Store struct {
	client redis.UniversalClient
	opt    Options
	log    *slog.Logger

	stop      chan struct{} // closed by Close
	closeOnce sync.Once
	done      chan struct{} // closed when the writer has returned
	wake      chan struct{} // one token: the writer has work

	mu       sync.Mutex // guards ready and exited
	ready    []*Ring    // rings with committed units waiting for the writer, each once
	exited   bool       // the writer returned: nothing more is written
	written  stats
	replicas replicaSet // what a write needs to count (Options.Replicas)
	// shardReplicas is replicas per master, on a cluster (writeShards).
	shardReplicas shardReplicas

	// tails reads every Tail's stream: one reader (tails.go) when
	// Options.TailClient is a *redis.Client (a single server or a
	// Sentinel's master), one per master (shardtails.go) when it is a
	// *redis.ClusterClient; nil otherwise (each Tail reads on its own).
	tails tailReader
}

// tailReader is what Tail's subscriptions read through: tails or
// shardTails.
type tailReader interface {
	// subscribe adds sub and has its session read at once; ErrClosed
	// once the Store is closing.
	subscribe(sub *tailSub) error
	unsubscribe(sub *tailSub)
	// resume has sub's session read again: sub was paused, and its Tail
	// has emptied its mailbox.
	resume(sub *tailSub)
	// close stops the readers and waits for them; the Store's stop is
	// closed.
	close()
}

// stats counts the writer's work (atomics: read by Stats).
type stats struct {
	roundTrips, scripts, entries, fences atomic.Uint64
}

// Stats is what the writer did so far.
type Stats struct {
	// RoundTrips is the number of pipelines sent.
	RoundTrips uint64
	// Scripts is the number of session writes (one EVALSHA each) sent.
	Scripts uint64
	// Entries is the number of events written.
	Entries uint64
	// Fences is the number of times a session was found to have lost
	// writes Redis had acknowledged, and fenced (fenceScript).
	Fences uint64
}

// New returns a Store writing through client as node opt.Node, and
// starts its writer. The caller keeps client and closes it after Close.
func New(client redis.UniversalClient, opt Options) (*Store, error) {
	if opt.Node == "" {
		return nil, errors.New("redisstore: Options.Node is required")
	}
	if opt.TTL <= 0 {
		opt.TTL = 24 * time.Hour
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.GiveUpAfter <= 0 {
		opt.GiveUpAfter = 30 * time.Second
	}
	if opt.FlushTimeout <= 0 {
		opt.FlushTimeout = 5 * time.Second
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = 1000
	}
	if opt.TailBlock <= 0 {
		opt.TailBlock = time.Second
	}
	if opt.TailClient == nil {
		opt.TailClient = client
	}
	s := &Store{
		replicas:      replicaSet{min: opt.Replicas, every: opt.EveryReplica, hold: opt.ReplicaHold},
		shardReplicas: shardReplicas{min: opt.Replicas, every: opt.EveryReplica, hold: opt.ReplicaHold},
		client:        client,
		opt:           opt,
		log:           opt.Logger.With("node", opt.Node),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
		wake:          make(chan struct{}, 1),
	}
	switch c := opt.TailClient.(type) {
	case *redis.Client:
		s.tails = &tails{s: s, client: c, wakeup: make(chan struct{}, 1)}
	case *redis.ClusterClient:
		followSlots(c)
		s.tails = &shardTails{s: s, cc: c}
	}
	followSlots(clusterOf(client))
	go s.run() // owned by s: Close waits for done
	return s, nil
}

var _ io.Closer = (*Store)(nil)

// Close writes what rings have committed, for up to Options.FlushTimeout,
// then stops the writer and waits for it. Rings still open answer from
// memory afterwards but write nothing; their callbacks are not called
// again.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	<-s.done
	if s.tails != nil {
		s.tails.close()
	}
	return nil
}

// Stats returns the writer's counts so far.
func (s *Store) Stats() Stats {
	return Stats{
		RoundTrips: s.written.roundTrips.Load(),
		Scripts:    s.written.scripts.Load(),
		Entries:    s.written.entries.Load(),
		Fences:     s.written.fences.Load(),
	}
}

// SessionMeta is what a session is created with.
type SessionMeta struct {
	// TokenHash is the hex SHA-256 of the session's resume token.
	TokenHash string
	// FollowHash is the hex SHA-256 of its follow token, "" for none.
	FollowHash string
	// Subject is whom the session belongs to.
	Subject string
	// Capacity is the ring's capacity in entries; ≤ 0 means
	// buffer.DefaultCapacity.
	Capacity int
	// Conn, when set, is recorded as the session's connection as it is
	// created, as Attach with no rotation would (CreateSession only).
	Conn string
}

// Info is what Lookup reads of a session.
type Info struct {
	SessionMeta
	// PrevTokenHash is the token hash before the latest rotation while
	// that rotation is pending (RotateToken, CommitToken); "" when none.
	PrevTokenHash string
	// Owner is the node that may write the session.
	Owner string
	// Conn names the connection the session is attached to (Attach), ""
	// when none.
	Conn string
	// ConnRot is the number of the token rotation Conn holds (Attach), 0
	// when none has attached with one.
	ConnRot uint64
	// Detached is when the session's client left (Detach), zero while one
	// is attached or when none ever detached.
	Detached time.Time
	// LastSeq is the latest seq Redis holds; BaseSeq the one just before
	// the oldest entry it holds.
	LastSeq, BaseSeq uint64
	// AckSeq is the highest ack written.
	AckSeq uint64
	// CheckpointSeq is the seq the checkpoint is as of (0: none).
	CheckpointSeq uint64
}

// CreateSession writes a new session's meta, owned by this node; it fails
// with ErrExists if the session is there already. Then make its ring with
// NewRing.
func (s *Store) CreateSession(ctx context.Context, id string, meta SessionMeta) error {
	if meta.Capacity <= 0 {
		meta.Capacity = buffer.DefaultCapacity
	}
	k := keysOf(id)
	err := createScript.Run(ctx, s.client, k[:], s.opt.Node, meta.TokenHash, meta.Subject,
		meta.Capacity, s.opt.TTL.Milliseconds(), s.opt.SessionTTL.Milliseconds(), meta.FollowHash, meta.Conn).Err()
	if err != nil {
		return fmt.Errorf("redisstore: create session %s: %w", id, scriptError(err))
	}
	return nil
}

// Claim makes this node the session's owner if its owner is from, and
// reports whether it did; ErrNotFound if the session is not there. After
// a claim, the former owner's writes are refused. Claim before OpenRing:
// a ring opened before the claim may miss the former owner's last writes,
// and its own writes would then be refused (ErrConflict).
func (s *Store) Claim(ctx context.Context, id, from string) (bool, error) {
	k := keysOf(id)
	n, err := claimScript.Run(ctx, s.client, k[:], from, s.opt.Node, s.opt.TTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: claim session %s: %w", id, scriptError(err))
	}
	return n == 1, nil
}

// RotateToken replaces the session's token hash (hex, as in SessionMeta)
// with next in one atomic step, if old is the token hash (which becomes
// the pending previous one, Info.PrevTokenHash) or the pending previous
// one (which stays), and returns the rotation's number (1, 2, … in the
// order the store made them; 0 when it did not rotate); ErrNotFound if
// the session is not there. Of concurrent rotations from one hash, every
// one may succeed, but only the one with the highest number holds the
// token hash after them.
//
// at is when the resume rotating arrived. A rotation from the pending
// previous hash by a resume that arrived more than skew before the one
// whose rotation made the current hash is refused with ErrSuperseded:
// its client had given it up and resumed again (skew allows for the
// clocks of the nodes the two arrived at).
func (s *Store) RotateToken(ctx context.Context, id, old, next string, at time.Time, skew time.Duration) (uint64, error) {
	k := keysOf(id)
	n, err := rotateScript.Run(ctx, s.client, k[:1], old, next, at.UnixMilli(), skew.Milliseconds()).Uint64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: rotate the token of session %s: %w", id, scriptError(err))
	}
	return n, nil
}

// CommitToken ends a pending rotation: if current is still the session's
// token hash, the previous one is dropped, in one atomic step. It reports
// whether current was the token hash (false too when the session is gone).
func (s *Store) CommitToken(ctx context.Context, id, current string) (bool, error) {
	k := keysOf(id)
	n, err := commitScript.Run(ctx, s.client, k[:1], current).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: commit the token of session %s: %w", id, scriptError(err))
	}
	return n == 1, nil
}

// Lookup reads a session's meta; ErrNotFound if it is not there.
func (s *Store) Lookup(ctx context.Context, id string) (Info, error) {
	k := keysOf(id)
	vals, err := s.client.HMGet(ctx, k[0], infoFields...).Result()
	if err != nil {
		return Info{}, fmt.Errorf("redisstore: look up session %s: %w", id, err)
	}
	m := make(map[string]string, len(infoFields))
	for i, v := range vals {
		if v, ok := v.(string); ok {
			m[infoFields[i]] = v
		}
	}
	info, err := parseInfo(m)
	if err != nil {
		return Info{}, fmt.Errorf("redisstore: look up session %s: %w", id, err)
	}
	return info, nil
}

// keysOf returns a session's meta and events keys.
func keysOf(id string) [2]string {
	return [2]string{"baton:{" + id + "}:meta", "baton:{" + id + "}:events"}
}

// tailKey is the key whose presence has the append script wake a
// cluster's tails of session id, and the sharded channel it wakes them
// on (shardtails.go): baton:{ID}:tail, in the session's slot.
func tailKey(id string) string { return "baton:{" + id + "}:tail" }

// scriptKeys are the append script's keys for session id.
func (s *Store) scriptKeys(id string) []string {
	k := keysOf(id)
	if clusterOf(s.client) != nil {
		return []string{k[0], k[1], tailKey(id)}
	}
	return k[:]
}

// infoFields are the meta hash's fields Lookup reads (not the checkpoint,
// which may be large).
var infoFields = []string{"token", "prev", "follow", "subject", "owner", "conn", "conn_rot", "detached", "cap", "last_seq", "base_seq", "ack_seq", "cp_seq"}

// parseInfo reads a meta hash; ErrNotFound when it is empty.
func parseInfo(m map[string]string) (Info, error) {
	if len(m) == 0 {
		return Info{}, ErrNotFound
	}
	info := Info{
		SessionMeta:   SessionMeta{TokenHash: m["token"], FollowHash: m["follow"], Subject: m["subject"]},
		PrevTokenHash: m["prev"],
		Owner:         m["owner"],
		Conn:          m["conn"],
	}
	capacity, err := strconv.Atoi(m["cap"])
	if err != nil {
		return Info{}, fmt.Errorf("meta cap: %w", err)
	}
	info.Capacity = capacity
	if d := m["detached"]; d != "" {
		ms, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return Info{}, fmt.Errorf("meta detached: %w", err)
		}
		info.Detached = time.UnixMilli(ms)
	}
	for _, f := range []struct {
		name string
		to   *uint64
	}{
		{"last_seq", &info.LastSeq},
		{"base_seq", &info.BaseSeq},
		{"ack_seq", &info.AckSeq},
		{"cp_seq", &info.CheckpointSeq},
	} {
		if *f.to, err = strconv.ParseUint(m[f.name], 10, 64); err != nil {
			return Info{}, fmt.Errorf("meta %s: %w", f.name, err)
		}
	}
	if r := m["conn_rot"]; r != "" { // absent until a rotation attached
		if info.ConnRot, err = strconv.ParseUint(r, 10, 64); err != nil {
			return Info{}, fmt.Errorf("meta conn_rot: %w", err)
		}
	}
	return info, nil
}

// scriptError turns a script's error reply into the package's errors,
// keeping Redis's message.
func scriptError(err error) error {
	for _, c := range []struct {
		code string
		err  error
	}{
		{codeNoSession, ErrNotFound},
		{codeNotOwner, ErrNotOwner},
		{codeConflict, ErrConflict},
		{codeExists, ErrExists},
		{codeSuperseded, ErrSuperseded},
		{codeBehind, errBehind},
	} {
		if redis.HasErrorPrefix(err, c.code) {
			return fmt.Errorf("%w (%v)", c.err, err)
		}
	}
	return err
}

// enqueue adds r to the writer's list and wakes the writer; false once the
// writer has returned. The caller holds r.mu and has set r.queued.
func (s *Store) enqueue(r *Ring) bool {
	s.mu.Lock()
	if s.exited {
		s.mu.Unlock()
		return false
	}
	s.ready = append(s.ready, r)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}
