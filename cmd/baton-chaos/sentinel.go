package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// With --sentinel, Redis is a Sentinel setup: a master and two replicas
// (each with its append-only file) and three sentinels (quorum 2), and
// the nodes' --redis-url is its failover URL. The nodes then reach the
// master the sentinels name directly, not through their fault proxies.

// masterName is the name the sentinels monitor.
const masterName = "chaos"

// failoverTimeout bounds a failover, from SENTINEL FAILOVER to every
// sentinel naming the new master and it answering as one, and the wait
// for a replica in sync before one.
const failoverTimeout = 60 * time.Second

// redisSet is the run's Redis: one server, a Sentinel setup, or a Redis
// Cluster (rediscluster.go).
type redisSet struct {
	servers   []*redisServer // the data servers: the first is the first master (but in a cluster)
	sentinels []*redisServer // none without --sentinel
	cluster   *clusterSet    // nil without --cluster
}

// startRedisSet starts the Redis of mode m (a cluster logs the steps of
// its faults to log); the set it returns, even with
// an error, is to be killed.
func startRedisSet(ctx context.Context, dir string, m redisMode, log io.Writer) (*redisSet, error) {
	if m == modeCluster {
		return startCluster(ctx, dir, log)
	}
	sentinel := m == modeSentinel
	rs := &redisSet{}
	add := func(name string, opt redisOptions, to *[]*redisServer) error {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		r, err := startRedis(ctx, d, opt)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*to = append(*to, r)
		return nil
	}
	if err := add("redis", redisOptions{}, &rs.servers); err != nil {
		return rs, err
	}
	if !sentinel {
		return rs, nil
	}
	master := rs.servers[0].addr()
	// Two replicas, as docs/scaling.md advises with --redis-replicas 1:
	// after a failover the new master has one at once, and a write
	// counts while the old master comes back.
	for _, name := range []string{"replica", "replica-2"} {
		if err := add(name, redisOptions{replicaOf: master}, &rs.servers); err != nil {
			return rs, err
		}
	}
	host, port, _ := net.SplitHostPort(master)
	conf := func(int) string {
		return fmt.Sprintf("sentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n", masterName, host, port)
	}
	for i := range 3 {
		if err := add(fmt.Sprintf("sentinel-%d", i+1), redisOptions{sentinel: conf}, &rs.sentinels); err != nil {
			return rs, err
		}
	}
	return rs, rs.waitReady(ctx)
}

// url is the nodes' --redis-url.
func (rs *redisSet) url() string {
	if rs.cluster != nil {
		return rs.cluster.url()
	}
	if len(rs.sentinels) == 0 {
		return "redis://" + rs.servers[0].addr() + "/0"
	}
	q := url.Values{"master_name": {masterName}}
	for _, s := range rs.sentinels[1:] {
		q.Add("addr", s.addr())
	}
	return "redis://" + rs.sentinels[0].addr() + "/0?" + q.Encode()
}

// master returns the server that is the master now: the one server, or
// the one the first sentinel names.
func (rs *redisSet) master(ctx context.Context) (*redisServer, error) {
	if len(rs.sentinels) == 0 {
		return rs.servers[0], nil
	}
	addr, err := masterOf(ctx, rs.sentinels[0])
	if err != nil {
		return nil, err
	}
	for _, s := range rs.servers {
		if s.addr() == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the sentinels name %s the master, none of the run's servers", addr)
}

// waitReady waits until every sentinel names the same master, knows its
// replicas, and every replica has caught up with it: a failover may be
// asked for.
func (rs *redisSet) waitReady(ctx context.Context) error {
	var caughtUp time.Time // since when every replica has been caught up, as far as seen
	return waitFor(ctx, "a master, its replicas caught up, and every sentinel knowing so", func(ctx context.Context) error {
		// In sync means caught up, not only linked: a replica's link is up
		// once its full resync is loaded, while the writes made during the
		// sync still stream to it. And what counts is what the sentinels
		// know, from an INFO of each replica up to 10 s old: a failover
		// asked for while they see a replica behind or elsewhere may
		// promote one that lacks writes its siblings had acknowledged (a
		// demoted master repointed a moment before), or find no replica
		// good enough and do nothing. So every replica must have reached
		// the master's offset (read first), and every sentinel must have
		// refreshed its view of every replica since that was first seen.
		began := time.Now()
		m, err := rs.master(ctx)
		if err == nil {
			err = rs.caughtUp(ctx, m)
		}
		if err != nil {
			caughtUp = time.Time{}
			return err
		}
		if caughtUp.IsZero() {
			caughtUp = began
		}
		for _, sen := range rs.sentinels {
			if addr, err := masterOf(ctx, sen); err != nil || addr != m.addr() {
				return fmt.Errorf("sentinel %s names %s (%v)", sen.addr(), addr, err)
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: sen.addr()})
			replicas, err := sc.Replicas(ctx, masterName).Result()
			sc.Close()
			if err != nil {
				return err
			}
			seen := map[string]map[string]string{}
			for _, r := range replicas {
				seen[r["name"]] = r
			}
			for _, s := range rs.servers {
				if s == m {
					continue
				}
				r := seen[s.addr()]
				if r == nil {
					return fmt.Errorf("sentinel %s: no replica %s", sen.addr(), s.addr())
				}
				if strings.Contains(r["flags"], "down") || strings.Contains(r["flags"], "disconnected") ||
					r["master-link-status"] != "ok" || r["master-port"] != strconv.Itoa(m.port) {
					return fmt.Errorf("sentinel %s: replica %s: %s, link %s to port %s", sen.addr(), s.addr(), r["flags"], r["master-link-status"], r["master-port"])
				}
				if age, err := strconv.ParseInt(r["info-refresh"], 10, 64); err != nil || time.Duration(age)*time.Millisecond >= time.Since(caughtUp) {
					return fmt.Errorf("sentinel %s: replica %s seen %sms ago, caught up %s ago", sen.addr(), s.addr(), r["info-refresh"], time.Since(caughtUp))
				}
			}
		}
		return nil
	})
}

