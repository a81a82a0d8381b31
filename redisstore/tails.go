package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
)

// tails is a Store's one reader of the streams its Tails follow (issue
// 27): a single connection blocked in one XREAD over every followed
// session, in place of a connection in XREAD BLOCK per Tail. Each Tail
// is a subscription (tailSub) with its own position; the reader reads
// each session from the lowest position of its subscriptions and hands
// every subscription the entries that follow its own, into a bounded
// mailbox that its Tail's goroutine empties into fn. The reader never
// waits for a Tail: a subscription whose mailbox is full is paused (left
// out of the read) until its Tail has caught up, then read again from
// where it stopped. The reader's connection lost (killed, a failover)
// costs nothing either: positions are the subscriptions', and the next
// read on a new connection starts from them.
//
// The reader runs while there are subscriptions (started by the first,
// ending with the last) and Store.Close stops it. A subscription joining
// while the reader blocks unblocks it (CLIENT UNBLOCK) so that it is
// read at once.
type tails struct {
	s      *Store
	client *redis.Client

	mu sync.Mutex // guards the fields below
	// subs are the subscriptions by session id.
	subs map[string]map[*tailSub]struct{}
	// running: the reader goroutine is running (wg counts it).
	running bool
	// connID is the CLIENT ID of the reader's connection, 0 while it has
	// none; gen counts the reader's reads, to tell whether one began
	// since a subscription joined.
	connID int64
	gen    uint64
	wg     sync.WaitGroup

	// wakeup (one token) ends the reader's pause early.
	wakeup chan struct{}
}

// tailMailbox is how many entries a subscription's mailbox holds before
// it is paused.
const tailMailbox = 4 * tailBatch

// tailSub is one Tail's subscription.
type tailSub struct {
	id   string
	wake chan struct{} // one token: mail, err or an unpause to look at

	mu sync.Mutex // guards the fields below
	// after is the latest seq put in the mailbox (or the Tail's start).
	after uint64
	mail  []buffer.Entry
	// paused: the mailbox is full; the reader leaves the session out for
	// this subscription until its Tail empties it.
	paused bool
	// err ends the Tail: the entries it needs next are gone.
	err error
}

func (sub *tailSub) signal() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

// push hands sub the entries of its session that follow its position,
// read after seq from: a sub behind from (it joined after the read was
// sent) is left for the next read, which starts at its position.
func (sub *tailSub) push(from uint64, entries []buffer.Chained) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.paused || sub.err != nil || sub.after < from {
		return
	}
	i := 0
	for i < len(entries) && entries[i].Seq <= sub.after {
		i++
	}
	entries = entries[i:]
	if len(entries) == 0 {
		return
	}
	if entries[0].Seq != sub.after+1 {
		sub.err = fmt.Errorf("redisstore: tail session %s: next is seq %d, want %d: %w", sub.id, entries[0].Seq, sub.after+1, buffer.ErrGap)
	} else {
		for _, e := range entries {
			sub.mail = append(sub.mail, e.Entry)
		}
		sub.after = entries[len(entries)-1].Seq
		sub.paused = len(sub.mail) >= tailMailbox
	}
	sub.signal()
}

// take empties sub's mailbox; unpaused reports that it was paused (the
// reader must be told).
func (sub *tailSub) take() (mail []buffer.Entry, err error, unpaused bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	mail, sub.mail = sub.mail, nil
	unpaused, sub.paused = sub.paused, false
	return mail, sub.err, unpaused
}

// subscribe adds sub, starting the reader if it is not running, and has
// the reader read its session at once. ErrClosed once the Store is
// closing.
func (t *tails) subscribe(sub *tailSub) error {
	t.mu.Lock()
	select {
	case <-t.s.stop:
		t.mu.Unlock()
		return fmt.Errorf("redisstore: tail session %s: %w", sub.id, ErrClosed)
	default:
	}
	if t.subs == nil {
		t.subs = make(map[string]map[*tailSub]struct{})
	}
	if t.subs[sub.id] == nil {
		t.subs[sub.id] = make(map[*tailSub]struct{})
	}
	t.subs[sub.id][sub] = struct{}{}
	if !t.running {
		t.running = true
		t.wg.Add(1)
		go t.run() // owned by t: Store.Close waits for wg
	}
	t.mu.Unlock()
	t.kick()
	return nil
}

