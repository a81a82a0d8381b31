package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/orchestrator"
)

// authServer is a server that lets in alice (a token a subprotocol can
// hold) and bob (one it cannot: it travels in the query).
func authServer(t *testing.T, delay time.Duration) *testServer {
	t.Helper()
	static, err := auth.NewStatic([]auth.Pair{{Subject: "alice", Token: "tok-alice"}, {Subject: "bob", Token: "tok/bob+="}})
	if err != nil {
		t.Fatal(err)
	}
	return startServer(t, delay, &orchestrator.Options{Authenticate: auth.Authenticator(static)})
}

// TestJSClientToken runs baton-client.mjs's token option against a real
// server with authentication on (testdata/token.mjs).
func TestJSClientToken(t *testing.T) {
	nodeBin(t)
	srv := authServer(t, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out strings.Builder
	cmd := nodeCommand(ctx, t, []string{"BATON_WS=" + srv.WS(), "BATON_TOKEN_PROTOCOL=tok-alice", "BATON_TOKEN_QUERY=tok/bob+="},
		"--experimental-websocket", "testdata/token.mjs")
	cmd.Stdout = &out
	cmd.Stderr = t.Output()
	err := cmd.Run()
	t.Log(out.String())
	if err != nil || !strings.HasSuffix(out.String(), "OK\n") {
		t.Fatalf("testdata/token.mjs: %v (ctx: %v)", err, ctx.Err())
	}
}

// TestJSClientExpiry runs baton-client.mjs against a real server whose
// JWTs expire with no leeway (testdata/expiry.mjs): each connection is
// closed with 4001 at its token's exp, the client reconnects with a fresh
// token from its token function and resumes, and every resume rotates the
// resume token, the first one then being rejected.
func TestJSClientExpiry(t *testing.T) {
	nodeBin(t)
	const secret = "a-test-secret-of-at-least-32-bytes!"
	v, err := auth.NewJWT([]byte(secret), &auth.JWTOptions{Leeway: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, time.Millisecond, &orchestrator.Options{Authenticate: auth.Authenticator(v)})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out strings.Builder
	cmd := nodeCommand(ctx, t, []string{"BATON_WS=" + srv.WS(), "BATON_JWT_SECRET=" + secret},
		"--experimental-websocket", "testdata/expiry.mjs")
	cmd.Stdout = &out
	cmd.Stderr = t.Output()
	err = cmd.Run()
	t.Log(out.String())
	if err != nil || !strings.HasSuffix(out.String(), "OK\n") {
		t.Fatalf("testdata/expiry.mjs: %v (ctx: %v)", err, ctx.Err())
	}
}

// TestUIToken: the page takes its token from the URL's fragment, takes it
// out of the address bar, passes it at the handshake (a subprotocol, which
// Chromium accepts only because the server selects "baton"), and keeps it
// for a reload, which resumes the session.
func TestUIToken(t *testing.T) {
	srv := authServer(t, 20*time.Millisecond)
	p := openPageAt(t, srv, "/#token=tok-alice")
	p.waitConnected()
	var hash string
	p.eval(`location.hash`, &hash)
	if hash != "" {
		t.Errorf("the address bar still holds the token: %q", hash)
	}
	p.request("Plan a picnic")
	p.waitPlan()
	p.click("confirm-plan")
	p.waitAnswer()
	var before, after string
	p.eval(`window.batonClient.sessionId`, &before)
	p.do(chromedp.Reload())
	p.waitConnected()
	p.eval(`window.batonClient.sessionId`, &after)
	if after != before {
		t.Errorf("after a reload the page holds session %s, want %s resumed", after, before)
	}
}

// TestUINoToken: without a token the handshake is refused (401); the page
// says what to try instead of connecting.
func TestUINoToken(t *testing.T) {
	srv := authServer(t, 20*time.Millisecond)
	p := openPageAt(t, srv, "/")
	p.allow("HTTP Authentication failed") // Chromium reports the refused handshake (401) on the console
	p.waitFor("the hint", `!document.querySelector('[data-testid=error]').hidden &&
		document.querySelector('[data-testid=error]').textContent.includes("#token=")`)
	var state string
	p.eval(`document.querySelector('[data-testid=connection]').dataset.state`, &state)
	if state == "CONNECTED" {
		t.Errorf("connected without a token")
	}
	if n := srv.Orch.Sessions(); n != 0 {
		t.Errorf("%d sessions made without a token", n)
	}
}
