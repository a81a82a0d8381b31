package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURLForms is what --redis-url takes, for its errors and help.
const redisURLForms = "redis://[:password@]host:port/db for one server, " +
	"redis://[:password@]sentinel:port/db?master_name=NAME[&addr=sentinel2:port…] for a Sentinel setup, or " +
	"redis://[:password@]node:port[?addr=node2:port…] naming any nodes of a Redis Cluster; rediss:// for TLS"

// redisConn is where --redis-url says Redis is.
type redisConn struct {
	single   *redis.Options         // one server
	failover *redis.FailoverOptions // or a Sentinel setup
	cluster  *redis.ClusterOptions  // or a Redis Cluster
	url      string                 // --redis-url, for a cluster found by asking (asCluster)
}

// parseRedisURL reads --redis-url: a URL with a master_name parameter
// names the sentinels of a Sentinel setup (the host, and an addr
// parameter per other sentinel), which go-redis's failover client asks
// for the master, following it through a failover; one with addr
// parameters and no master_name names nodes of a Redis Cluster; any other
// names one server — or one node of a cluster, which connect finds out.
//
// Its errors never quote the URL, which may hold a password.
func parseRedisURL(s string) (redisConn, error) {
	u, err := url.Parse(s)
	if err != nil {
		return redisConn{}, unquoted(err)
	}
	// RESP2 unless the URL asks otherwise (?protocol=3): Baton uses no
	// RESP3 push notification, and a RESP3 client peeks at its connection
	// for one before every command — a read syscall each, 7 % of a
	// node's CPU in a takeover storm (docs/performance.md).
	resp2 := !u.Query().Has("protocol")
	switch {
	case !u.Query().Has("master_name") && u.Query().Has("addr"):
		return parseClusterURL(u, s, resp2)
	case !u.Query().Has("master_name"):
		opt, err := redis.ParseURL(s)
		if err == nil && resp2 {
			opt.Protocol = 2
		}
		return redisConn{single: opt, url: s}, unquoted(err)
	}
	opt, err := redis.ParseFailoverURL(s)
	if err != nil {
		return redisConn{}, unquoted(err)
	}
	if resp2 {
		opt.Protocol = 2
	}
	if opt.MasterName == "" {
		return redisConn{}, fmt.Errorf("master_name is empty: name the master the sentinels monitor")
	}
	return redisConn{failover: opt}, nil
}

// parseClusterURL reads a URL naming nodes of a Redis Cluster (go-redis's
// cluster URL: the host, and an addr parameter per other node).
func parseClusterURL(u *url.URL, s string, resp2 bool) (redisConn, error) {
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return redisConn{}, fmt.Errorf("database %s: a Redis Cluster has only database 0", db)
	}
	opt, err := redis.ParseClusterURL(s)
	if err != nil {
		return redisConn{}, unquoted(err)
	}
	if resp2 {
		opt.Protocol = 2
	}
	return redisConn{cluster: opt}, nil
}

// isCluster asks the server rdb names whether it is a node of a Redis
// Cluster (INFO cluster: cluster_enabled:1).
func isCluster(ctx context.Context, rdb *redis.Client) (bool, error) {
	info, err := rdb.Info(ctx, "cluster").Result()
	if err != nil {
		return false, fmt.Errorf("INFO cluster: %w", err)
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

// asCluster is rc, naming one node of a Redis Cluster, as the cluster.
func (rc redisConn) asCluster() (redisConn, error) {
	u, err := url.Parse(rc.url)
	if err != nil {
		return redisConn{}, unquoted(err)
	}
	return parseClusterURL(u, rc.url, !u.Query().Has("protocol"))
}

// dialling is rc with every connection dialled by dial (dialRedisKey).
func (rc redisConn) dialling(dial func(context.Context, string, string) (net.Conn, error)) redisConn {
	switch {
	case rc.cluster != nil:
		opt := *rc.cluster
		opt.Dialer = dial
		rc.cluster = &opt
	case rc.failover != nil:
		opt := *rc.failover
		opt.Dialer = dial
		rc.failover = &opt
	default:
		opt := *rc.single
		opt.Dialer = dial
		rc.single = &opt
	}
	return rc
}

// unquoted is err without the URL a *url.Error quotes.
func unquoted(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("not a URL: %w", ue.Err)
	}
	return err
}

// client returns a client of the Redis rc names.
func (rc redisConn) client() redis.UniversalClient {
	switch {
	case rc.cluster != nil:
		return redis.NewClusterClient(rc.cluster)
	case rc.failover != nil:
		return redis.NewFailoverClient(rc.failover)
	}
	return redis.NewClient(rc.single)
}

// String names the Redis for the log: an address, the master's name and
// its sentinels, or the cluster's nodes named. It carries no password.
func (rc redisConn) String() string {
	switch {
	case rc.cluster != nil:
		return "the Redis Cluster of " + strings.Join(rc.cluster.Addrs, ",")
	case rc.failover != nil:
		return fmt.Sprintf("master %q of sentinels %s", rc.failover.MasterName, strings.Join(rc.failover.SentinelAddrs, ","))
	}
	return rc.single.Addr
}

// replicasFor is --redis-replicas (min), or when it was left unset: 1
// for a Sentinel setup, whose failover would otherwise lose what the
// master acknowledged and the replica had not yet; every replica the
// master lists (every), none needed, for a Redis Cluster, whose failover
// leaves the promoted master without a replica until its old master is
// back (redisstore.Options.EveryReplica); 0 for one server.
func (c config) replicasFor(rc redisConn) (min int, every bool) {
	if _, set := c.from["redis-replicas"]; set {
		return c.redisReplicas, false
	}
	switch {
	case rc.failover != nil:
		return 1, false
	case rc.cluster != nil:
		return 0, true
	}
	return c.redisReplicas, false
}

// reach finds out what rc names when it names one server: a node of a
// Redis Cluster is used as the cluster it belongs to (every node knows
// the others). A server that does not answer is an error naming it.
func reach(ctx context.Context, rc redisConn) (redisConn, error) {
	if rc.single == nil {
		return rc, nil
	}
	one := redis.NewClient(rc.single)
	defer one.Close()
	cluster, err := isCluster(ctx, one)
	if err != nil {
		return rc, fmt.Errorf("reach Redis at %s: %w", rc, err)
	}
	if !cluster {
		return rc, nil
	}
	return rc.asCluster()
}
