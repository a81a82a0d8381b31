// Package buffer holds a session's sequenced events between the moment the
// pipeline emits them and the moment the client acknowledges them: it
// assigns the per-session seq, keeps the state-checksum chain of the
// contract (§3.4), prunes on ack, evicts the oldest entry when full, and
// answers "everything after last_seq" with either the events or a clear
// ErrGap / ErrAhead so a caller can tell a replay from a resync.
//
// It stores opaque, already-encoded frames and knows nothing of WebSockets,
// sessions or the pipeline. Ring is the plug-in point: Memory is the
// in-process implementation; a Redis Streams store will sit beside it.
// Every implementation passes the shared contract suite in
// buffer/buffertest (buffertest.TestRing).
//
// # What a Ring may do, and what it may not
//
// The orchestrator calls every Ring method except Cap with its session's
// lock held. That lock orders each append with the state fold and the send
// to the live connection, and a resume reads the ring and attaches under
// it; it is what makes the switch from replay to live exact (§3.5), so it
// stays. It follows that a Ring answers from memory and returns at once:
//
//   - It may not wait on I/O — no network round trip, no disk, no lock held
//     by another session's work. One slow call would stall the session's
//     pipeline, and with it every event the client is waiting for.
//   - Seq and the checksum chain are assigned in process, by the one
//     server that holds the session. An implementation backed by a remote
//     store (Redis) keeps the session's unacked tail in memory exactly as
//     Memory does, answers Since, Checksum and Last from it, and copies
//     appends and acks to the store behind the lock, in order, from a
//     goroutine of its own. Reading a session back from the store (another
//     server taking it over) happens when that server makes the ring,
//     before any session lock exists — not in these methods.
//   - ctx is the session's context: done once the session is freed
//     (expired, discarded, or the server closing). A method called with a
//     done ctx changes nothing and returns an error that wraps ctx.Err().
//     An implementation's background work for the session ends with it.
//   - A Ring that also implements io.Closer is closed once, when its
//     session is freed, outside the session lock, after which no method is
//     called; Close waits for the ring's goroutines (for a write-behind
//     store: until the copy is flushed or ctx's end abandons it).
//   - Entry.Data is never modified after Append: callers share it.
package buffer
