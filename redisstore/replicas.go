package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnreplicated is a write's failure (retried) when fewer replicas than
// it needs acknowledged it in time (replicaSet).
var ErrUnreplicated = errors.New("redisstore: too few replicas acknowledged the write")

// replicaSet decides when a write counts with Options.Replicas (or
// NodeOptions.Replicas) > 0: once every replica the master has online
// holds it, and at least min of them. Not just min: a failover promotes
// the replica the sentinels believe is furthest ahead, and their belief
// comes from INFO they polled up to ten seconds ago — a write that one of
// two replicas holds may be lost with the other's promotion (seen in
// baton-chaos: a replica 650 KB behind promoted while the other held
// every write that had counted).
//
// Each round trip ends with INFO replication, then WAIT: the INFO names
// the replicas online once the writes are done, and the WAIT (issued
// before its answer is known) waits for as many as the last INFO named.
// A round trip whose WAIT heard from fewer than its own INFO names does
// not count, and the next waits for them all.
type replicaSet struct {
	min    int
	online atomic.Int64 // replicas online in the last INFO
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
	if rs.min <= 0 {
		return replicaRound{}
	}
	want := max(int64(rs.min), rs.online.Load())
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
	online := onlineReplicas(text)
	r.set.online.Store(int64(online))
	got, err := r.wait.Int64()
	if err != nil {
		return fmt.Errorf("%w: WAIT: %w", ErrUnreplicated, err)
	}
	if want := max(r.set.min, online); got < int64(want) {
		return fmt.Errorf("%w: %d of %d in time", ErrUnreplicated, got, want)
	}
	return nil
}

// onlineReplicas counts the replicas INFO replication lists as online
// (slaveN:ip=…,port=…,state=online,…): one still in its full resync
// (wait_bgsave, send_bulk) cannot acknowledge a write yet, and gets every
// write done before its sync began with it.
func onlineReplicas(info string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		key, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		num, isSlave := strings.CutPrefix(key, "slave")
		if _, err := strconv.Atoi(num); !ok || !isSlave || err != nil {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if f == "state=online" {
				n++
				break
			}
		}
	}
	return n
}
