package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// attachScript records ARGV[1] as the session's connection and returns the
// one it replaces ("" for none).
//
// KEYS: meta.
var attachScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOSESSION session is not in the store')
end
local prev = redis.call('HGET', KEYS[1], 'conn') or ''
redis.call('HSET', KEYS[1], 'conn', ARGV[1])
return prev
`)

// detachScript clears the session's connection if it is still ARGV[1].
//
// KEYS: meta.
var detachScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'conn') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'conn')
  return 1
end
return 0
`)

// Attach records conn (any string naming a connection across the
// cluster) as the session's connection and returns the one it replaces,
// "" for none; ErrNotFound if the session is not there.
func (s *Store) Attach(ctx context.Context, id, conn string) (string, error) {
	k := keysOf(id)
	prev, err := attachScript.Run(ctx, s.client, k[:1], conn).Text()
	if err != nil {
		return "", fmt.Errorf("redisstore: attach to %s: %w", id, scriptError(err))
	}
	return prev, nil
}

// Detach clears the session's connection if it is still conn.
func (s *Store) Detach(ctx context.Context, id, conn string) error {
	k := keysOf(id)
	if err := detachScript.Run(ctx, s.client, k[:1], conn).Err(); err != nil {
		return fmt.Errorf("redisstore: detach from %s: %w", id, scriptError(err))
	}
	return nil
}

// Touch refreshes the TTL of sessions' keys, in one round trip.
func (s *Store) Touch(ctx context.Context, ids ...string) error {
	if s.opt.TTL <= 0 {
		return nil
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			k := keysOf(id)
			p.PExpire(ctx, k[0], s.opt.TTL)
			p.PExpire(ctx, k[1], s.opt.TTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisstore: touch %d sessions: %w", len(ids), err)
	}
	return nil
}

// Delete removes a session's keys.
func (s *Store) Delete(ctx context.Context, id string) error {
	k := keysOf(id)
	if err := s.client.Del(ctx, k[:]...).Err(); err != nil {
		return fmt.Errorf("redisstore: delete %s: %w", id, err)
	}
	return nil
}
