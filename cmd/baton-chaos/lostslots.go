package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Redis before 7.2.4 can lose a slot from a master's own configuration
// (redis/redis#12564, fixed in 7.2.4 and 7.4): a server's
// owner_not_claiming_slot mark (the slot's owner stopped claiming it,
// seen while slots move) is not cleared when the slot changes owner
// outside the gossip's update — when a replica takes its master's slots in
// a failover. Marked so, a slot of the promoted master counts as
// unclaimed, and when the old master rejoins claiming it from its stale
// configuration, the promoted master hands it over and, the old master
// being a replica now, is left with the slot unassigned in its own view
// while every other server says it serves it. Its cluster state is fail
// from then on (cluster-require-full-coverage): it answers CLUSTERDOWN
// to every command for every slot it serves, and nothing in the cluster
// repairs it. Seen in a ten-minute chaos run on Redis 7.0.15 (Debian 12's),
// after slots moved into a master that was then restarted and killed.
//
// The run then does what an operator would — CLUSTER ADDSLOTS of those
// slots on that master, once the state has lasted lostSlotGrace (it is
// never one the cluster passes through) — so that the rest of the run
// still says something of Baton, and reports it as a fault error: the
// run fails, saying why.

// lostSlotGrace is how long a master must be seen without slots every
// other server assigns it before they are given back.
const lostSlotGrace = 5 * time.Second

// owners is one server's view of which master serves each slot: its node
// id, "" for none.
func owners(view []clusterNode) []string {
	out := make([]string, 16384)
	for _, n := range view {
		for _, field := range n.slots {
			if strings.HasPrefix(field, "[") {
				continue // migrating or importing: not an owner
			}
			lo, hi, ok := strings.Cut(field, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b >= len(out) {
				continue
			}
			for s := a; s <= b; s++ {
				out[s] = n.id
			}
		}
	}
	return out
}

// lostSlots returns, by server, the slots every other server says it
// serves and it itself says nobody does.
func lostSlots(views [][]clusterNode) map[int][]int {
	ids := make([]string, len(views))
	of := make([][]string, len(views))
	for i, v := range views {
		of[i] = owners(v)
		for _, n := range v {
			if n.myself {
				ids[i] = n.id
			}
		}
	}
	lost := map[int][]int{}
	for i := range views {
		for s, owner := range of[i] {
			if owner != "" || ids[i] == "" {
				continue
			}
			all := len(views) > 1
			for j := range views {
				if j != i && of[j][s] != ids[i] {
					all = false
					break
				}
			}
			if all {
				lost[i] = append(lost[i], s)
			}
		}
	}
	return lost
}

// checkLost says which master has lost slots, if one has, and gives them
// back once they have been lost for lostSlotGrace.
func (cs *clusterSet) checkLost(ctx context.Context, views [][]clusterNode) error {
	lost := lostSlots(views)
	if len(lost) == 0 {
		cs.lostSince = nil
		return nil
	}
	if cs.lostSince == nil {
		cs.lostSince = map[string]time.Time{}
	}
	var why []string
	for i, slots := range lost {
		key := fmt.Sprintf("%d %v", i, slots)
		since, seen := cs.lostSince[key]
		if !seen {
			since = time.Now()
			cs.lostSince[key] = since
		}
		what := fmt.Sprintf("redis-%d serves slot %s in every other server's view and in none of its own", i+1, slotRanges(slots))
		why = append(why, what)
		if time.Since(since) < lostSlotGrace {
			continue
		}
		args := []any{"cluster", "addslots"}
		for _, s := range slots {
			args = append(args, s)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := cs.admin[i].Do(actx, args...).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("%s; CLUSTER ADDSLOTS: %w", what, err)
		}
		delete(cs.lostSince, key)
		d := fmt.Sprintf("Redis lost slots: %s (Redis before 7.2.4, redis/redis#12564) for %v; given back with CLUSTER ADDSLOTS",
			what, time.Since(since).Round(time.Second))
		cs.defects = append(cs.defects, d)
		cs.logf("%s", d)
	}
	slices.Sort(why)
	return fmt.Errorf("%s", strings.Join(why, "; "))
}

// slotRanges writes sorted slots as ranges: "189", "100-120,189".
func slotRanges(slots []int) string {
	var parts []string
	for i := 0; i < len(slots); {
		j := i
		for j+1 < len(slots) && slots[j+1] == slots[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(slots[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", slots[i], slots[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
