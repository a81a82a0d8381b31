package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
)

// Loaded is what OpenRing read of a session besides its ring.
type Loaded struct {
	Info
	// Checkpoint is the latest checkpoint written (nil if none), as of
	// Info.CheckpointSeq: Ring.Checkpoint's data.
	Checkpoint []byte
	// CheckpointParts is the latest checkpoint written in parts
	// (Ring.CheckpointParts), by name; nil if none.
	CheckpointParts map[string][]byte
}

// OpenRing reads a session from Redis — its meta and every entry it
// holds, in one atomic snapshot — and rebuilds its ring: Since, Checksum
// and Last answer as the writer's ring did for everything Redis retains,
// and Durable is the last seq. It does not change the owner: the ring
// writes only once this node owns the session (Claim, before OpenRing).
// ErrNotFound if the session is not there.
func (s *Store) OpenRing(ctx context.Context, id string, cb Callbacks) (*Ring, Loaded, error) {
	k := keysOf(id)
	var meta *redis.MapStringStringCmd
	var stream *redis.XMessageSliceCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, k[0])
		stream = p.XRange(ctx, k[1], "-", "+")
		return nil
	})
	if err != nil {
		return nil, Loaded{}, fmt.Errorf("redisstore: open session %s: %w", id, err)
	}
	m := meta.Val()
	info, err := parseInfo(m)
	if err != nil {
		return nil, Loaded{}, fmt.Errorf("redisstore: open session %s: %w", id, err)
	}
	entries, err := parseEntries(stream.Val(), info.BaseSeq+1)
	if err != nil {
		return nil, Loaded{}, fmt.Errorf("redisstore: open session %s: %w", id, err)
	}
	mem, err := buffer.RestoreMemory(info.Capacity, info.BaseSeq, m["base_sum"], entries)
	if err != nil {
		return nil, Loaded{}, fmt.Errorf("redisstore: open session %s: %w", id, err)
	}
	if last, sum, _ := mem.Last(ctx); last != info.LastSeq || sum != m["last_sum"] {
		return nil, Loaded{}, fmt.Errorf("redisstore: open session %s: the stream ends at seq %d, meta says %d",
			id, last, info.LastSeq)
	}
	r := s.newRing(id, mem, cb)
	r.durSeq, r.durSum = info.LastSeq, m["last_sum"]
	r.ackQueued = info.AckSeq
	loaded := Loaded{Info: info}
	for f, v := range m {
		switch {
		case f == "cp":
			loaded.Checkpoint = []byte(v)
		case strings.HasPrefix(f, "cp:"):
			if loaded.CheckpointParts == nil {
				loaded.CheckpointParts = make(map[string][]byte)
			}
			loaded.CheckpointParts[f[len("cp:"):]] = []byte(v)
		}
	}
	return r, loaded, nil
}

// Page is what Read returns.
type Page struct {
	// Entries follow the seq asked for, in order.
	Entries []buffer.Entry
	// AfterSum is c(after): what a client that holds everything up to
	// after has as its state checksum.
	AfterSum string
	// Last is the latest seq Redis holds, and LastSum its checksum; more
	// entries follow the page when Last is past its end.
	Last    uint64
	LastSum string
}

