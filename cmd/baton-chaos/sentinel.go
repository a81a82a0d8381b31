package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
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

// redisSet is the run's Redis: one server, or a Sentinel setup.
type redisSet struct {
	servers   []*redisServer // the data servers: the first is the first master
	sentinels []*redisServer // none without --sentinel
}

func startRedisSet(ctx context.Context, dir string, sentinel bool) (*redisSet, error) {
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
// replica, and the replica is in sync: a failover may be asked for.
func (rs *redisSet) waitReady(ctx context.Context) error {
	return waitFor(ctx, "a master, its replicas in sync, and every sentinel knowing them", func(ctx context.Context) error {
		m, err := rs.master(ctx)
		if err != nil {
			return err
		}
		for _, s := range rs.sentinels {
			if addr, err := masterOf(ctx, s); err != nil || addr != m.addr() {
				return fmt.Errorf("sentinel %s names %s (%v)", s.addr(), addr, err)
			}
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr()})
			replicas, err := sc.Replicas(ctx, masterName).Result()
			sc.Close()
			if err != nil {
				return err
			}
			good := 0
			for _, r := range replicas {
				if !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") {
					good++
				}
			}
			if good == 0 {
				return fmt.Errorf("sentinel %s knows no replica up", s.addr())
			}
		}
		for _, s := range rs.servers {
			if s == m {
				continue
			}
			if link, err := info(ctx, s.addr(), "master_link_status"); err != nil || link != "up" {
				return fmt.Errorf("replica %s: link %q (%v)", s.addr(), link, err)
			}
		}
		return nil
	})
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

// kill kills every server of the set.
func (rs *redisSet) kill() {
	for _, s := range rs.all() {
		s.kill()
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
