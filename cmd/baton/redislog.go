package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisLogger passes go-redis's own log lines — its connection pool's
// failed dials, for one — to Baton's logger, at warn with component=redis,
// so that they are JSON with --log-format json like every other line
// instead of go-redis's own "redis: …" lines on stderr.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	detail := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	l.log.WarnContext(ctx, "redis client", "component", "redis", "detail", detail)
}

// logRedisTo makes log go-redis's logger. go-redis has one for the whole
// process: where run is called more than once (tests), the last call's
// log has the lines of every client.
func logRedisTo(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }
