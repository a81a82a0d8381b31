package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnreplicated is a write's failure (retried) when fewer replicas than
// it needs acknowledged it in time (replicaSet).
var ErrUnreplicated = errors.New("redisstore: too few replicas acknowledged the write")

// replicaSet decides when a write counts with Options.Replicas (or
// NodeOptions.Replicas) > 0: once every replica the master has holds it,
// and at least min of them. Not just min: a failover promotes
// the replica the sentinels believe is furthest ahead, and their belief
// comes from INFO they polled up to ten seconds ago — a write that one of
// two replicas holds may be lost with the other's promotion (seen in
// baton-chaos: a replica 650 KB behind promoted while the other held
// every write that had counted).
//
// Each round trip ends with INFO replication, then WAIT: the INFO lists
// the replicas once the writes are done (replicasOf), and the WAIT
// (issued before its answer is known) waits for as many as the last INFO
// listed.
// A round trip whose WAIT heard from fewer than its own INFO names does
// not count, and the next waits for them all.
//
// A replica that leaves the list is still waited for, for hold: the
// number needed falls only once the master has listed fewer for that
// long. A failover begins so — the sentinels detach the replica they
// promote (REPLICAOF NO ONE), and for about a second, until they make the
// old master a replica too, it takes writes that its remaining replica
// acknowledges and that the promotion has already lost (seen in
// baton-chaos: one tool call repeated in ten minutes of failovers).
type replicaSet struct {
	min int
	// every: wait for every replica listed even with min 0
	// (Options.EveryReplica).
	every bool
	hold  time.Duration // 0: replicaHold; noHold: none

	mu     sync.Mutex
	listed int       // replicas the last INFO listed
	peak   int       // the most listed within hold
	peakAt time.Time // when the master last listed peak
}

// replicaHold is how long a replica that left the master's list is still
// waited for (replicaSet): longer than Sentinel takes from promoting a
// replica to reconfiguring the old master.
const replicaHold = 5 * time.Second

// noHold is a replicaSet's hold when a replica that leaves the list is
// not waited for.
const noHold = -1

// need returns how many replicas a write must reach: min, the replicas
// listed, and the most listed within hold, once the master lists listed
// at now.
func (rs *replicaSet) need(listed int, now time.Time) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	hold := rs.hold
	if hold == 0 {
		hold = replicaHold
	}
	rs.listed = listed
	if listed >= rs.peak || now.Sub(rs.peakAt) >= hold {
		rs.peak, rs.peakAt = listed, now
	}
	return max(rs.min, rs.peak)
}

// waits reports whether writes wait for replicas at all.
func (rs *replicaSet) waits() bool { return rs.min > 0 || rs.every }

// waitFor is how many replicas the next WAIT waits for.
func (rs *replicaSet) waitFor() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return max(rs.min, rs.listed, rs.peak)
}

// replicaRound is one round trip's INFO and WAIT.
type replicaRound struct {
	info, wait *redis.Cmd
	set        *replicaSet
}

// queue appends the round trip's INFO and WAIT to p, after its writes;
// timeout bounds the WAIT. With min 0 it queues nothing, and check
// passes.
func (rs *replicaSet) queue(ctx context.Context, p redis.Pipeliner, timeout time.Duration) replicaRound {
	if !rs.waits() {
		return replicaRound{}
	}
	want := rs.waitFor()
	return replicaRound{
		info: p.Do(ctx, "INFO", "replication"),
		wait: p.Do(ctx, "WAIT", want, timeout.Milliseconds()),
		set:  rs,
	}
}

// check returns nil when the round trip's writes count, or why not.
func (r replicaRound) check() error {
	if r.set == nil {
		return nil
	}
	text, err := r.info.Text()
	if err != nil {
		return fmt.Errorf("%w: INFO replication: %w", ErrUnreplicated, err)
	}
	want := r.set.need(replicasOf(text), time.Now())
	got, err := r.wait.Int64()
	if err != nil {
		return fmt.Errorf("%w: WAIT: %w", ErrUnreplicated, err)
	}
	if got < int64(want) {
		return fmt.Errorf("%w: %d of %d in time", ErrUnreplicated, got, want)
	}
	return nil
}

// replicasOf counts the replicas INFO replication lists
// (slaveN:ip=…,port=…,state=…), whatever their state. One in its full
// resync (wait_bgsave, send_bulk) cannot acknowledge a write yet, but it
// is waited for all the same: the writes made during its sync reach it
// only after, as a backlog it applies once online, and the sentinels may
// promote it before it has — a chaos run lost 216 KB of counted writes so,
// 200 ms after a replica's sync. A replica that dies drops off the list
// (its link closes, or the master's repl-timeout ends it).
func replicasOf(info string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		key, _, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		num, isSlave := strings.CutPrefix(key, "slave")
		if _, err := strconv.Atoi(num); ok && isSlave && err == nil {
			n++
		}
	}
	return n
}
