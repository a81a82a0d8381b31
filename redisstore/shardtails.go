package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// shardTails reads the streams a Store's Tails follow when its Redis is a
// Cluster (Options.TailClient a *redis.ClusterClient). There one XREAD
// may not span sessions in different slots — CROSSSLOT, even when one
// master serves both — so the one reader of tails.go cannot be. Each
// master has a reader instead (shardReader) for the followed sessions in
// its slots. It blocks on one sharded subscription, on that master, to
// each session's wake channel (tailKey): while the session's tail key
// exists — the reader sets it and renews it — the append script
// publishes there whenever it wrote events. Woken, the reader reads the
// sessions with news in one pipeline of single-stream XREADs on the
// master, each from the lowest position of its subscriptions, and hands
// the entries on as tails.go does (tailSub: mailboxes, pauses).
//
// A wake only saves waiting: every TailBlock the reader reads all its
// sessions, so a wake lost (a subscription that blinked, a tail key a
// failover lost, a subscription not yet in place when a write landed)
// delays entries by TailBlock at most and loses none; and positions are
// the subscriptions', so nothing is read twice.
//
// Sessions are regrouped as slots move: each reader looks its sessions'
// master up again every TailBlock and after a redirection (the cluster
// client's slot map, which followSlots reloads), and a session that now
// lives on another master moves to that master's reader. A reader with
// no session left ends; Store.Close stops them all.
type shardTails struct {
	s  *Store
	cc *redis.ClusterClient

	mu sync.Mutex // guards the fields below and every reader's sessions
	// subs are the subscriptions by session id.
	subs map[string]map[*tailSub]struct{}
	// readers are the running readers by master address; where is the
	// reader of each followed session.
	readers map[string]*shardReader
	where   map[string]*shardReader
	closed  bool
	wg      sync.WaitGroup
}

// shardReader reads the followed sessions of one master.
type shardReader struct {
	t    *shardTails
	addr string
	node *redis.Client // the master's client, from the cluster client
	wake chan struct{} // one token: sessions to read, or the Store closing

	// sessions are its sessions, each with whether it is due to be read
	// (new to it, woken, or resumed); guarded by t.mu.
	sessions map[string]bool
}

// tailKeyTTL is how long a tail key lives without its reader renewing it
// (every third of it): a node that died stops costing its sessions'
// writes a publish that soon.
const tailKeyTTL = 30 * time.Second

