package main

import (
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
)

// TestRedisClientLogs: what the Redis client itself logs — here its pool's
// failed dials once Redis is gone — reaches Baton's log as a JSON line at
// warn with component=redis; no line of go-redis's own format is written.
func TestRedisClientLogs(t *testing.T) {
	rds := redistest.Start(t)
	n := startNode(t, "A", "127.0.0.1:0", rds.URL(), "--log-format", "json")
	rds.Kill(t) // the node's lease renewal, every second, now dials in vain

	var line map[string]any
	eventually(t, "a log line of the Redis client", func() bool {
		line = n.log.find(t, "redis client", map[string]any{"component": "redis", "level": "WARN"})
		return line != nil
	})
	if d, _ := line["detail"].(string); !strings.Contains(d, "dial") || strings.HasPrefix(d, "redis: ") {
		t.Errorf("detail %q, want go-redis's words about its dials, without its \"redis: \" prefix", d)
	}
	// records (in find) has failed the test already if any line was not
	// JSON; go-redis's own logger would have written "redis: 2026/…".
	for _, l := range strings.Split(n.log.String(), "\n") {
		if strings.HasPrefix(l, "redis: ") {
			t.Errorf("a line in go-redis's own format: %q", l)
		}
	}
}