// Read returns up to count entries (count ≤ 0: all) with seqs after
// after, from what Redis holds — any node may call it. Like buffer.Ring's
// Since: ErrGap when some of them are gone (evicted or acked), ErrAhead
// when after is past the last seq Redis holds, ErrNotFound when the
// session is not there. Redis holds the durable prefix of a live
// session, so Read may lag its owner's ring.
func (s *Store) Read(ctx context.Context, id string, after uint64, count int) (Page, error) {
	k := keysOf(id)
	// Inclusive of after, to learn c(after) in the same snapshot.
	var meta *redis.SliceCmd
	var stream *redis.XMessageSliceCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HMGet(ctx, k[0], "owner", "last_seq", "last_sum", "base_seq", "base_sum")
		start := strconv.FormatUint(after, 10) + "-0"
		if count > 0 {
			stream = p.XRangeN(ctx, k[1], start, "+", int64(count)+1)
		} else {
			stream = p.XRange(ctx, k[1], start, "+")
		}
		return nil
	})
	if err != nil {
		return Page{}, fmt.Errorf("redisstore: read session %s: %w", id, err)
	}
	pos, err := parsePosition(meta.Val())
	if err != nil {
		return Page{}, fmt.Errorf("redisstore: read session %s: %w", id, err)
	}
	if err := pos.check(after); err != nil {
		return Page{}, err
	}
	entries, err := parseEntries(stream.Val(), after)
	if err != nil {
		return Page{}, fmt.Errorf("redisstore: read session %s: %w", id, err)
	}
	page := Page{Last: pos.last, LastSum: pos.lastSum}
	switch {
	case len(entries) > 0 && entries[0].Seq == after:
		page.AfterSum = entries[0].Sum
		entries = entries[1:]
	case after == pos.base:
		page.AfterSum = pos.baseSum
	default:
		return Page{}, fmt.Errorf("redisstore: read session %s: seq %d is neither held nor the base %d", id, after, pos.base)
	}
	// count+1 entries hold count events after after at least.
	if count > 0 && len(entries) > count {
		entries = entries[:count]
	}
	if len(entries) > 0 && entries[0].Seq != after+1 {
		return Page{}, fmt.Errorf("redisstore: read session %s: seq %d follows %d", id, entries[0].Seq, after)
	}
	page.Entries = make([]buffer.Entry, len(entries))
	for i, e := range entries {
		page.Entries[i] = e.Entry
	}
	return page, nil
}

// tailBatch is how many entries one read of Tail returns at most.
const tailBatch = 256

// Tail calls fn with the entries after after, in order, each once, as they
// reach Redis, until ctx is done (it returns an error wrapping ctx.Err()),
// fn fails (its error), the entries fn needs next are gone (ErrGap: fn
// fell more than the ring's capacity behind, or they were acked), or the
// session leaves Redis (ErrNotFound). ErrAhead when after is past the last
// seq Redis holds.
//
// The Store's Tails share one connection, blocked in one XREAD for all of
// them (tails.go), when Options.TailClient is a *redis.Client, and one
// reader per master (shardtails.go) when it is a *redis.ClusterClient;
// fn runs on
// Tail's goroutine, and a slow fn holds up no other Tail. A session
// without a new entry for Options.TailBlock is checked (still there,
// still holding what follows). ErrClosed once the Store closes.
func (s *Store) Tail(ctx context.Context, id string, after uint64, fn func([]buffer.Entry) error) error {
	k := keysOf(id)
	c := s.opt.TailClient
	checkAt := func(after uint64) error {
		v, err := c.HMGet(ctx, k[0], "owner", "last_seq", "last_sum", "base_seq", "base_sum").Result()
		if err != nil {
			return fmt.Errorf("redisstore: tail session %s: %w", id, err)
		}
		pos, err := parsePosition(v)
		if err != nil {
			return fmt.Errorf("redisstore: tail session %s: %w", id, err)
		}
		return pos.check(after)
	}
	if err := checkAt(after); err != nil {
		return err
	}
	if s.tails != nil {
		return s.tailShared(ctx, id, after, checkAt, fn)
	}
	// Another client (a ring, say): this Tail blocks on a connection of
	// its own, for up to TailBlock at a time (it notices a done ctx that
	// much late).
	check := func() error { return checkAt(after) }
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("redisstore: tail session %s: %w", id, err)
		}
		res, err := c.XRead(ctx, &redis.XReadArgs{
			Streams: []string{k[1], strconv.FormatUint(after, 10) + "-0"},
			Count:   tailBatch,
			Block:   s.opt.TailBlock,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			// Nothing new for a while: is the session still there, and
			// still holding what follows after?
			if err := check(); err != nil {
				return err
			}
			continue
		case err != nil:
			if ctx.Err() != nil {
				return fmt.Errorf("redisstore: tail session %s: %w", id, ctx.Err())
			}
			return fmt.Errorf("redisstore: tail session %s: %w", id, err)
		}
		var msgs []redis.XMessage
		for _, st := range res {
			msgs = append(msgs, st.Messages...)
		}
		entries, err := parseEntries(msgs, after+1)
		if err != nil {
			return fmt.Errorf("redisstore: tail session %s: %w", id, err)
		}
		if len(entries) == 0 {
			continue
		}
		if entries[0].Seq != after+1 {
			return fmt.Errorf("redisstore: tail session %s: next is seq %d, want %d: %w", id, entries[0].Seq, after+1, buffer.ErrGap)
		}
		out := make([]buffer.Entry, len(entries))
		for i, e := range entries {
			out[i] = e.Entry
		}
		if err := fn(out); err != nil {
			return err
		}
		after = entries[len(entries)-1].Seq
	}
}

