package redistest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of StartFailover monitor.
const MasterName = "mymaster"

// failoverTimeout bounds how long a failover may take, from the master's
// death or SENTINEL FAILOVER to every sentinel naming the new master.
const failoverTimeout = 60 * time.Second

// Failover is a Sentinel setup: a master, one replica of it and the
// sentinels that watch them, each a redis-server of its own on a free
// loopback port. The sentinels see the master down after 2s without an
// answer (down-after-milliseconds: long enough that a loaded machine does
// not fail over by itself) and a single one is enough to agree (quorum 1). Its methods are called from the test's goroutine.
type Failover struct {
	// Master and Replica are the servers as started: after a failover
	// the replica is the master.
	Master, Replica *Server
	Sentinels       []*Server
}

// StartFailover starts a master, a replica of it and n sentinels (at
// least one), and waits until every sentinel monitors the master and
// knows the replica, and the replica is in sync: a failover may be asked
// for at once. It skips t like Start does.
func StartFailover(t testing.TB, n int) *Failover {
	t.Helper()
	f := &Failover{Master: Start(t)}
	f.Replica = StartConfig(t, Config{ReplicaOf: f.Master.Addr()})
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %[1]s 2000\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 1\n", MasterName, f.Master.port)
	for range max(n, 1) {
		f.Sentinels = append(f.Sentinels, StartConfig(t, Config{sentinel: conf}))
	}
	f.waitFor(t, "the replica in sync and known to every sentinel", func(ctx context.Context) error {
		if err := inSync(ctx, f.Replica); err != nil {
			return err
		}
		for _, s := range f.Sentinels {
			if err := knowsReplica(ctx, s, f.Replica.Addr()); err != nil {
				return err
			}
		}
		return nil
	})
	return f
}

// URL returns the redis:// URL of the setup for go-redis's failover
// client (redis.ParseFailoverURL), as Baton's --redis-url takes it: the
// first sentinel's address, the others as addr parameters, and the
// master's name.
func (f *Failover) URL() string {
	q := url.Values{"master_name": {MasterName}}
	for _, s := range f.Sentinels[1:] {
		q.Add("addr", s.Addr())
	}
	return "redis://" + f.Sentinels[0].Addr() + "/0?" + q.Encode()
}

// MasterAddr asks the first sentinel which server is the master.
func (f *Failover) MasterAddr(ctx context.Context) (string, error) {
	return masterOf(ctx, f.Sentinels[0])
}

// Failover has the sentinels promote the replica (SENTINEL FAILOVER) and
// waits until every sentinel names it the master and it answers as one.
func (f *Failover) Failover(t testing.TB) {
	t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: f.Sentinels[0].Addr()})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := sc.Failover(ctx, MasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	f.WaitMaster(t, f.Replica)
}

// Cut stops the replica (Pause) and closes its replication link on the
// master: the writes the master acknowledges from now on reach it only.
// Every write the master had acknowledged when Cut was called is on the
// replica (WAIT); those in flight during the cut may be lost with the
// link — the replica's unread socket buffer is dropped should the dead
// master's host answer it with a reset. Kill the master, Continue the
// replica and wait for it to be promoted (WaitMaster) for the failover
// that loses them.
func (f *Failover) Cut(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: f.Master.Addr()})
	defer c.Close()
	// WAIT covers this connection's writes, and the replication stream is
	// in order: a write of its own first covers everyone's before it.
	if err := c.Set(ctx, "redistest:cut", "1", 0).Err(); err != nil {
		t.Fatalf("redistest: write before the cut: %v", err)
	}
	if n, err := c.Wait(ctx, 1, failoverTimeout).Result(); err != nil || n != 1 {
		t.Fatalf("redistest: WAIT for the replica before the cut: %d, %v", n, err)
	}
	f.Replica.Pause(t)
	if err := c.ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatalf("redistest: close the replica's link: %v", err)
	}
	f.waitFor(t, "the master without a replica", func(ctx context.Context) error {
		n, err := info(ctx, f.Master, "connected_slaves")
		if err != nil {
			return err
		}
		if n != "0" {
			return fmt.Errorf("the master has %s replicas", n)
		}
		return nil
	})
}

// WaitMaster waits until every sentinel names s the master and s answers
// as one (its role is master): after the master's death, say, or a
// Failover.
func (f *Failover) WaitMaster(t testing.TB, s *Server) {
	t.Helper()
	f.waitFor(t, s.Addr()+" the master", func(ctx context.Context) error {
		for _, sn := range f.Sentinels {
			addr, err := masterOf(ctx, sn)
			if err != nil {
				return err
			}
			if addr != s.Addr() {
				return fmt.Errorf("sentinel %s names %s the master", sn.Addr(), addr)
			}
		}
		role, err := info(ctx, s, "role")
		if err != nil {
			return err
		}
		if role != "master" {
			return fmt.Errorf("%s is a %s", s.Addr(), role)
		}
		return nil
	})
}

// waitFor polls cond until it holds, or fails t after failoverTimeout.
func (f *Failover) waitFor(t testing.TB, what string, cond func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(failoverTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waiting for %s: %v", what, err)
		}
		<-tick.C
	}
}

// masterOf asks sentinel s for the master's address.
func masterOf(ctx context.Context, s *Server) (string, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", s.Addr(), err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name answered %q", s.Addr(), hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// knowsReplica reports whether sentinel s lists addr among the master's
// replicas, up.
func knowsReplica(ctx context.Context, s *Server, addr string) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer sc.Close()
	replicas, err := sc.Replicas(ctx, MasterName).Result()
	if err != nil {
		return fmt.Errorf("sentinel %s: replicas: %w", s.Addr(), err)
	}
	for _, r := range replicas {
		if net.JoinHostPort(r["ip"], r["port"]) == addr && !strings.Contains(r["flags"], "down") &&
			!strings.Contains(r["flags"], "disconnected") {
			return nil
		}
	}
	return fmt.Errorf("sentinel %s does not list %s as a replica that is up (%v)", s.Addr(), addr, replicas)
}

// inSync reports whether replica s has its link to the master up.
func inSync(ctx context.Context, s *Server) error {
	link, err := info(ctx, s, "master_link_status")
	if err != nil {
		return err
	}
	if link != "up" {
		return fmt.Errorf("replica %s: master link %s", s.Addr(), link)
	}
	return nil
}

// info returns one field of s's INFO replication.
func info(ctx context.Context, s *Server, field string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	text, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("%s: info: %w", s.Addr(), err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no %s in INFO replication", s.Addr(), field)
}