// caughtUp checks that every server but m replicates m and has reached
// the offset m had when asked.
func (rs *redisSet) caughtUp(ctx context.Context, m *redisServer) error {
	offset, err := infoInt(ctx, m.addr(), "master_repl_offset")
	if err != nil {
		return err
	}
	for _, s := range rs.servers {
		if s == m {
			continue
		}
		if link, err := info(ctx, s.addr(), "master_link_status"); err != nil || link != "up" {
			return fmt.Errorf("replica %s: link %q (%v)", s.addr(), link, err)
		}
		if port, err := info(ctx, s.addr(), "master_port"); err != nil || port != strconv.Itoa(m.port) {
			return fmt.Errorf("replica %s: replicates port %q, not the master's (%v)", s.addr(), port, err)
		}
		if got, err := infoInt(ctx, s.addr(), "slave_repl_offset"); err != nil || got < offset {
			return fmt.Errorf("replica %s: at offset %d, the master at %d (%v)", s.addr(), got, offset, err)
		}
	}
	return nil
}

// infoInt returns one numeric field of a server's INFO.
func infoInt(ctx context.Context, addr, field string) (int64, error) {
	v, err := info(ctx, addr, field)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", addr, field, err)
	}
	return n, nil
}

// failover has the sentinels promote the replica (SENTINEL FAILOVER), once
// it is in sync, and waits until every sentinel names it and it answers as
// the master.
func (rs *redisSet) failover(ctx context.Context) error {
	if len(rs.sentinels) == 0 {
		return errors.New("no sentinels")
	}
	if err := rs.waitReady(ctx); err != nil {
		return err
	}
	old, err := rs.master(ctx)
	if err != nil {
		return err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: rs.sentinels[0].addr()})
	defer sc.Close()
	if err := sc.Failover(ctx, masterName).Err(); err != nil {
		return fmt.Errorf("SENTINEL FAILOVER: %w", err)
	}
	return waitFor(ctx, "the replica promoted", func(ctx context.Context) error {
		m, err := rs.master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return errors.New("the old master is still named")
		}
		for _, s := range rs.sentinels {
			if addr, err := masterOf(ctx, s); err != nil || addr != m.addr() {
				return fmt.Errorf("sentinel %s names %s (%v)", s.addr(), addr, err)
			}
		}
		if role, err := info(ctx, m.addr(), "role"); err != nil || role != "master" {
			return fmt.Errorf("%s is a %q (%v)", m.addr(), role, err)
		}
		return nil
	})
}

// all returns every server of the set.
func (rs *redisSet) all() []*redisServer {
	return append(append([]*redisServer(nil), rs.servers...), rs.sentinels...)
}

// kill kills every server of the set (and stops a cluster's fronts).
func (rs *redisSet) kill() {
	for _, s := range rs.all() {
		s.kill()
	}
	if rs.cluster != nil {
		rs.cluster.close()
	}
}

// masterOf asks sentinel s which server is the master.
func masterOf(ctx context.Context, s *redisServer) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr()})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, masterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: master %v", s.addr(), hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// info returns one field of a server's INFO.
func info(ctx context.Context, addr, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	text, err := c.Info(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in INFO", field)
}

// waitFor polls cond until it holds, or failoverTimeout passes.
func waitFor(ctx context.Context, what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, failoverTimeout)
	defer cancel()
	for {
		err := cond(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, err)
		case <-time.After(100 * time.Millisecond): // polling pace, not synchronisation
		}
	}
}
