package redisstore

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/baton-run/baton/buffer"
)

var (
	_ buffer.Parted = (*Ring)(nil)
	_ buffer.Sizer  = (*Ring)(nil)
	_ io.Closer     = (*Ring)(nil)
)

// Callbacks tell the owner of a ring what became of its writes. Both are
// optional. They are called from the Store's writer goroutine, one at a
// time across all rings, never with a lock of the ring held (they may call
// the ring, and take the session lock), and none begins once the ring's
// Close has begun. Keep them short: while one runs, no session's write
// goes out.
type Callbacks struct {
	// OnDurable receives the entries Redis now holds, in seq order, each
	// once, after Durable has advanced past them.
	OnDurable func([]buffer.Entry)
	// OnLost is called once when the ring stops writing for good: another
	// node owns the session (ErrNotOwner), Redis holds another history
	// (ErrConflict), the session is gone from Redis (ErrNotFound),
	// transient errors lasted past Options.GiveUpAfter, or more than
	// Options.MaxPending entries waited (ErrBacklog). The ring still
	// answers from memory, but nothing it holds past Durable will reach
	// Redis. It is not called when the Store closes.
	OnLost func(error)
}

// Ring is a session's buffer.Durable ring, written behind to Redis. It
// answers every Ring method from a buffer.Memory and queues appends, acks
// and checkpoints; Commit hands the queue to the Store's writer as a unit.
// All methods may be called concurrently.
//
// Acks ride with the next committed unit: an Ack alone is not written
// until a Commit follows it. Work not committed when the ring closes is
// not written, since it is not a whole unit.
type Ring struct {
	s    *Store
	id   string
	keys [2]string
	// scriptKeys are the append script's keys (job.scriptKeys).
	scriptKeys []string
	mem        *buffer.Memory
	cb         Callbacks
	// maxPending is the backlog past which the ring is lost.
	maxPending int

	mu sync.Mutex // guards the fields below; held across mem.Append so the queue is in seq order
	// open is the unit since the last Commit.
	open unit
	// ready is what was committed and waits for the writer.
	ready unit
	// inflight is set while the writer holds flight.
	inflight bool
	// queued is set while r is in the Store's ready list.
	queued bool
	// pending counts the entries in open, ready and flight.
	pending int
	// ackQueued is the highest ack queued.
	ackQueued uint64
	// durSeq and durSum are the latest seq Redis holds and its checksum.
	durSeq uint64
	durSum string
	// durParts and durCpSeq are the latest checkpoint Redis acknowledged
	// (every part), if hasDurCp: written again should Redis lose it
	// (fence).
	durParts map[string][]byte
	durCpSeq uint64
	hasDurCp bool
	// lost is why the ring stopped writing; lostTold that OnLost was
	// called (or must never be).
	lost     error
	lostTold bool
	// closing is set when Close begins.
	closing bool
	// failingSince is when the first write of the current run of
	// transient errors was sent.
	failingSince time.Time
	// idle, when a Flush waits, is closed once nothing committed waits to
	// be written (or never will be).
	idle chan struct{}

	// flight is the unit being written: only the writer touches it, while
	// inflight is set.
	flight unit
}

// unit is queued work: events in seq order, the highest ack, and the
// change of the checkpoint, if hasCp: the parts it sets (a nil value
// removes the part), after removing every other part if cpReset.
type unit struct {
	events  []buffer.Chained
	ack     uint64
	cp      map[string][]byte
	cpReset bool
	cpSeq   uint64
	hasCp   bool
}

func (u *unit) empty() bool { return len(u.events) == 0 && u.ack == 0 && !u.hasCp }

// then returns u followed by v: v's events after u's, the higher ack, and
// v's change of the checkpoint after u's.
func (u unit) then(v unit) unit {
	if u.empty() {
		return v
	}
	u.events = append(u.events, v.events...)
	u.ack = max(u.ack, v.ack)
	if v.hasCp {
		u.checkpoint(v.cp, v.cpReset, v.cpSeq)
	}
	return u
}

