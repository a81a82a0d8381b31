// Package orchestrator is the only package that knows every other one. It
// serves the WebSocket endpoint, owns sessions (creation, attachment to one
// connection at a time, resume, expiry), runs each session's pipeline
// (plan → confirm → solve → aggregate, with replanning, restarts and the
// decide step of adaptive runs) on the models it is given, and turns
// what happens into sequenced events in the session's ring and on its
// connection.
//
// Concurrency: each connection has one reader goroutine (the HTTP handler)
// and one writer goroutine draining a bounded send queue; the pipeline only
// ever appends to that queue and never waits for a client. A session's mutex
// orders appends to its ring with sends to its connection, which is what
// makes the switch from replay to live exact. Nothing done under it waits on
// I/O: sends only queue, and a ring answers from memory (buffer's package
// doc says what a ring may do there); each ring call gets the session's
// context, done once the session is freed.
package orchestrator