// position is a session's retained range, from its meta.
type position struct {
	last, base       uint64
	lastSum, baseSum string
}

// parsePosition reads HMGET owner last_seq last_sum base_seq base_sum;
// ErrNotFound when the session is not there.
func parsePosition(v []any) (position, error) {
	if len(v) != 5 || v[0] == nil {
		return position{}, ErrNotFound
	}
	str := func(x any) string { s, _ := x.(string); return s }
	var p position
	var err error
	if p.last, err = strconv.ParseUint(str(v[1]), 10, 64); err != nil {
		return position{}, fmt.Errorf("meta last_seq: %w", err)
	}
	if p.base, err = strconv.ParseUint(str(v[3]), 10, 64); err != nil {
		return position{}, fmt.Errorf("meta base_seq: %w", err)
	}
	p.lastSum, p.baseSum = str(v[2]), str(v[4])
	return p, nil
}

// check is ErrAhead or ErrGap for a reader holding everything up to after.
func (p position) check(after uint64) error {
	switch {
	case after > p.last:
		return buffer.ErrAhead
	case after < p.base:
		return buffer.ErrGap
	}
	return nil
}

// parseEntries reads the events of stream entries, in seq order, from
// seq from on: an entry holds those of one write (appendScript), its ID
// "last-0" and each event a field, its seq, whose value is its record,
// c(seq) (64 hex digits) then the frame; an entry of an earlier version
// holds one event, its ID "seq-0" and its fields d (the frame) and c.
func parseEntries(msgs []redis.XMessage, from uint64) ([]buffer.Chained, error) {
	out := make([]buffer.Chained, 0, len(msgs))
	for _, m := range msgs {
		idStr, _, _ := strings.Cut(m.ID, "-")
		id, err := strconv.ParseUint(idStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("stream entry %s: %w", m.ID, err)
		}
		if d, ok := m.Values["d"].(string); ok {
			c, ok := m.Values["c"].(string)
			if !ok {
				return nil, fmt.Errorf("stream entry %s lacks c", m.ID)
			}
			if id >= from {
				out = append(out, buffer.Chained{Entry: buffer.Entry{Seq: id, Data: []byte(d)}, Sum: c})
			}
			continue
		}
		start := len(out)
		for f, v := range m.Values {
			seq, err := strconv.ParseUint(f, 10, 64)
			rec, ok := v.(string)
			switch {
			case err != nil || seq > id || seq+uint64(len(m.Values)) <= id:
				return nil, fmt.Errorf("stream entry %s holds a field %q", m.ID, f)
			case !ok || len(rec) < checksumLen:
				return nil, fmt.Errorf("stream entry %s: the record of seq %d is short", m.ID, seq)
			case seq >= from:
				out = append(out, buffer.Chained{Entry: buffer.Entry{Seq: seq, Data: []byte(rec[checksumLen:])}, Sum: rec[:checksumLen]})
			}
		}
		// Distinct and none outside id-len+1 … id: those seqs, each once.
		slices.SortFunc(out[start:], func(a, b buffer.Chained) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return out, nil
}

// checksumLen is the length of a checksum c(n), n > 0, in hex.
const checksumLen = 64
