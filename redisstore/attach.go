package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// attachScript records ARGV[1] as the session's connection and returns
// {1, the one it replaces ("" for none)}. ARGV[3] is the number of the
// token rotation the connection holds (rotateScript): of two connections
// that each hold one, the lower number loses — its attach is refused, {0,
// conn_rot}, if a connection with a higher one attached before it, and
// changes nothing. A connection that holds none (0: a new session's, a
// follow by the follow token, another member kept on record) is recorded
// only when none is: conn names one attached connection, and one holding
// a rotation is not unrecorded by it. The session is no longer detached:
// it lives ttl past its latest write (expireLua).
//
// KEYS: meta, events. ARGV: conn, ttl (ms, 0 = none), rotation number.
var attachScript = redis.NewScript(expireLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOSESSION session is not in the store')
end
local rot = tonumber(ARGV[3])
local prev = redis.call('HGET', KEYS[1], 'conn') or ''
if rot > 0 then
  local held = tonumber(redis.call('HGET', KEYS[1], 'conn_rot') or '0')
  if rot < held then return {0, tostring(held)} end
  redis.call('HSET', KEYS[1], 'conn_rot', rot, 'conn', ARGV[1])
elseif prev == '' then
  redis.call('HSET', KEYS[1], 'conn', ARGV[1])
end
redis.call('HDEL', KEYS[1], 'detached')
expire(KEYS[1], KEYS[2], tonumber(ARGV[2]))
return {1, prev}
`)

// detachScript clears the session's connection if it is still ARGV[1],
// and records when (ARGV[2], unix ms): the session's TTL runs from then,
// on whichever node holds it (expireLua, Info.Detached).
//
// KEYS: meta, events. ARGV: conn, now (unix ms), ttl (ms, 0 = none).
var detachScript = redis.NewScript(expireLua + `
if redis.call('HGET', KEYS[1], 'conn') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'conn')
  redis.call('HSET', KEYS[1], 'detached', ARGV[2])
  expire(KEYS[1], KEYS[2], tonumber(ARGV[3]))
  return 1
end
return 0
`)

// presentScript moves a detached session's departure (detached) to
// ARGV[1] (unix ms), its keys expiring from then (expireLua); a session
// with a connection, or gone, is left as it is.
//
// KEYS: meta, events. ARGV: now (unix ms), ttl (ms, 0 = none).
var presentScript = redis.NewScript(expireLua + `
if redis.call('HEXISTS', KEYS[1], 'detached') == 1 then
  redis.call('HSET', KEYS[1], 'detached', ARGV[1])
  expire(KEYS[1], KEYS[2], tonumber(ARGV[2]))
  return 1
end
return 0
`)

// touchScript refreshes a session's expiry (expireLua).
//
// KEYS: meta, events. ARGV: ttl (ms, 0 = none).
var touchScript = redis.NewScript(expireLua + `
expire(KEYS[1], KEYS[2], tonumber(ARGV[1]))
return 0
`)

// Attach records conn (any string naming a connection across the
// cluster) as the session's connection and returns the one it replaces,
// "" for none; ErrNotFound if the session is not there. rot is the number
// of the token rotation conn holds (RotateToken): an attach whose rot is
// lower than that of a connection attached before it is refused (ok
// false) and changes nothing — a later resume holds the session. With rot
// 0 (conn holds none) conn is recorded only if no connection is.
func (s *Store) Attach(ctx context.Context, id, conn string, rot uint64) (prev string, ok bool, err error) {
	k := keysOf(id)
	res, err := attachScript.Run(ctx, s.client, k[:], conn, s.opt.TTL.Milliseconds(), rot).Slice()
	if err != nil {
		return "", false, fmt.Errorf("redisstore: attach to %s: %w", id, scriptError(err))
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("redisstore: attach to %s: answered %v", id, res)
	}
	won, _ := res[0].(int64)
	prev, _ = res[1].(string)
	if won != 1 {
		return "", false, nil
	}
	return prev, true, nil
}

// Detach clears the session's connection if it is still conn, and records
// that its client left now (Info.Detached): from then on its keys expire
// Options.SessionTTL after that moment, whatever is written meanwhile.
func (s *Store) Detach(ctx context.Context, id, conn string) error {
	k := keysOf(id)
	now := time.Now().UnixMilli()
	if err := detachScript.Run(ctx, s.client, k[:], conn, now, s.opt.TTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("redisstore: detach from %s: %w", id, scriptError(err))
	}
	return nil
}

// Present records that the session's client is there now, though no
// connection is attached (its resume could not be made yet): a detached
// session's keys expire Options.SessionTTL from now (Info.Detached moves
// to now). A session with a connection, or not there, is left as it is.
func (s *Store) Present(ctx context.Context, id string) error {
	k := keysOf(id)
	if err := presentScript.Run(ctx, s.client, k[:], time.Now().UnixMilli(), s.opt.TTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("redisstore: %s present: %w", id, scriptError(err))
	}
	return nil
}

// Touch refreshes the TTL of sessions' keys, in one round trip; a
// detached session's keys keep expiring its SessionTTL after its client
// left.
func (s *Store) Touch(ctx context.Context, ids ...string) error {
	if s.opt.TTL <= 0 {
		return nil
	}
	if err := touchScript.Load(ctx, s.client).Err(); err != nil {
		return fmt.Errorf("redisstore: touch %d sessions: %w", len(ids), err)
	}
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			k := keysOf(id)
			touchScript.EvalSha(ctx, p, k[:], s.opt.TTL.Milliseconds())
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