func (t *tails) unsubscribe(sub *tailSub) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.subs[sub.id]; m != nil {
		delete(m, sub)
		if len(m) == 0 {
			delete(t.subs, sub.id)
		}
	}
}

// tailRetryMin and tailRetryMax bound the reader's pause after a failure.
const (
	tailRetryMin = 50 * time.Millisecond
	tailRetryMax = 2 * time.Second
)

// kickTries bounds how many times kick unblocks the reader: it retries
// only while the reader is between building its read and sending it.
const kickTries = 20

// kick makes the reader start a new read, from the positions as they are
// now: it unblocks the read in flight, if any began before the call.
func (t *tails) kick() {
	t.mu.Lock()
	gen := t.gen
	t.mu.Unlock()
	select {
	case t.wakeup <- struct{}{}:
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range kickTries {
		t.mu.Lock()
		id, moved, running := t.connID, t.gen > gen, t.running
		t.mu.Unlock()
		if !running || moved {
			return // a read that began after the call has the positions
		}
		if id != 0 {
			if n, err := t.client.ClientUnblock(ctx, id).Result(); err != nil || n == 1 {
				return // unblocked (or Redis is away: the reader retries on its own)
			}
		}
		// Not blocked yet (or reconnecting): its read may have been
		// built before the call. Try again in a moment.
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return
		case <-t.s.stop:
			return
		}
	}
}

// run is the reader.
func (t *tails) run() {
	defer t.wg.Done()
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	ctx := context.Background()
	// retry is the pause before the next try after a failure: doubled at
	// each failure in a row (up to tailRetryMax), so that an outage of
	// Redis costs a log line every few seconds, not twenty a second.
	retry := tailRetryMin
	failed := func() bool {
		ok := t.pause(retry)
		retry = min(2*retry, tailRetryMax)
		return ok
	}
	for {
		streams, ids, from, ok := t.positions(conn != nil)
		if !ok {
			return
		}
		select {
		case <-t.s.stop:
			t.stopped()
			return
		default:
		}
		if conn == nil {
			conn = t.client.Conn()
			id, err := conn.ClientID(ctx).Result()
			if err != nil {
				conn.Close()
				conn = nil
				t.s.log.Warn("redisstore: the tails' reader cannot reach Redis, retrying", "err", err, "in", retry)
				if !failed() {
					t.stopped()
					return
				}
				continue
			}
			t.mu.Lock()
			t.connID = id
			t.mu.Unlock()
			retry = tailRetryMin
			continue // positions again, now that kicks can reach it
		}
		if len(streams) == 0 {
			// Every subscription paused: wait for one to catch up.
			if !t.pause(t.s.opt.TailBlock) {
				t.stopped()
				return
			}
			continue
		}
		res, err := conn.XRead(ctx, &redis.XReadArgs{
			Streams: append(streams, ids...),
			Count:   tailBatch,
			Block:   t.s.opt.TailBlock,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue // nothing new, or unblocked: read again
		case err != nil:
			t.s.log.Warn("redisstore: the tails' read failed, reading again on a new connection", "err", err, "in", retry)
			conn.Close()
			conn = nil
			t.mu.Lock()
			t.connID = 0
			t.mu.Unlock()
			if !failed() {
				t.stopped()
				return
			}
			continue
		}
		for _, st := range res {
			t.deliver(st, from)
		}
	}
}

// positions returns the streams to read and the position of each: the
// lowest of its session's subscriptions not paused (ids, and from by
// stream). It counts a read (gen) when the reader has a connection. ok is
// false when the reader has no subscriptions left: it then ends (running
// is cleared).
func (t *tails) positions(connected bool) (streams, ids []string, from map[string]uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.subs) == 0 {
		t.running, t.connID = false, 0
		return nil, nil, nil, false
	}
	from = make(map[string]uint64, len(t.subs))
	if connected {
		t.gen++
	}
	for id, subs := range t.subs {
		if low, found := lowest(subs); found {
			key := keysOf(id)[1]
			streams = append(streams, key)
			ids = append(ids, strconv.FormatUint(low, 10)+"-0")
			from[key] = low
		}
	}
	return streams, ids, from, true
}

