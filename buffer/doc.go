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
package buffer
