package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/baton-run/baton/buffer"
)

// Cluster is a store that several servers share (Redis, package
// redisstore): with one, a session lives in the store, any server serves
// it, and a run continues on another server when its own dies. Options.Cluster
// nil is a single server keeping everything in memory.
//
// A session has one owner, the server that holds its ring, its state and
// its run, and is the only one to write its events (the store refuses the
// writes of a server that is no longer the owner). A client resuming on
// another server is served there from the store: the events it missed,
// then the live ones as the owner writes them, while its commands are
// forwarded to the owner. When the owner dies, a server claims the session
// and continues it from its last checkpoint (docs/scaling.md).
//
// Methods may do I/O and are never called with a session's lock held.
type Cluster interface {
	// Node is this server's id among the cluster's.
	Node() string
	// NewRing returns the ring of a new session this server will own,
	// which writes behind to the store, once Create has recorded the
	// session, and reports to hooks. It does no I/O.
	NewRing(id string, hooks RingHooks) buffer.Durable
	// Create records a new session owned by this server: rec's token
	// hash, follow token hash, subject and connection (Conn, "" for
	// none); the other fields are ignored.
	Create(ctx context.Context, id string, rec Record) error
	// Lookup returns a session's record; ErrNoSession when there is none.
	Lookup(ctx context.Context, id string) (Record, error)
	// Rotate replaces the session's token hash with next, atomically, if
	// old is its token hash (which then becomes its pending previous
	// one) or its pending previous one (which stays so), and returns the
	// rotation's number, issued in the same atomic step: every rotation
	// of a session gets a higher one than those before it. 0 when it did
	// not rotate; ErrNoSession when there is no such session. The number
	// orders the resumes that rotated (rotation.go). at is when the
	// resume arrived: a rotation from the pending previous hash by a
	// resume that arrived more than RotationSkew before the one whose
	// rotation made the current hash is refused with ErrSuperseded.
	Rotate(ctx context.Context, id string, old, next [32]byte, at time.Time) (uint64, error)
	// Commit ends a pending rotation if the session's token hash is still
	// current: the previous one is cleared, atomically. It reports
	// whether current was the session's token hash.
	Commit(ctx context.Context, id string, current [32]byte) (bool, error)
	// Alive reports whether a server still serves: its lease has not
	// lapsed. Nothing else (a dropped subscription, a slow answer) makes a
	// live server's sessions move.
	Alive(ctx context.Context, node string) (bool, error)
	// Claim makes this server the session's owner if from still is,
	// reporting whether it did; ErrNoSession when the session is gone,
	// and then it is no longer counted as a run of from's (Orphans).
	Claim(ctx context.Context, id, from string) (bool, error)
	// Open loads a session from the store: a ring holding every retained
	// event, its latest checkpoint and the seq it is as of. The ring writes
	// (and fails with RingHooks.OnLost) only if this server owns the
	// session; a server that does not reads from it and closes it.
	Open(ctx context.Context, id string, hooks RingHooks) (Opened, error)
	// Tail calls fn with the session's events after seq after as the
	// store receives them, in order, until ctx is done, fn fails or the
	// session is gone (ErrNoSession).
	Tail(ctx context.Context, id string, after uint64, fn func([]buffer.Entry) error) error
	// Attach records conn as the session's connection and returns the
	// one it replaces ("" for none). rot is the number of the rotation
	// (Rotate) whose token conn holds, 0 for none: if a connection holding
	// a higher one attached before, Attach refuses (ok false) and changes
	// nothing. Detach clears the connection if it is still conn.
	Attach(ctx context.Context, id, conn string, rot uint64) (prev string, ok bool, err error)
	Detach(ctx context.Context, id, conn string) error
	// Present records that the session's client is trying to resume it
	// now, though it cannot yet (a resume answered busy): a session with
	// no connection then has its SessionTTL run from now (Detached).
	Present(ctx context.Context, id string) error
	// Touch keeps sessions from expiring in the store.
	Touch(ctx context.Context, ids ...string) error
	// Delete removes an expired session from the store.
	Delete(ctx context.Context, id string) error
	// Running records whether a run of this server's is in flight in the
	// session; Orphans returns the sessions with a run in flight whose
	// server is dead, with that server, and may return this server's own
	// (the caller adopts those it does not hold: it gave them up).
	Running(ctx context.Context, id string, running bool) error
	Orphans(ctx context.Context) ([]Orphan, error)
	// Send delivers msg to a server's Receive, reporting whether a server
	// was there to take it. Receive calls fn with this server's messages,
	// in order, until ctx is done.
	Send(ctx context.Context, node string, msg []byte) (bool, error)
	Receive(ctx context.Context, fn func(msg []byte)) error
	// Leave tells the others this server is gone: they claim its runs at
	// once instead of waiting for its liveness to lapse.
	Leave(ctx context.Context) error
}

// Record is what the store keeps of a session besides its events.
type Record struct {
	TokenHash [32]byte
	// PrevTokenHash is the token hash before the latest rotation while it
	// is pending (Rotate, Commit); zero when none.
	PrevTokenHash [32]byte
	// FollowHash is the hash of the session's follow token (§3.6), which
	// never rotates; zero when it has none.
	FollowHash [32]byte
	Subject    string
	Owner      string
	// Conn is the session's connection, "NODE/CONN", "" when none, and
	// ConnRot the number of the token rotation it holds (Attach).
	Conn    string
	ConnRot uint64
	// Detached is when the session's last connection left, on any server,
	// zero while one is attached (or when none left yet): its SessionTTL
	// runs from then, also after a takeover.
	Detached time.Time
}

// RingHooks are how a durable ring reports, from a goroutine of its own and
// without any lock of the ring's held.
type RingHooks struct {
	// OnDurable receives each unit's entries once the store holds them.
	OnDurable func([]buffer.Entry)
	// OnLost is called once when the ring can no longer write: another
	// server owns the session, or the store lost it.
	OnLost func(error)
}

// Opened is a session loaded from the store.
type Opened struct {
	Record
	Ring buffer.Durable
	// Checkpoint is the session's latest checkpoint, nil when it has none,
	// as of seq CheckpointSeq; the ring's events after it are its tail.
	Checkpoint    []byte
	CheckpointSeq uint64
	// CheckpointParts is the checkpoint instead when the ring took it in
	// parts (buffer.Parted), by name; nil otherwise.
	CheckpointParts map[string][]byte
	// BaseSeq is the seq just before the oldest event the ring holds.
	BaseSeq uint64
}

// Orphan is a session with a run whose server died.
type Orphan struct {
	Session, Node string
}

// ErrNoSession is a Cluster's answer for a session the store does not hold.
var ErrNoSession = errors.New("orchestrator: no such session in the store")

// ErrSuperseded is a Cluster's answer to a rotation from a session's
// pending previous token by a resume that arrived before the one holding
// the token (Cluster.Rotate): its client gave it up and resumed again.
var ErrSuperseded = errors.New("orchestrator: a resume that arrived later holds the token")
