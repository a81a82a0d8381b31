package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// forgeJWT signs raw claims JSON with secret as an HS256 JWT, whatever the
// JSON holds.
func forgeJWT(secret, claims string) string {
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(s))
	return s + "." + enc.EncodeToString(mac.Sum(nil))
}

func signJWT(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	tok, err := auth.SignHS256([]byte(jwtSecret), map[string]any{"sub": sub, "exp": exp.Unix()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestJWTDuplicateClaims: a JWT naming one subject and then, in a
// duplicate or differently cased sub, another is refused with 401 — not
// taken for the last sub, as encoding/json alone would.
func TestJWTDuplicateClaims(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--jwt-secret", jwtSecret)
	exp := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	tests := []struct {
		name, claims string
	}{
		{"sub and SUB", `{"sub":"eve","SUB":"alice","exp":` + exp + `}`},
		{"sub twice", `{"sub":"eve","exp":` + exp + `,"sub":"alice"}`},
		{"SUB alone", `{"SUB":"alice","exp":` + exp + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := dialWith(t, base, inHeader, forgeJWT(jwtSecret, tt.claims))
			if err == nil {
				m := meta[wsproto.Connected](t, c.expect(wsproto.EventConnected))
				t.Fatalf("upgraded (session %s)", m.SessionID)
			}
			if resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("refused with %v, want 401", status(resp))
			}
		})
	}
	// The same claims without the second sub are let in.
	if _, resp, err := dialWith(t, base, inHeader, forgeJWT(jwtSecret, `{"sub":"eve","exp":`+exp+`}`)); err != nil {
		t.Fatalf("a plain JWT: %v (%v)", err, status(resp))
	}
}

// resumeWith opens a connection and resumes the session with exactly
// token (resume would send the newest token instead of an old one).
func resumeWith(t *testing.T, base, sessionID, token string, lastSeq uint64) *conn {
	t.Helper()
	c, _ := connect(t, base)
	c.send("user.reconnect_with_state", map[string]any{"session_id": sessionID,
		"resume_token": token, "last_seq": lastSeq, "state_checksum": ""})
	return c
}

// TestResumeTokenRotates: every resume answers with a new resume token
// and, once the client has read the answer (the ping after it answered),
// the one presented stops working: a resume with it is rejected, as for a
// wrong token, and the client holding the newest one resumes again and
// again.
func TestResumeTokenRotates(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs)
	c, hello := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}})
	last := frames[len(frames)-1].Seq
	c.ws.CloseNow()

	token, seen := hello.ResumeToken, map[string]bool{hello.ResumeToken: true}
	for i := range 3 {
		r := resumeWith(t, base, hello.SessionID, token, last)
		m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
		if !m.Resumed || m.SessionID != hello.SessionID || m.LastSeq != last {
			t.Fatalf("resume %d: %+v", i+1, m)
		}
		if seen[m.ResumeToken] || len(m.ResumeToken) < 43 {
			t.Fatalf("resume %d answered the token %q, seen before or short", i+1, m.ResumeToken)
		}
		seen[m.ResumeToken] = true
		readUntilCommitted(t, logs, r, hello.SessionID, i+1)
		resumeWith(t, base, hello.SessionID, token, last).expectError(wsproto.CodeResumeRejected)
		token = m.ResumeToken
	}
	resumeWith(t, base, hello.SessionID, hello.ResumeToken, last).expectError(wsproto.CodeResumeRejected)
	// The newest token still works after the refusals.
	m := meta[wsproto.Connected](t, resumeWith(t, base, hello.SessionID, token, last).expect(wsproto.EventConnected))
	if !m.Resumed {
		t.Fatalf("the newest token after the refusals: %+v", m)
	}
}