// checkpoint adds a change of the checkpoint as of seq to u's. u's map
// is u's own (a copy is made the first time), so the caller's is never
// modified.
func (u *unit) checkpoint(parts map[string][]byte, reset bool, seq uint64) {
	if reset || !u.hasCp {
		u.cp, u.cpReset = make(map[string][]byte, len(parts)), reset
	}
	for k, v := range parts {
		u.cp[k] = v
	}
	u.cpSeq, u.hasCp = seq, true
}

// minMaxPending is the least default backlog bound: a small ring must
// survive a burst of appends during one slow round trip.
const minMaxPending = 1024

// NewRing returns the ring of a session this node created (CreateSession)
// with the given capacity (≤ 0 means buffer.DefaultCapacity): empty, and
// nothing durable yet. It does no I/O.
func (s *Store) NewRing(id string, capacity int, cb Callbacks) *Ring {
	return s.newRing(id, buffer.NewMemory(capacity), cb)
}

func (s *Store) newRing(id string, mem *buffer.Memory, cb Callbacks) *Ring {
	maxPending := s.opt.MaxPending
	if maxPending <= 0 {
		maxPending = max(2*mem.Cap(), minMaxPending)
	}
	return &Ring{
		s: s, id: id, keys: keysOf(id), scriptKeys: s.scriptKeys(id), mem: mem, cb: cb,
		maxPending: maxPending,
	}
}

// Cap implements buffer.Ring.
func (r *Ring) Cap() int { return r.mem.Cap() }

// Len implements buffer.Sizer: the events the ring holds in memory.
func (r *Ring) Len() int { return r.mem.Len() }

// Append implements buffer.Ring, and queues the entry for the writer.
func (r *Ring) Append(ctx context.Context, id string, encode func(seq uint64) ([]byte, error)) (buffer.Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.mem.Append(ctx, id, encode)
	if err != nil || !r.writingLocked() {
		return e, err
	}
	// The ring is locked: Last is the entry just appended.
	_, sum, _ := r.mem.Last(context.Background())
	r.open.events = append(r.open.events, buffer.Chained{Entry: e, Sum: sum})
	r.pending++
	if r.pending > r.maxPending {
		r.loseLocked(fmt.Errorf("%w: %d entries of session %s", ErrBacklog, r.pending, r.id))
	}
	return e, nil
}

// Ack implements buffer.Ring, and queues the ack with the current unit.
func (r *Ring) Ack(ctx context.Context, lastSeq uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.mem.Ack(ctx, lastSeq); err != nil {
		return err
	}
	if lastSeq > r.ackQueued && r.writingLocked() {
		r.open.ack, r.ackQueued = lastSeq, lastSeq
	}
	return nil
}

// Since implements buffer.Ring.
func (r *Ring) Since(ctx context.Context, lastSeq uint64) ([]buffer.Entry, error) {
	return r.mem.Since(ctx, lastSeq)
}

// Checksum implements buffer.Ring.
func (r *Ring) Checksum(ctx context.Context, seq uint64) (string, error) {
	return r.mem.Checksum(ctx, seq)
}

// Last implements buffer.Ring.
func (r *Ring) Last(ctx context.Context) (uint64, string, error) { return r.mem.Last(ctx) }

// Checkpoint implements buffer.Durable: the checkpoint is the one part
// named "" (meta's cp field). The ring keeps data as it is: do not modify
// it afterwards.
func (r *Ring) Checkpoint(data []byte) {
	if data == nil {
		data = []byte{} // nil would remove the part
	}
	r.CheckpointParts(map[string][]byte{"": data}, true)
}

// CheckpointParts implements buffer.Parted: a part named n is meta's
// field cp:n.
func (r *Ring) CheckpointParts(parts map[string][]byte, reset bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.writingLocked() {
		return
	}
	last, _, _ := r.mem.Last(context.Background())
	r.open.checkpoint(parts, reset, last)
}

// Commit implements buffer.Durable: the work queued since the last Commit
// becomes one unit, and the writer is woken.
func (r *Ring) Commit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.writingLocked() || r.open.empty() {
		return
	}
	r.ready = r.ready.then(r.open)
	r.open = unit{}
	r.requeueLocked()
}

// MaxPending is how many entries may wait unwritten before the ring gives
// up (ErrBacklog): the most a stall of Redis can pile up for a session's
// clients to receive at once when it ends.
func (r *Ring) MaxPending() int { return r.maxPending }

// Durable implements buffer.Durable.
func (r *Ring) Durable() (uint64, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.durSeq, r.durSum
}

// Flush waits until nothing committed waits to be written — everything
// committed so far is in Redis — or the ring is lost (its error), or ctx
// is done. Durable has advanced when it returns; OnDurable for the last
// write may still be running. It waits on I/O: do not call it with the
// session lock held.
func (r *Ring) Flush(ctx context.Context) error {
	r.mu.Lock()
	for {
		if r.lost != nil {
			err := r.lost
			r.mu.Unlock()
			return fmt.Errorf("redisstore: flush session %s: %w", r.id, err)
		}
		if r.ready.empty() && !r.inflight {
			r.mu.Unlock()
			return nil
		}
		if r.idle == nil {
			r.idle = make(chan struct{})
		}
		idle := r.idle
		r.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return fmt.Errorf("redisstore: flush session %s: %w", r.id, ctx.Err())
		}
		r.mu.Lock()
	}
}

// Close stops the ring: what was committed is written, for up to
// Options.FlushTimeout, and then nothing more; uncommitted work is
// dropped. No callback begins once Close has begun (one already running
// may still be), and a write already sent when the flush times out may
// still land. It returns an error when what was committed did not all
// reach Redis. It may be called from OnLost (a lost ring has nothing to
// flush); from OnDurable it would wait FlushTimeout for the writer that
// runs the callback.
func (r *Ring) Close() error {
	r.mu.Lock()
	if r.closing {
		r.mu.Unlock()
		return nil
	}
	r.closing = true
	r.pending -= len(r.open.events)
	r.open = unit{}
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), r.s.opt.FlushTimeout)
	defer cancel()
	err := r.Flush(ctx)
	if ctx.Err() != nil {
		r.mu.Lock()
		r.loseLocked(fmt.Errorf("close took over %v", r.s.opt.FlushTimeout))
		r.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("redisstore: close: %w", err)
	}
	return nil
}

// writingLocked reports whether new work is still queued.
func (r *Ring) writingLocked() bool { return r.lost == nil && !r.closing }

// requeueLocked puts r in the writer's list when the writer has something
// to do for it (committed work, or a loss to tell) and r is neither
// listed nor being written.
func (r *Ring) requeueLocked() {
	if r.queued || r.inflight {
		return
	}
	if (r.lost == nil && r.ready.empty()) || (r.lost != nil && r.lostTold) {
		return
	}
	r.queued = true
	if r.s.enqueue(r) {
		return
	}
	r.queued = false
	r.lostTold = true // the Store has closed: no callback
	if r.lost == nil {
		r.loseLocked(fmt.Errorf("session %s: %w", r.id, ErrClosed))
	}
}

// loseLocked stops the ring's writing for err (the first reason wins),
// drops what waits, and has the writer tell OnLost.
func (r *Ring) loseLocked(err error) {
	if r.lost == nil {
		r.lost = err
	}
	r.pending -= len(r.open.events) + len(r.ready.events)
	r.open, r.ready = unit{}, unit{}
	r.requeueLocked()
	r.settleLocked()
}

// settleLocked wakes Flush once nothing committed waits to be written,
// or nothing ever will be.
func (r *Ring) settleLocked() {
	if r.idle != nil && (r.lost != nil || (r.ready.empty() && !r.inflight)) {
		close(r.idle)
		r.idle = nil
	}
}

// callback runs fn unless Close has begun.
func (r *Ring) callback(fn func()) {
	r.mu.Lock()
	closing := r.closing
	r.mu.Unlock()
	if !closing {
		fn()
	}
}
