// Package mcptool offers the tools of MCP servers (Model Context Protocol)
// to the agent loop as tool.Tools.
//
// Each server is configured by a Spec, parsed from the value of
// --mcp NAME=COMMAND [ARGS…], and runs as one child process per Baton
// process, spoken to over its stdin and stdout (the stdio transport). A
// Manager starts every server at startup, lists its tools and offers each
// as NAME__TOOL with the tool's input schema; a server that dies is started
// again by the next call to one of its tools: at once after a crash during
// a call, with a growing wait only for a server that keeps failing. A call
// that cannot be answered because its server is down or stopped fails with
// ErrUnavailable and nothing more; why (the server's exit, its stderr) is
// logged with the call's ids (tool.LogAttrs). Close stops every server
// process.
//
// A call made as a retry (tool.Retry: the Baton process that first sent it
// died before its result came back) carries RetryMetaKey: true in its
// request's _meta, where the server can see it.
//
// Every tool asks the user before each call (tool.Spec.Confirm) unless it
// is annotated readOnlyHint:true — the MCP specification's defaults are
// readOnlyHint false and destructiveHint true — or its server is named in
// Options.Trust (--mcp-trust NAME); every tool of a server named in
// Options.Confirm (--mcp-confirm NAME) asks, read-only or not. Asking the
// user is the agent loop's business.
//
// The package knows nothing of sessions, tasks, events or models: it turns
// MCP tool calls into text results and errors. The protocol itself (the
// handshake, JSON-RPC framing, cancellation) is left to the official MCP Go
// SDK, github.com/modelcontextprotocol/go-sdk.
package mcptool