// TestClusterResumeTokenRotates: with the Redis store the rotation is the
// store's, atomic across servers, and so is the order of resumes: of two
// resumes with one token at once, one on the session's owner and one on
// another server (which serves it from the store), exactly one connection
// is left open, it holds the token the store accepts (the other is closed
// with 4000), and once its client has read that token the one both
// presented is refused, on either server. (TestClusterResumeOrder forces
// each interleaving; this one takes whatever the scheduler gives.)
func TestClusterResumeTokenRotates(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL())
	b := startNode(t, "B", "127.0.0.1:0", rds.URL())
	onA, onB := "http://"+a.addr, "http://"+b.addr
	rdb := rds.Client(t)

	c, hello := connect(t, onA)
	c.message("hello")
	c.expect(wsproto.EventPlanStart)

	for round := range 3 {
		// Both connections are open before either resumes.
		ws := []*watched{}
		for _, base := range []string{onA, onB} {
			r, _ := connect(t, base)
			ws = append(ws, watch(r, func() {}))
		}
		req := map[string]any{"session_id": hello.SessionID, "resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""}
		for _, w := range ws {
			w.c.send("user.reconnect_with_state", req)
		}
		// One is closed with 4000 (after its answer, or before it) or
		// answered resume_rejected (the other's client had committed the
		// rotation already); the other is left open.
		var win, lose *watched
		select {
		case code := <-ws[0].closed:
			win, lose = ws[1], ws[0]
			if code != wsproto.CloseSessionReplaced {
				t.Fatalf("round %d: closed with %d", round+1, code)
			}
		case code := <-ws[1].closed:
			win, lose = ws[0], ws[1]
			if code != wsproto.CloseSessionReplaced {
				t.Fatalf("round %d: closed with %d", round+1, code)
			}
		case e := <-ws[0].errors:
			win, lose = ws[1], ws[0]
			if e.Code != wsproto.CodeResumeRejected {
				t.Fatalf("round %d: %+v", round+1, e)
			}
		case e := <-ws[1].errors:
			win, lose = ws[0], ws[1]
			if e.Code != wsproto.CodeResumeRejected {
				t.Fatalf("round %d: %+v", round+1, e)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: both resumes left open", round+1)
		}
		var got wsproto.Connected
		select {
		case got = <-win.connected:
		case code := <-win.closed:
			t.Fatalf("round %d: both closed (%d)", round+1, code)
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: the connection left open was not answered", round+1)
		}
		// The open one's token is the store's, and the presented one is
		// retired once its client read it.
		want := sha256.Sum256([]byte(got.ResumeToken))
		eventually(t, "the rotation committed", func() bool {
			m, err := rdb.HMGet(context.Background(), "baton:{"+hello.SessionID+"}:meta", "token", "prev").Result()
			return err == nil && m[0] == hex.EncodeToString(want[:]) && m[1] == nil
		})
		if err := win.c.ws.Ping(context.Background()); err != nil {
			t.Fatalf("round %d: the connection left open: %v", round+1, err)
		}
		for _, base := range []string{onA, onB} {
			resumeWith(t, base, hello.SessionID, hello.ResumeToken, 0).expectError(wsproto.CodeResumeRejected)
		}
		win.c.ws.CloseNow()
		lose.c.ws.CloseNow()
		hello.ResumeToken = got.ResumeToken
	}
	for _, base := range []string{onB, onA} {
		m := meta[wsproto.Connected](t, resumeWith(t, base, hello.SessionID, hello.ResumeToken, 0).expect(wsproto.EventConnected))
		if !m.Resumed {
			t.Fatalf("resume on %s with the newest token: %+v", base, m)
		}
		hello.ResumeToken = m.ResumeToken
	}
}

// TestTokenExpiryCloses: a connection is closed with 4001 once its JWT
// expires (exp plus the 30 s leeway the handshake allows, so a token past
// its exp by 25 s has 5 s left), not before; its session stays, and a
// connection with a fresh JWT resumes it.
func TestTokenExpiryCloses(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--jwt-secret", jwtSecret)
	exp := time.Now().Add(-25 * time.Second).Truncate(time.Second)
	until := exp.Add(auth.DefaultLeeway)
	c, hello := connectAs(t, base, signJWT(t, "alice", exp))
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}})
	last := frames[len(frames)-1].Seq

	code := c.closeCode()
	if at := time.Now(); code != wsproto.CloseTokenExpired || at.Before(until) {
		t.Fatalf("closed with %d at %v before the expiry; want %d, not before %v", code, until.Sub(at), wsproto.CloseTokenExpired, until)
	}
	if _, resp, err := dialWith(t, base, inHeader, signJWT(t, "alice", exp)); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the expired JWT again: %v (%v), want 401", err, status(resp))
	}
	r, _ := connectAs(t, base, signJWT(t, "alice", time.Now().Add(time.Hour)))
	r.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
		"resume_token": hello.ResumeToken, "last_seq": 0, "state_checksum": ""})
	m := meta[wsproto.Connected](t, r.expect(wsproto.EventConnected))
	if !m.Resumed || m.LastSeq != last || m.Replayed == nil || uint64(*m.Replayed) != last {
		t.Fatalf("the resume with a fresh JWT: %+v", m)
	}
}

