// Package orchestrator is the only package that knows every other one. It
// serves the WebSocket endpoint, owns sessions (creation, attachment to
// connections, resume, expiry), runs each session's pipeline (plan →
// confirm → solve → aggregate, with replanning, restarts and the decide
// step of adaptive runs) on the models it is given, and turns what happens
// into sequenced events in the session's ring and on its connections. Each
// topic below names the file that owns it.
//
// # Connections
//
// Each connection has one reader goroutine, started when the HTTP handler
// has upgraded it (server.go: the handler returns, so net/http's buffers
// are freed), and a writer goroutine only while frames wait in its bounded
// send queue (conn.go): the writer drains what is queued in batches, each
// gathered into one socket write with one deadline (batchconn.go), and
// exits when the queue is empty; pings start from a timer. The pipeline
// only ever appends to that queue and never waits for a client: a queue
// that would overflow closes the connection (1013). A write that fails or
// times out ends the connection at the TCP level at once, since part of a
// frame may have left: no frame, not even a close frame, follows it, and
// the session stays for a resume. The reader decodes each client frame and
// applies it (dispatch.go). Options are options.go's.
//
// # Sessions and their events
//
// A session's mutex orders appends to its ring with sends to its
// connections, which is what makes the switch from replay to live exact
// (session.go). Nothing done under it waits on I/O: sends only queue, and a
// ring answers from memory (buffer's package doc says what a ring may do
// there); each ring call gets the session's context, done once the session
// is freed. A session may have several connections, each a member with its
// own cursor, and the ring is pruned to what every member acked
// (members.go). A session is a conversation (history.go).
//
// # Resume and the token
//
// A resume answers with the replay or the snapshot (resume.go; a resync
// waits until the store holds its snapshot's seq, held.go, so a client
// never holds an event a server taking over would not have). Which resume
// keeps a session, and which connections it replaces, is decided in one
// place by the number of the token's rotation (rotation.go): after any set
// of concurrent resumes with one token, on any servers, exactly one
// connection holding it is left open, and it holds the token that works.
//
// # Runs
//
// A run's goroutine emits its events (run.go; chat runs chat.go, the
// decide step of adaptive runs adapt.go, the solver's reports
// taskevents.go, its two log lines runlog.go). A session with a durable
// ring is checkpointed at every transition (checkpoint.go, in parts with
// cpparts.go), and a running task's agent loop is journaled by round
// (journal.go), so a run restored elsewhere goes on from its last round,
// repeating no model reply and no tool result that came back (restore.go;
// a question it had open waits parked, parked.go). A panic in a model call
// is that call's failure (failure.Protect).
//
// # Hostile clients
//
// Connections per address and frames per connection are limited
// (limits.go); a connection beyond a session cap gets a provisional
// session good only for a resume, and a session never used is freed
// within IdleSessionTTL (sessioncap.go); a resume token dies once a pong
// proves its client read the next one (rotation.go).
//
// # A cluster of servers
//
// With a Cluster (cluster.go, implemented by redisstore) a session lives
// in the store and any server serves it — from when it is first used: a
// connection's fresh session is recorded there at its first frame that
// is not a resume, or after a second of silence (record.go). A resume of a session this server
// does not hold is proxied to its live owner (proxy.go: answered from the
// store, tailed there, its commands forwarded) or taken over (takeover.go
// decides; adopt.go adopts, one adoption at a time, at most MaxTakeovers
// at once: a resume that waits TakeoverWait for a slot in vain is answered
// busy with a retry hint). The servers' messages to each other — forwarded
// commands, members' attaches and detaches, replaces — are peers.go's: the
// loop that receives them waits on nothing, and each peer's are applied in
// order by a sender of its own, so a reply slow to one holds up no other's.
// A dead server's runs are found and continued (failover.go); a session's
// TTL runs from when its client left, on any server, also across a
// takeover (Record.Detached). When the Cluster says this server's lease may
// have lapsed (LeaseWatcher), it gives every recorded session up, and a takeover
// under way starts no run unless the lease has held since before its
// claim, so that no run goes on here while another server continues it
// (fence.go). A drain hands the sessions to the others (drain.go).
package orchestrator
