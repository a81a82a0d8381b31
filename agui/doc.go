// Package agui serves Baton to AG-UI clients (docs.ag-ui.com): POST /agui
// takes a RunAgentInput and answers a text/event-stream of AG-UI events,
// and GET /agui/{threadId} with Last-Event-ID resumes such a stream
// exactly, from Baton's replay ring.
//
// It is a translation layer, nothing more: every request speaks to the
// orchestrator through /ws, in process (internal/inproc), as a WebSocket
// client would — with the request's own address and Authorization header,
// so authentication, limits and every /ws behaviour apply unchanged. An
// AG-UI thread is a Baton session; the package keeps, per thread, only
// what it needs to follow that session again (its id and follow token,
// §3.6 of docs/protocol.md), in a Store shared by every node.
//
// The mapping from Baton's events to AG-UI's is a function of the events
// of one stream alone (mapper.go), so replaying the ring from the
// stream's start reproduces every AG-UI event, with its SSE id, byte for
// byte; that is what makes a resume exact. The package knows nothing of
// sessions, rings or the pipeline beyond what /ws says.
package agui
