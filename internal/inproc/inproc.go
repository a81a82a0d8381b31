// Package inproc connects to an http.Handler's WebSocket endpoint in
// process: a protocol translation layer (the myagent dialect, AG-UI) talks
// to the orchestrator through exactly what /ws serves, over an in-memory
// connection instead of a socket. The handler sees an ordinary request —
// the client's own address as RemoteAddr, the client's headers — so its
// limits and authentication apply to the translated client as to any other.
package inproc

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Server serves a handler on in-memory connections until Close.
type Server struct {
	ln   *listener
	http *http.Server
	tr   *http.Transport
	wg   sync.WaitGroup
}

// Serve starts serving h in process.
func Serve(h http.Handler) *Server {
	ln := &listener{conns: make(chan net.Conn), done: make(chan struct{})}
	s := &Server{ln: ln, http: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	s.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			remote, _ := ctx.Value(remoteKey{}).(string)
			client, server := net.Pipe()
			select {
			case ln.conns <- &conn{Conn: server, remote: addr(remote)}:
				return client, nil
			case <-ln.done:
				return nil, net.ErrClosed
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		DisableKeepAlives: true,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.http.Serve(ln) // returns http.ErrServerClosed, or net.ErrClosed from Close
	}()
	return s
}

type remoteKey struct{}

// Dial opens a WebSocket connection to the handler at path (with its
// query, if any), as a client at remoteAddr (host:port) sending header.
// Its response is returned as websocket.Dial returns it: on a refused
// upgrade, with the handler's status.
func (s *Server) Dial(ctx context.Context, path, remoteAddr string, header http.Header) (*websocket.Conn, *http.Response, error) {
	ctx = context.WithValue(ctx, remoteKey{}, remoteAddr)
	return websocket.Dial(ctx, "ws://inproc"+path, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: s.tr},
		HTTPHeader: header,
	})
}

// Close stops accepting connections and closes those being served; it
// waits for the server's goroutine.
func (s *Server) Close() error {
	err := s.http.Close()
	s.tr.CloseIdleConnections()
	s.wg.Wait()
	return err
}

// listener hands the server the connections Dial makes.
type listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *listener) Addr() net.Addr { return addr("inproc") }

// conn is the server's end of a pipe, reporting the client's address.
type conn struct {
	net.Conn
	remote net.Addr
}

func (c *conn) RemoteAddr() net.Addr { return c.remote }

// addr is an address as a string: the client's host:port, or "inproc".
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }
