package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURLForms is what --redis-url takes, for its errors and help.
const redisURLForms = "redis://[:password@]host:port/db for one server, or " +
	"redis://[:password@]sentinel:port/db?master_name=NAME[&addr=sentinel2:port…] for a Sentinel setup; rediss:// for TLS"

// redisConn is where --redis-url says Redis is.
type redisConn struct {
	single   *redis.Options         // one server
	failover *redis.FailoverOptions // or a Sentinel setup
}

// parseRedisURL reads --redis-url: a URL with a master_name parameter
// names the sentinels of a Sentinel setup (the host, and an addr
// parameter per other sentinel), which go-redis's failover client asks
// for the master, following it through a failover; any other names one
// server.
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
	if !u.Query().Has("master_name") {
		opt, err := redis.ParseURL(s)
		if err == nil && resp2 {
			opt.Protocol = 2
		}
		return redisConn{single: opt}, unquoted(err)
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

// unquoted is err without the URL a *url.Error quotes.
func unquoted(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("not a URL: %w", ue.Err)
	}
	return err
}

// client returns a client of the Redis rc names.
func (rc redisConn) client() *redis.Client {
	if rc.failover != nil {
		return redis.NewFailoverClient(rc.failover)
	}
	return redis.NewClient(rc.single)
}

// String names the Redis for the log: an address, or the master's name
// and its sentinels. It carries no password.
func (rc redisConn) String() string {
	if rc.failover != nil {
		return fmt.Sprintf("master %q of sentinels %s", rc.failover.MasterName, strings.Join(rc.failover.SentinelAddrs, ","))
	}
	return rc.single.Addr
}

// replicasFor is --redis-replicas, or when it was left unset 1 for a
// Sentinel setup, whose failover would otherwise lose what the master
// acknowledged and the replica had not yet, and 0 for one server.
func (c config) replicasFor(rc redisConn) int {
	if _, set := c.from["redis-replicas"]; set || rc.failover == nil {
		return c.redisReplicas
	}
	return 1
}
