package redisstore

import "github.com/redis/go-redis/v9"

// The scripts' error replies start with a code the Go side reads back
// with redis.HasErrorPrefix (see scriptError).
const (
	codeNoSession = "NOSESSION"
	codeNotOwner  = "NOTOWNER"
	codeConflict  = "CONFLICT"
	codeExists    = "EXISTS"
	// codeSuperseded is rotateScript's reply to a resume that arrived
	// before the one holding the token.
	codeSuperseded = "SUPERSEDED"
	// codeBehind is the append script's reply when the store holds less
	// than the writer had written: Redis lost acknowledged writes
	// (fenceScript). Its message is "BEHIND last_seq last_sum".
	codeBehind = "BEHIND"
)

// expireLua is the scripts' one rule for a session's keys' expiry: a
// session with no connection (detached, unix ms, set by detachScript)
// expires exactly its session TTL (dttl, ms, from createScript) after its
// client left, whatever is written meanwhile and whichever node writes it;
// one with a connection, or of a store without a session TTL, lives ttl
// (ARGV of the caller, ms, 0 = none) past its latest write or touch.
const expireLua = `
local function expire(meta, events, ttl)
  local f = redis.call('HMGET', meta, 'detached', 'dttl')
  local d, dttl = tonumber(f[1]), tonumber(f[2])
  if d and dttl and dttl > 0 then
    redis.call('PEXPIREAT', meta, d + dttl)
    redis.call('PEXPIREAT', events, d + dttl)
  elseif ttl > 0 then
    -- One deadline for both keys: two PEXPIREs read the clock twice, and
    -- Redis 7.0 does not freeze it within a script (they differed by a
    -- millisecond under load).
    local t = redis.call('TIME')
    local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
    redis.call('PEXPIREAT', meta, at)
    redis.call('PEXPIREAT', events, at)
  end
end
`

// dropCheckpointLua removes every part of a session's checkpoint from
// meta: the field cp (a whole checkpoint) and every cp:NAME (a part).
const dropCheckpointLua = `
local function dropCheckpoint(meta)
  local del = {}
  for _, f in ipairs(redis.call('HKEYS', meta)) do
    if f == 'cp' or string.sub(f, 1, 3) == 'cp:' then del[#del + 1] = f end
  end
  if #del > 0 then redis.call('HDEL', meta, unpack(del)) end
end
`

// createScript writes a new session's meta hash, owned by ARGV[1], and
// drops any stale stream left under its id; a connection ARGV[8] (not
// "") is recorded as the session's, as attachScript would.
//
// KEYS: meta, events. ARGV: owner, token, subject, cap, ttl (ms, 0 =
// none), session TTL (ms, 0 = none; see expireLua), follow token hash,
// connection.
var createScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('EXISTS session already in the store')
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', ARGV[2], 'subject', ARGV[3],
  'cap', ARGV[4], 'last_seq', 0, 'last_sum', '', 'base_seq', 0, 'base_sum', '',
  'ack_seq', 0, 'cp_seq', 0, 'dttl', ARGV[6], 'follow', ARGV[7])
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'conn', ARGV[8]) end
local ttl = tonumber(ARGV[5])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
`)

// rotateScript sets token to ARGV[2] if ARGV[1] is the token, which then
// becomes prev, the pending previous token; or if ARGV[1] is prev, which
// stays (the token it replaces was never read by its client). It returns
// the rotation's number, counted in rot in the same step (1, 2, …), or 0
// if it did not rotate. The session's expiry is left as it is.
//
// rot_at is when the resume that made the token arrived (ARGV[3], unix
// ms). A rotation from prev by a resume that arrived more than ARGV[4]
// ms before it is refused (SUPERSEDED): its client gave that resume up
// for the later one, which holds the session — the order is the resumes'
// arrival, not the order in which they got here.
//
// KEYS: meta. ARGV: presented token hash, new token hash, arrival (unix
// ms), skew (ms).
var rotateScript = redis.NewScript(`
local meta = redis.call('HMGET', KEYS[1], 'token', 'prev', 'rot_at')
local token, prev = meta[1], meta[2]
if not token then
  return redis.error_reply('NOSESSION session is not in the store')
end
if token == ARGV[1] then
  redis.call('HSET', KEYS[1], 'token', ARGV[2], 'prev', ARGV[1], 'rot_at', ARGV[3])
  return redis.call('HINCRBY', KEYS[1], 'rot', 1)
end
if prev and prev ~= '' and prev == ARGV[1] then
  local at, held = tonumber(ARGV[3]), tonumber(meta[3] or '0')
  if at + tonumber(ARGV[4]) < held then
    return redis.error_reply('SUPERSEDED a resume that arrived later holds the token')
  end
  redis.call('HSET', KEYS[1], 'token', ARGV[2])
  if at > held then redis.call('HSET', KEYS[1], 'rot_at', ARGV[3]) end
  return redis.call('HINCRBY', KEYS[1], 'rot', 1)