// lowest is the lowest position of subs not paused nor ended; found is
// false when there is none. The caller holds the lock that guards subs.
func lowest(subs map[*tailSub]struct{}) (low uint64, found bool) {
	for sub := range subs {
		sub.mu.Lock()
		if !sub.paused && sub.err == nil && (!found || sub.after < low) {
			low, found = sub.after, true
		}
		sub.mu.Unlock()
	}
	return low, found
}

// deliver hands a stream's entries, read after from[stream], to its
// session's subscriptions.
func (t *tails) deliver(st redis.XStream, from map[string]uint64) {
	id, ok := sessionOfEvents(st.Stream)
	read, known := from[st.Stream]
	if !ok || !known {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	deliverTo(t.subs[id], id, read, st.Messages)
}

// deliverTo hands subs, the subscriptions of session id, its entries
// read after read; the caller holds the lock that guards subs.
func deliverTo(subs map[*tailSub]struct{}, id string, read uint64, msgs []redis.XMessage) {
	entries, err := parseEntries(msgs, read+1)
	for sub := range subs {
		if err != nil {
			sub.mu.Lock()
			if sub.err == nil {
				sub.err = fmt.Errorf("redisstore: tail session %s: %w", id, err)
				sub.signal()
			}
			sub.mu.Unlock()
			continue
		}
		sub.push(read, entries)
	}
}

// sessionOfEvents is the session id of an events key (keysOf).
func sessionOfEvents(key string) (string, bool) {
	const prefix, suffix = "baton:{", "}:events"
	if len(key) < len(prefix)+len(suffix) || key[:len(prefix)] != prefix || key[len(key)-len(suffix):] != suffix {
		return "", false
	}
	return key[len(prefix) : len(key)-len(suffix)], true
}

// pause waits d, or until a kick; false when the Store is closing.
func (t *tails) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.wakeup:
		return true
	case <-t.s.stop:
		return false
	}
}

// stopped clears running as the reader ends for the Store's Close.
func (t *tails) stopped() {
	t.mu.Lock()
	t.running, t.connID = false, 0
	t.mu.Unlock()
}

// resume reads again, sub's session among the others.
func (t *tails) resume(*tailSub) { t.kick() }

// close stops the reader and waits for it; the Store's stop is closed.
func (t *tails) close() {
	t.kick()
	t.wg.Wait()
}

// tailShared is Tail through the Store's one reader.
func (s *Store) tailShared(ctx context.Context, id string, after uint64, check func(after uint64) error, fn func([]buffer.Entry) error) error {
	sub := &tailSub{id: id, after: after, wake: make(chan struct{}, 1)}
	if err := s.tails.subscribe(sub); err != nil {
		return err
	}
	defer s.tails.unsubscribe(sub)
	idle := time.NewTimer(s.opt.TailBlock)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisstore: tail session %s: %w", id, ctx.Err())
		case <-s.stop:
			return fmt.Errorf("redisstore: tail session %s: %w", id, ErrClosed)
		case <-idle.C:
			// Nothing new for a while: is the session still there, and
			// still holding what follows after?
			if err := check(after); err != nil {
				return err
			}
			idle.Reset(s.opt.TailBlock)
		case <-sub.wake:
			mail, err, unpaused := sub.take()
			if unpaused {
				s.tails.resume(sub)
			}
			if len(mail) > 0 {
				if err := fn(mail); err != nil {
					return err
				}
				after = mail[len(mail)-1].Seq
				idle.Reset(s.opt.TailBlock)
			}
			if err != nil {
				return err
			}
		}
	}
}
