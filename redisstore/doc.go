// Package redisstore keeps sessions' sequenced events and checkpoints in
// Redis, so that any Baton node can serve any session and a run survives
// the death of the node that held it. It owns the Redis key schema, the
// write-behind copy of each session's buffer.Durable ring, fencing by
// owner, and reading a session back (OpenRing, Read, Tail). It knows
// nothing of WebSockets, the pipeline or what a checkpoint holds: frames
// and checkpoints are opaque bytes.
//
// # Keys
//
// Every key of a session carries the session id as a hash tag, so a
// session lives in one Redis Cluster slot and its scripts may touch all of
// its keys:
//
//   - baton:{ID}:meta — a hash: owner (the node id that may write),
//     token (hex SHA-256 of the resume token), subject, cap, last_seq and
//     last_sum (the latest seq and its checksum c(last)), base_seq and
//     base_sum (the seq just before the oldest retained entry and c(base)),
//     ack_seq, the latest checkpoint — cp (a whole one, Ring.Checkpoint)
//     or cp:NAME for each of its parts (Ring.CheckpointParts) — and cp_seq
//     (the seq it is as of),
//     conn (the attached connection) or detached (when the last one left,
//     unix ms), dttl (Options.SessionTTL in ms), and lost_writes (how many
//     seqs Redis lost after acknowledging them, fenced; absent when none).
//   - baton:{ID}:events — a stream holding the seqs base+1 … last (at
//     most cap of them), an entry per write of the append script with up
//     to 256 events: its ID "n-0" for n the last seq it holds, and a field
//     per event, named for its seq, whose value is c(seq) (64 hex digits,
//     as buffer.NextChecksum gives) then the encoded frame. The trim drops
//     whole entries, so the first may also hold seqs at or below base,
//     which readers skip (a tail may hand them on: they are the session's
//     events, in order). An entry of an earlier version holds one event,
//     with the fields d (the frame) and c; both are read.
//   - baton:{ID}:tail — on a Redis Cluster, set while a node's tail reader
//     follows the session; the append script then publishes on the
//     sharded channel of the same name (shardtails.go).
//
// The keys of the cluster of Batons (node.go) share the hash tag {nodes}.
// On a Redis Cluster everything else the store does is done per shard:
// see shards.go.
//
// While a connection is attached (or none ever left), both keys expire
// after Options.TTL without a write or a Touch; every write refreshes
// both. Once detached is set, they expire exactly dttl after it
// (PEXPIREAT), whatever is written meanwhile and whichever node writes it:
// a session's TTL survives its takeover. Every script that sets an expiry
// applies this one rule (expireLua).
//
// # Writing behind
//
// A Ring answers every buffer.Ring method from a buffer.Memory, as the
// buffer package requires of a method called under the session lock, and
// queues what changed. Commit hands the queue to the Store's one writer
// goroutine as a unit. The writer sends the committed units of every
// session that has some in one pipelined round trip: one EVALSHA of the
// append script per session, carrying all of that session's units, so a
// unit's events, acks and checkpoint land together or not at all. A
// session is in at most one write at a time, which keeps its order. An
// idle session costs no goroutine.
//
// The append script writes only while meta's owner is this node, and only
// when the store's last_seq and last_sum are the ones this ring last
// wrote (or a retry of its own write that already landed): a node that
// lost a session, or opened a stale copy, can never write to it. Those
// refusals, a session gone from Redis (restarted empty, or expired), too
// long a run of transient errors (Options.GiveUpAfter) and too many
// entries waiting unwritten (Options.MaxPending) each end the ring's
// writing and are reported once through Callbacks.OnLost.
//
// Fencing by owner stops a node's writes, not what its runs do outside
// Redis. A Node therefore tells its user (Node.Lapses, Cluster.Lapses)
// when it has not renewed its lease for four fifths of the lease TTL —
// Redis stalled, or is cut off from it — before the others can find the
// lease lapsed and take its runs over; the orchestrator then stops them.
//
// # Lost acknowledged writes
//
// Redis may lose writes it acknowledged: a Sentinel failover to a replica
// they had not reached (replication is asynchronous), a restart from an
// append-only file that lost its last second. The ring's next write then
// finds the store behind the seq it made durable (BEHIND). The lost
// events' seqs were given to clients, so they must never name other
// events: the writer fences them (fence.go) — the store takes the ring's
// seq and checksum as its last and its base, as if the lost events had
// been evicted, and the ring's latest checkpoint again — and writes on. A
// client holding them goes on; one behind them resyncs, as after an
// eviction. Store.Stats counts the fences.
package redisstore