// TestClientTokenFunc: the Go client asks Options.TokenFunc for the token
// of every connection; when the server closes its connection with 4001
// (the JWT expired), it asks again and resumes the session on a new
// connection, without Options.Resume, and the session goes on.
func TestClientTokenFunc(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--jwt-secret", jwtSecret)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var asked atomic.Int32
	tokenFunc := func(context.Context) (string, error) {
		if asked.Add(1) == 1 { // 25 s past exp: 5 s left of the leeway
			return signJWT(t, "alice", time.Now().Add(-25*time.Second)), nil
		}
		return signJWT(t, "alice", time.Now().Add(time.Hour)), nil
	}
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{TokenFunc: tokenFunc, Token: "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := cl.View().SessionID
	if err := cl.Wait(ctx, func(v client.View) bool { return v.Stats.Resumes == 1 }); err != nil {
		t.Fatalf("no resume after the 4001: %v (last error %v)", err, cl.Err())
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("TokenFunc asked %d times, want 2", n)
	}
	if err := cl.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A"}}); err != nil {
		t.Fatal(err)
	}
	v := waitView(t, ctx, cl, "the run's end", finished)
	if v.SessionID != id || v.Stats.Rejected != 0 || len(v.Stats.Violations) != 0 {
		t.Fatalf("after the renewal: session %s (was %s), stats %+v", v.SessionID, id, v.Stats)
	}
}

// TestJWTSecretFile: --jwt-secret-file reads the secret from a file (a
// trailing newline ignored); a missing, empty or short one is an error
// naming the file, never quoting it, as is giving the secret twice.
func TestJWTSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", jwtSecret+"\n")
	base := startServer(t, "--jwt-secret-file", good)
	if _, resp, err := dialWith(t, base, inHeader, signJWT(t, "alice", time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("a JWT signed with the file's secret: %v (%v)", err, status(resp))
	}
	if _, resp, err := dialWith(t, base, inHeader, forgeJWT(jwtSecret+"\n", `{"sub":"alice","exp":9999999999}`)); err == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a JWT signed with the newline kept: %v (%v), want 401", err, status(resp))
	}

	short := file("short", "short-secret-content\n")
	empty := file("empty", "\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no file", []string{"--jwt-secret-file", dir + "/missing"}, nil,
			"configure: --jwt-secret-file: read the secret file: open " + dir + "/missing: no such file or directory"},
		{"a short secret", []string{"--jwt-secret-file", short}, nil,
			"configure: --jwt-secret-file: auth: an HS256 secret must be at least 32 bytes (RFC 7518 §3.2)"},
		{"an empty file", nil, map[string]string{"BATON_JWT_SECRET_FILE": empty},
			"configure: BATON_JWT_SECRET_FILE: the secret file " + empty + " is empty"},
		{"both", []string{"--jwt-secret-file", good}, map[string]string{"BATON_JWT_SECRET": jwtSecret},
			"configure: BATON_JWT_SECRET and --jwt-secret-file are both set: give the secret once"},
		{"with static tokens", []string{"--jwt-secret-file", good, "--auth-tokens", "a=tok-1"}, nil,
			"configure: --auth-tokens and --jwt-secret-file are both set: choose static tokens or JWTs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refusesConfig(t, tt.args, tt.env, tt.want, "short-secret", jwtSecret, "tok-1")
		})
	}
}

