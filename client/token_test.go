package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/orchestrator"
)

// TestToken: Options.Token authenticates the first handshake and every
// resume's, and leaves the caller's Header alone.
func TestToken(t *testing.T) {
	static, err := auth.NewStatic([]auth.Pair{{Subject: "alice", Token: "tok-alice"}})
	if err != nil {
		t.Fatal(err)
	}
	url := serveWith(t, orchestrator.Options{Authenticate: auth.Authenticator(static)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := client.Dial(ctx, url, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Dial without a token: %v, want a 401", err)
	}
	header := http.Header{"X-Test": {"1"}}
	c, err := client.Dial(ctx, url, &client.Options{Token: "tok-alice", Header: header, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Drop()
	if err := c.Wait(ctx, func(v client.View) bool { return v.Stats.Resumes == 1 }); err != nil {
		t.Fatalf("resume with the token: %v (stats %+v)", err, c.View().Stats)
	}
	if len(header) != 1 {
		t.Errorf("the caller's Header became %v", header)
	}
}
