// Package orchestrator is the only package that knows every other one. It
// serves the WebSocket endpoint, owns sessions (creation, attachment to one
// connection at a time, resume, expiry), runs each session's pipeline
// (plan → confirm → solve → aggregate, with replanning, restarts and the
// decide step of adaptive runs) on the models it is given, and turns
// what happens into sequenced events in the session's ring and on its
// connection.
//
// Concurrency: each connection has one reader goroutine, started when the
// HTTP handler has upgraded it (the handler returns, so net/http's buffers
// are freed), and a writer goroutine only while frames wait in its bounded
// send queue: the writer drains what is queued in batches, each gathered
// into one socket write with one deadline (batchConn), and exits when the
// queue is empty; pings start from a timer. The pipeline only ever appends
// to that queue and never waits for a client: a queue that would overflow
// closes the connection (1013). A write that fails or times out ends the
// connection at the TCP level at once, since part of a frame may have left:
// no frame, not even a close frame, follows it, and the session stays for a
// resume. A session's mutex
// orders appends to its ring with sends to its connection, which is what
// makes the switch from replay to live exact. Nothing done under it waits on
// I/O: sends only queue, and a ring answers from memory (buffer's package
// doc says what a ring may do there); each ring call gets the session's
// context, done once the session is freed.
//
// Hostile clients: a connection beyond a session cap gets a provisional
// session good only for a resume (sessioncap.go), a session never used is
// freed within IdleSessionTTL, and a resume token rotates, its
// predecessor dying once a pong proves the client read the new one
// (session.go). A panic in a model call is that call's failure
// (failure.Protect). With a Cluster, a session this server owns in the
// store but no longer holds is adopted again, one adoption at a time
// (adopt.go), and at most MaxTakeovers sessions are taken over at once: a
// resume that waits TakeoverWait for a slot in vain is answered busy with
// a retry hint, so a storm of resumes after a node's death cannot have
// every takeover miss its deadline together; a session's TTL runs from when its client left, on any
// server, also across a takeover (Record.Detached); and a resync's answer
// waits until the store holds its snapshot's seq (held.go), so a client
// never holds an event a server taking over would not have.
// A run restored from a checkpoint goes on with each running
// task from its last journaled round of the agent loop, repeating no model
// reply and no tool result that came back (journal.go). When the Cluster
// says this server's lease may have lapsed (LeaseWatcher), it gives every
// session up, and a takeover under way starts no run unless the lease has
// held since before its claim, so that no run goes on here while another
// server continues it (fence.go).
package orchestrator