end
return 0
`)

// commitScript ends a pending rotation: if ARGV[1] is still the token,
// prev is removed and 1 returned; otherwise (a later resume rotated again,
// or the session is gone) nothing changes and 0 is returned.
//
// KEYS: meta. ARGV: token hash.
var commitScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'prev')
return 1
`)

// claimScript sets owner to ARGV[2] if it is ARGV[1]; returns 1 if it did.
// The session's expiry follows expireLua: a takeover does not restart the
// TTL of a session whose client has left.
//
// KEYS: meta, events. ARGV: from, to, ttl (ms, 0 = none).
var claimScript = redis.NewScript(expireLua + `
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner then
  return redis.error_reply('NOSESSION session is not in the store')
end
if owner ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[2])
expire(KEYS[1], KEYS[2], tonumber(ARGV[3]))
return 1
`)

// entryEvents is the most events one stream entry of the append script
// holds: its XADD takes them from unpack, whose values go on Lua's C
// stack (LUAI_MAXCSTACK, 8,000 slots), and a flight after a stall of
// Redis can hold thousands.
const entryEvents = "256"

// appendScript writes one or more units of a session: its events in seq
// order, the highest ack among them, and the latest checkpoint, then trims
// the stream to what the ring retains (cap entries at most, none at or
// below the ack), all in one atomic call. It returns the new last_seq.
//
// It refuses (error replies) unless meta exists (NOSESSION), its owner is
// ARGV[1] (NOTOWNER), and its last_seq/last_sum are the ring's durable
// seq and checksum ARGV[4]/ARGV[5] — or one of this call's own events,
// with its checksum, when an earlier try of this same write landed but
// its reply was lost; the events the store holds already are skipped
// (CONFLICT otherwise). A last_seq below the writer's is BEHIND: the
// store lost writes it had acknowledged (fenceScript).
//
// The checkpoint is written as a change of its parts (cpField): with
// reset, every part is removed first; then the parts set are set and
// the parts removed are removed. A transition thus writes what changed.
//
// On a Redis Cluster it also wakes the session's tails: while its tail
// key exists (tailKey: a reader follows the session, shardtails.go), it
// publishes the new last seq on the sharded channel of the same name.
//
// The events go in as few stream entries as they can: one entry of up to
// entryEvents events, its ID the last seq it holds, its
// fields the seqs and its values each event's record, c(seq) (64 hex
// digits) then the frame: an XADD per write, where one per event cost
// Redis 8 % more CPU per event (docs/performance.md). Entries written by
// earlier versions, one per event ("n-0", fields d and c), are read as
// they were, and the trim finds base_sum in either.
//
// KEYS: meta, events, and on a cluster the tail key. ARGV: node, ttl (ms,
// 0 = none), cap, from seq, c(from), ack (0 = none), has checkpoint ("1"/"0"), reset ("1"/"0"),
// checkpoint seq, the number of parts set (s), the number of parts
// removed (d), then s pairs of field and value, then d fields, then per
// event: seq, record (c(seq) then the frame) — seqs from+1 on.
var appendScript = redis.NewScript(expireLua + dropCheckpointLua + `
local meta, events = KEYS[1], KEYS[2]
local f = redis.call('HMGET', meta, 'owner', 'last_seq', 'last_sum', 'base_seq', 'ack_seq')
local owner = f[1]
if not owner then
  return redis.error_reply('NOSESSION session is not in the store')
end
if owner ~= ARGV[1] then
  return redis.error_reply('NOTOWNER session is owned by ' .. owner)
end
local last, lastSum = tonumber(f[2]), f[3]
local base, acked = tonumber(f[4]), tonumber(f[5])
local from = tonumber(ARGV[4])
local ns, nd = tonumber(ARGV[10]), tonumber(ARGV[11])
local e0 = 11 + 2 * ns + nd
local n = (#ARGV - e0) / 2
-- The k-th event (k from 1): its seq is ARGV[e0+2k-1], its record
-- ARGV[e0+2k], whose first 64 bytes are c(seq).
local function sum(k) return string.sub(ARGV[e0 + 2 * k], 1, 64) end
if last < from then
  return redis.error_reply('BEHIND ' .. last .. ' ' .. lastSum)
end
if last > from + n then
  return redis.error_reply('CONFLICT store holds seq ' .. last .. ', the writer had ' .. from)
end
local want = ARGV[5]
if last > from then want = sum(last - from) end
if lastSum ~= want then
  return redis.error_reply('CONFLICT store holds another chain at seq ' .. last)
end
local k = last - from + 1
while k <= n do
  local j = math.min(n, k + ` + entryEvents + ` - 1)
  redis.call('XADD', events, ARGV[e0 + 2 * j - 1] .. '-0', unpack(ARGV, e0 + 2 * k - 1, e0 + 2 * j))
  k = j + 1
end
local h = {}
if n > 0 then
  last = from + n
  h[#h + 1] = 'last_seq'; h[#h + 1] = last
  h[#h + 1] = 'last_sum'; h[#h + 1] = sum(n)
end
local ack = tonumber(ARGV[6])
if ack > last then
  return redis.error_reply('CONFLICT ack ' .. ack .. ' past the last seq ' .. last)
end
if ack > acked then
  h[#h + 1] = 'ack_seq'; h[#h + 1] = ack
end
local newBase = math.max(base, last - tonumber(ARGV[3]), ack)
if newBase > base then
  local baseSum
  if newBase > from then
    baseSum = sum(newBase - from)
  else
    -- The entry holding newBase: the first whose ID (its last seq) is not
    -- below it.
    local e = redis.call('XRANGE', events, newBase .. '-0', '+', 'COUNT', 1)
    local fields, want = e[1][2], tostring(newBase)
    for i = 1, #fields, 2 do
      if fields[i] == 'c' then baseSum = fields[i + 1] end -- one event, d and c
      if fields[i] == want then baseSum = string.sub(fields[i + 1], 1, 64) end
    end
  end
  -- Entries whose last seq is newBase or below go; one holding newBase
  -- and later seqs stays (readers skip what is at or below base_seq).
  redis.call('XTRIM', events, 'MINID', (newBase + 1) .. '-0')
  h[#h + 1] = 'base_seq'; h[#h + 1] = newBase
  h[#h + 1] = 'base_sum'; h[#h + 1] = baseSum
end
if ARGV[7] == '1' then
  if ARGV[8] == '1' then dropCheckpoint(meta) end
  for k = 1, ns do
    h[#h + 1] = ARGV[10 + 2 * k]; h[#h + 1] = ARGV[11 + 2 * k]
  end
  if nd > 0 then redis.call('HDEL', meta, unpack(ARGV, 12 + 2 * ns, e0)) end
  h[#h + 1] = 'cp_seq'; h[#h + 1] = ARGV[9]
end
if #h > 0 then redis.call('HSET', meta, unpack(h)) end
expire(meta, events, tonumber(ARGV[2]))
if KEYS[3] and n > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SPUBLISH', KEYS[3], last)
end
return last
`)

