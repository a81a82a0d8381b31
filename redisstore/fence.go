package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// errBehind is the append script's BEHIND reply: the store holds less of
// the session than the ring made durable. The writer fences it.
var errBehind = errors.New("redisstore: the store holds less than the ring made durable")

// fence answers the append script's BEHIND reply to j (behind): Redis
// holds less of the session than the ring made durable, so it lost writes
// it had acknowledged — a Sentinel failover to a replica they had not
// reached, or a restart that lost the end of its append-only file. The
// seqs of the lost events were given to clients, so no other event may
// have them: fenceScript moves the store's position up to the ring's, as
// if the events between had been evicted, and the ring's flight can then
// be sent again as it is. A client that holds the lost events continues;
// one that does not resyncs (its events are gone, as after eviction).
// Never a gap, and never one seq with two events.
func (s *Store) fence(ctx context.Context, j job, behind error) error {
	f := strings.Fields(strings.TrimPrefix(behind.Error(), codeBehind))
	if len(f) == 0 || len(f) > 2 {
		return fmt.Errorf("redisstore: a BEHIND reply without a position: %w", behind)
	}
	last, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return fmt.Errorf("redisstore: a BEHIND reply without a position: %w", behind)
	}
	lastSum := ""
	if len(f) == 2 {
		lastSum = f[1]
	}
	r := j.r
	args := []any{s.opt.Node, s.opt.TTL.Milliseconds(), last, lastSum, j.from, j.fromSum, "0", 0}
	r.mu.Lock()
	if r.hasDurCp {
		args[6], args[7] = "1", r.durCpSeq
		for name, data := range r.durParts {
			args = append(args, cpField(name), data)
		}
	}
	r.mu.Unlock()
	lost, err := fenceScript.Run(ctx, s.client, r.keys[:], args...).Int64()
	if err != nil {
		return fmt.Errorf("fence lost writes: %w", err)
	}
	s.written.fences.Add(1)
	s.log.Warn("redisstore: Redis lost acknowledged writes of a session (a failover to a replica behind, or a restart that lost them); "+
		"their seqs are fenced off: a client that holds them goes on, one behind them resyncs",
		"session", r.id, "store_seq", last, "written_seq", j.from, "lost", lost)
	return nil
}
