// Package edge is Baton's HTTP edge: a listener that counts and bounds
// every accepted connection, and the handler wrapper that checks the Host
// a request names.
//
// # Connections (listener.go, refuse.go, spare.go, filelimit.go)
//
// [Listen] wraps a net.Listener so that every TCP connection — a plain
// request, a server-sent-events stream, a WebSocket — is counted once,
// from its accept to its Close, by its peer's address ([AddrKey]: an IPv4
// address, an IPv6 /64), and in total. A connection beyond
// ListenOptions.MaxConnsPerIP is answered a minimal 429, beyond
// ListenOptions.MaxConns a 503, both with a Retry-After, once its request
// head has arrived (a client may not read an answer sent before its
// request), and closed; no http.Server ever sees it. At most MaxRefusing
// refusals are answered at once, a few seconds each at most; beyond, a
// refused connection is closed unanswered. When the
// process is out of file descriptors anyway (EMFILE, ENFILE), the listener
// frees a spare descriptor it holds, accepts the pending connection,
// answers it 503 and closes it, then takes the spare again: the kernel's
// backlog is drained instead of accept failing in a loop. [ConnsForFileLimit]
// is a total cap that leaves descriptors for everything else the process
// opens, so the spare is the exception.
//
// What a connection may take to send a request, and to send the next, are
// the http.Server's ReadTimeout and IdleTimeout (cmd/baton sets them):
// net/http clears the read deadline once a request body has been read to its end
// and when a connection is hijacked, so neither cuts a server-sent-events
// stream or a WebSocket.
//
// # Requests (host.go)
//
// [CheckHost] refuses, with 421 Misdirected Request, a request whose Host
// is not a loopback name, an IP literal or an allowed pattern: the defence
// against DNS rebinding, in which a page on a name its author controls is
// made to reach a server on the visitor's machine or network.
//
// The package knows nothing of sessions, WebSockets or Baton's routes:
// cmd/baton wires it in front of them.
package edge
