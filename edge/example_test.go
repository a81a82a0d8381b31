package edge_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/baton-run/baton/edge"
)

// Every connection counted at the listener, bodies and idle connections
// bounded by the http.Server, and Hosts checked in front of the handler.
func ExampleListen() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	el := edge.Listen(ln, &edge.ListenOptions{MaxConnsPerIP: 100, MaxConns: edge.ConnsForFileLimit(edge.FileLimit())})
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	srv := &http.Server{
		Handler:           edge.CheckHost(hello, &edge.HostOptions{Allowed: []string{"app.example.com"}}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second, // a request body arrives within it
		IdleTimeout:       2 * time.Minute,  // a keep-alive connection waits for its next request this long
	}
	served := make(chan struct{})
	go func() { srv.Serve(el); close(served) }()
	defer func() { srv.Close(); <-served }()

	for _, host := range []string{"localhost", "app.example.com", "attacker.example"} {
		req, _ := http.NewRequest("GET", "http://"+el.Addr().String()+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(host, resp.StatusCode)
	}
	// Output:
	// localhost 200
	// app.example.com 200
	// attacker.example 421
}

// The Host check alone, in front of any handler.
func ExampleCheckHost() {
	h := edge.CheckHost(http.NotFoundHandler(), nil)
	for _, host := range []string{"127.0.0.1:8080", "[::1]:8080", "dev.localhost", "rebound.example:8080"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		h.ServeHTTP(rec, req)
		fmt.Println(host, rec.Code)
	}
	// Output:
	// 127.0.0.1:8080 404
	// [::1]:8080 404
	// dev.localhost 404
	// rebound.example:8080 421
}