func (t *shardTails) subscribe(sub *tailSub) error {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	node, err := t.cc.MasterForKey(ctx, keysOf(sub.id)[0])
	if err != nil {
		return tailErr(sub.id, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return tailErr(sub.id, ErrClosed)
	}
	if t.subs == nil {
		t.subs = make(map[string]map[*tailSub]struct{})
		t.readers = make(map[string]*shardReader)
		t.where = make(map[string]*shardReader)
	}
	if t.subs[sub.id] == nil {
		t.subs[sub.id] = make(map[*tailSub]struct{})
	}
	t.subs[sub.id][sub] = struct{}{}
	if r := t.where[sub.id]; r != nil {
		r.due(sub.id)
		return nil
	}
	t.assignLocked(sub.id, node)
	return nil
}

// assignLocked has the reader of node's master read session id, starting
// it if none runs.
func (t *shardTails) assignLocked(id string, node *redis.Client) {
	addr := node.Options().Addr
	if old := t.where[id]; old != nil {
		if old.addr == addr {
			return
		}
		delete(old.sessions, id)
		old.signal()
	}
	r := t.readers[addr]
	if r == nil {
		r = &shardReader{t: t, addr: addr, node: node, wake: make(chan struct{}, 1), sessions: make(map[string]bool)}
		t.readers[addr] = r
		t.wg.Add(1)
		go r.run() // owned by t: close waits for wg
	}
	t.where[id] = r
	r.due(id)
}

func (t *shardTails) unsubscribe(sub *tailSub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.subs[sub.id]
	if m == nil {
		return
	}
	delete(m, sub)
	if len(m) > 0 {
		return
	}
	delete(t.subs, sub.id)
	if r := t.where[sub.id]; r != nil {
		delete(r.sessions, sub.id)
		delete(t.where, sub.id)
		r.signal()
	}
}

func (t *shardTails) resume(sub *tailSub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.where[sub.id]; r != nil {
		r.due(sub.id)
	}
}

func (t *shardTails) close() {
	t.mu.Lock()
	t.closed = true
	for _, r := range t.readers {
		r.signal()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// due marks id to be read at once; the caller holds t.mu.
func (r *shardReader) due(id string) {
	r.sessions[id] = true
	r.signal()
}

func (r *shardReader) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// shardRead is one session's read in a reader's round.
type shardRead struct {
	id   string
	from uint64
	cmd  *redis.XStreamSliceCmd
}

// run is the reader.
func (r *shardReader) run() {
	defer r.t.wg.Done()
	s := r.t.s
	ctx := context.Background()
	var ws *wakeSub // the subscription to the sessions' wakes, nil until made
	defer func() { ws.close() }()
	renewed := make(map[string]time.Time) // when each session's tail key was last set
	poll := time.NewTimer(s.opt.TailBlock)
	defer poll.Stop()
	all, regroup := true, false
	retry := tailRetryMin
	for {
		if ws.isBroken() {
			// Its wakes since it failed are lost, and Redis may have
			// refused one for a slot gone elsewhere: read every session,
			// where it is now. No sooner than the reader's next round
			// (a poll at the latest): a refusal that comes again costs a
			// connection a round, not a loop.
			ws.close()
			ws, all, regroup = nil, true, true
		}
		if regroup {
			r.regroup(ctx)
			regroup = false
		}
		ids, reads, ok := r.round(all)
		if !ok {
			return
		}
		all = false
		// Subscribe to the new sessions' wakes, unsubscribe from those
		// gone.
		for id := range renewed {
			if _, still := ids[id]; !still {
				delete(renewed, id)
			}
		}
		if ws == nil {
			ws = r.subscribeWakes(ctx)
		}
		ws.keepOnly(ctx, ids)
		for id := range ids {
			ws.add(ctx, id)
		}
		// Set the tail keys not renewed for a third of their life, then
		// read what is due, in one pipeline on the master.
		now := time.Now()
		pipe := r.node.Pipeline()
		for id := range ids {
			if now.Sub(renewed[id]) >= tailKeyTTL/3 {
				pipe.Set(ctx, tailKey(id), "1", tailKeyTTL)
				renewed[id] = now
			}
		}
		for i := range reads {
			rd := &reads[i]
			rd.cmd = pipe.XRead(ctx, &redis.XReadArgs{
				Streams: []string{keysOf(rd.id)[1], strconv.FormatUint(rd.from, 10) + "-0"},
				Count:   tailBatch,
				Block:   -1, // no BLOCK: the subscription is what waits
			})
		}
		failed := false
		if pipe.Len() > 0 {
			_, _ = pipe.Exec(ctx) // each command's error is read below
			for _, rd := range reads {
				res, err := rd.cmd.Result()
				switch {
				case errors.Is(err, redis.Nil):
				case redirected(err):
					regroup = true
					r.t.cc.ReloadState(ctx)
				case err != nil:
					failed = true
					delete(renewed, rd.id)
					s.log.Warn("redisstore: a tails' read failed, reading again", "master", r.addr, "session", rd.id, "err", err, "in", retry)
				default:
					more := r.deliver(rd, res)
					if more {
						r.markDue(rd.id)
					}
				}
			}
		}
		if failed {
			// The master is unreachable: so may its subscription be,
			// silently (a network cut, no reset). Made afresh next round.
			ws.close()
			ws, all = nil, true
			r.t.cc.ReloadState(ctx)
			regroup = true
			if !r.pause(retry) {
				return
			}
			retry = min(2*retry, tailRetryMax)
			continue
		}
		retry = tailRetryMin
		// Wait for a wake, a new session, or the poll.
		select {
		case <-r.wake: // woken (wakeSub.receive), or a new session
		case <-poll.C:
			poll.Reset(s.opt.TailBlock)
			all, regroup = true, true
		case <-s.stop:
			return
		}
	}
}

// round returns the reader's sessions and the reads due now — every
// session when all — and clears their due marks. ok is false when the
// reader has no session left, or the Store is closing: it is then gone
// from the readers.
func (r *shardReader) round(all bool) (ids map[string]struct{}, reads []shardRead, ok bool) {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(r.sessions) == 0 || t.closed {
		if t.readers[r.addr] == r {
			delete(t.readers, r.addr)
		}
		for id, w := range t.where {
			if w == r {
				delete(t.where, id)
			}
		}
		return nil, nil, false
	}
	ids = make(map[string]struct{}, len(r.sessions))
	for id, due := range r.sessions {
		ids[id] = struct{}{}
		if !due && !all {
			continue
		}
		r.sessions[id] = false
		if low, found := lowest(t.subs[id]); found {
			reads = append(reads, shardRead{id: id, from: low})
		}
	}
	return ids, reads, true
}

// regroup moves each session whose slot another master serves now to that
// master's reader.
func (r *shardReader) regroup(ctx context.Context) {
	t := r.t
	t.mu.Lock()
	ids := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	for _, id := range ids {
		node, err := t.cc.MasterForKey(ctx, keysOf(id)[0])
		if err != nil || node.Options().Addr == r.addr {
			continue
		}
		t.mu.Lock()
		if t.where[id] == r && !t.closed {
			t.assignLocked(id, node)
		}
		t.mu.Unlock()
	}
}

// deliver hands a read's entries to its session's subscriptions; more
// says whether the read came back full (more may follow at once).
func (r *shardReader) deliver(rd shardRead, res []redis.XStream) (more bool) {
	var msgs []redis.XMessage
	for _, st := range res {
		msgs = append(msgs, st.Messages...)
	}
	if len(msgs) == 0 {
		return false
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	deliverTo(r.t.subs[rd.id], rd.id, rd.from, msgs)
	return len(msgs) >= tailBatch
}

func (r *shardReader) markDue(id string) {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if _, ok := r.sessions[id]; ok {
		r.sessions[id] = true
	}
}

// woken marks the session of a wake due.
func (r *shardReader) woken(m *redis.Message) {
	if m == nil {
		return
	}
	const prefix, suffix = "baton:{", "}:tail"
	ch := m.Channel
	if len(ch) < len(prefix)+len(suffix) || ch[:len(prefix)] != prefix || ch[len(ch)-len(suffix):] != suffix {
		return
	}
	r.markDue(ch[len(prefix) : len(ch)-len(suffix)])
}

// pause waits d, or until a new session; false when the Store is closing.
func (r *shardReader) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.wake:
		return true
	case <-r.t.s.stop:
		return false
	}
}

// tailErr is err for a Tail of session id.
func tailErr(id string, err error) error {
	return fmt.Errorf("redisstore: tail session %s: %w", id, err)
}

// wakeSub is a reader's subscription to the wakes of its sessions, on its
// master, made a channel at a time: SSUBSCRIBE refuses channels of
// different slots in one command (CROSSSLOT). go-redis makes a
// subscription again by itself when its connection fails, but in one
// SSUBSCRIBE of every channel — refused, it would hold nothing from then
// on, silently, and every wake of the reader's sessions would be lost
// until the reader ends. So the reader receives on its own (receive): a
// subscription whose connection failed, or that Redis refused, is broken,
// and the reader makes another. A nil *wakeSub is one not made yet.
type wakeSub struct {
	ps       *redis.PubSub
	channels map[string]bool // the sessions whose wake ps subscribes to
	broken   chan struct{}   // closed when receive ends
	received sync.WaitGroup  // receive: close waits for it
}

// subscribeWakes makes the reader's subscription, to no channel yet, and
// starts receiving on it.
func (r *shardReader) subscribeWakes(ctx context.Context) *wakeSub {
	ws := &wakeSub{ps: r.node.SSubscribe(ctx), channels: make(map[string]bool), broken: make(chan struct{})}
	ws.received.Add(1)
	go ws.receive(ctx, r) // owned by ws: close waits for it
	return ws
}

// receive marks the session of each wake due and wakes the reader, until
// the subscription fails or is closed.
func (ws *wakeSub) receive(ctx context.Context, r *shardReader) {
	defer ws.received.Done()
	defer close(ws.broken)
	for {
		m, err := ws.ps.Receive(ctx)
		if err != nil {
			return
		}
		if m, ok := m.(*redis.Message); ok {
			r.woken(m)
			r.signal()
		}
	}
}

// add subscribes to session id's wake, unless it is already; a failure
// is tried again next round (the polls read the session meanwhile).
func (ws *wakeSub) add(ctx context.Context, id string) {
	if ws.channels[id] {
		return
	}
	if err := ws.ps.SSubscribe(ctx, tailKey(id)); err == nil {
		ws.channels[id] = true
	}
}

// keepOnly unsubscribes from the wakes of the sessions not in ids.
func (ws *wakeSub) keepOnly(ctx context.Context, ids map[string]struct{}) {
	for id := range ws.channels {
		if _, still := ids[id]; !still {
			_ = ws.ps.SUnsubscribe(ctx, tailKey(id))
			delete(ws.channels, id)
		}
	}
}

// isBroken reports whether the subscription failed.
func (ws *wakeSub) isBroken() bool {
	if ws == nil {
		return false
	}
	select {
	case <-ws.broken:
		return true
	default:
		return false
	}
}

// close ends the subscription and waits for receive.
func (ws *wakeSub) close() {
	if ws == nil {
		return
	}
	ws.ps.Close()
	ws.received.Wait()
}