// fenceScript moves a session that lost acknowledged writes up to where
// its writer is. Redis acknowledged the events after last_seq, the writer
// made them durable and its clients may hold them, but the store no longer
// has them: a failover to a replica that had not received them
// (replication is asynchronous), or a restart that lost the end of its
// append-only file. Their seqs must never be given to other events, so
// the store takes the writer's last seq and checksum as its last and its
// base, as if the events between had been evicted: a client that holds
// them continues, one behind them resyncs. The events it still holds are
// dropped with them (the stream must hold base+1 … last), the writer's
// latest checkpoint is written again, every part (the store's may be
// older than the lost events), and the fence is counted in meta's lost_writes.
//
// It refuses as the append script does: NOSESSION, NOTOWNER, and CONFLICT
// unless the store still holds ARGV[3] with checksum ARGV[4] (what the
// writer read in the BEHIND reply) and the writer is ahead of it.
//
// KEYS: meta, events. ARGV: node, ttl (ms, 0 = none), the store's last
// seq, its c(last), the writer's seq, its c, has checkpoint ("1"/"0"),
// checkpoint seq, then pairs of field and value: every part of the
// checkpoint.
var fenceScript = redis.NewScript(dropCheckpointLua + `
local meta, events = KEYS[1], KEYS[2]
local f = redis.call('HMGET', meta, 'owner', 'last_seq', 'last_sum')
local owner = f[1]
if not owner then
  return redis.error_reply('NOSESSION session is not in the store')
end
if owner ~= ARGV[1] then
  return redis.error_reply('NOTOWNER session is owned by ' .. owner)
end
local last, to = tonumber(f[2]), tonumber(ARGV[5])
if last ~= tonumber(ARGV[3]) or f[3] ~= ARGV[4] or last >= to then
  return redis.error_reply('CONFLICT store holds seq ' .. last .. ', the writer read ' .. ARGV[3])
end
redis.call('DEL', events)
redis.call('HSET', meta, 'last_seq', to, 'last_sum', ARGV[6], 'base_seq', to, 'base_sum', ARGV[6])
if ARGV[7] == '1' then
  dropCheckpoint(meta)
  local h = {'cp_seq', ARGV[8]}
  for i = 9, #ARGV do h[#h + 1] = ARGV[i] end
  redis.call('HSET', meta, unpack(h))
end
redis.call('HINCRBY', meta, 'lost_writes', to - last)
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', meta, ttl) end
return to - last
`)