func TestRedactArgs(t *testing.T) {
	tests := []struct {
		name       string
		args, want []string
	}{
		{"jwt secret", []string{"baton", "--jwt-secret", "s3cret", "--addr", ":0"}, []string{"baton", "--jwt-secret", redacted, "--addr", ":0"}},
		{"jwt secret inline", []string{"baton", "-jwt-secret=s3cret"}, []string{"baton", "-jwt-secret=" + redacted}},
		{"jwt secret inline, empty", []string{"baton", "--jwt-secret="}, []string{"baton", "--jwt-secret=" + redacted}},
		{"state key", []string{"baton", "--state-key", "s3cret"}, []string{"baton", "--state-key", redacted}},
		{"static tokens", []string{"baton", "--auth-tokens", "a=tok"}, []string{"baton", "--auth-tokens", redacted}},
		{"static tokens in a file", []string{"baton", "--auth-tokens=@/etc/tokens"}, []string{"baton", "--auth-tokens=@/etc/tokens"}},
		{"redis password", []string{"baton", "--redis-url", "redis://:pw@h:6379/0"}, []string{"baton", "--redis-url", "redis://:" + redacted + "@h:6379/0"}},
		{"redis user and password", []string{"baton", "--redis-url=rediss://u:pw@h/1"}, []string{"baton", "--redis-url=rediss://u:" + redacted + "@h/1"}},
		{"sentinel URL with the master's password", []string{"baton", "--redis-url=redis://:spw@s1:26379/0?master_name=m&password=mpw"},
			[]string{"baton", "--redis-url=redis://:" + redacted + "@s1:26379/0?master_name=m&password=" + redacted}},
		{"redis without a password", []string{"baton", "--redis-url", "redis://h:6379/0"}, []string{"baton", "--redis-url", "redis://h:6379/0"}},
		{"an unparsable URL", []string{"baton", "--openai-base-url", "http://u:p w@[x"}, []string{"baton", "--openai-base-url", redacted}},
		{"the secret file's name", []string{"baton", "--jwt-secret-file", "/run/s"}, []string{"baton", "--jwt-secret-file", "/run/s"}},
		{"last, with no value", []string{"baton", "--jwt-secret"}, []string{"baton", "--jwt-secret"}},
		{"the program's name is kept", []string{"--jwt-secret"}, []string{"--jwt-secret"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]string(nil), tt.args...)
			if got := redactArgs(tt.args); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(in, tt.args) {
				t.Fatalf("the arguments were modified: %q", tt.args)
			}
		})
	}
}

// TestDebugHidesSecrets: a Baton process given its JWT secret as a flag
// shows it neither in /debug/vars (expvar's cmdline) nor in
// /debug/pprof/cmdline, nor in its log; the rest of its command line is
// there. (A process of its own: both endpoints show os.Args, which run's
// tests do not set.)
func TestDebugHidesSecrets(t *testing.T) {
	const secret = "the-jwt-secret-nobody-may-read-0123"
	p := startProcess(t, "--jwt-secret", secret, "--log-level", "debug")
	debugAddr, log := p.debugAddr, p.log // the debug endpoints were up before it listened

	for _, path := range []string{"/debug/vars", "/debug/pprof/cmdline"} {
		resp, err := http.Get("http://" + debugAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v, %s", path, err, resp.Status)
		}
		if strings.Contains(string(b), secret) {
			t.Errorf("%s shows the secret:\n%s", path, b)
		}
		if !strings.Contains(string(b), "--jwt-secret") || !strings.Contains(string(b), redacted) || !strings.Contains(string(b), debugAddr) {
			t.Errorf("%s does not show the command line, redacted:\n%s", path, b)
		}
	}
	if strings.Contains(log.String(), secret) {
		t.Errorf("the log shows the secret:\n%s", log.String())
	}
}
