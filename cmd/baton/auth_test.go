package main

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/internal/wstest"
	"github.com/baton-run/baton/openai/openaitest"
	"github.com/baton-run/baton/wsproto"
)

const (
	aliceToken = "tok-alice-0123456789"
	bobToken   = "tok-bob-0123456789"
	jwtSecret  = "a-test-secret-of-at-least-32-bytes!"
)

// twoSubjects is a server's --auth-tokens for alice and bob.
var twoSubjects = []string{"--auth-tokens", "alice=" + aliceToken + ",bob=" + bobToken}

// How a test client passes its token.
const (
	inHeader   = "Authorization"
	inQuery    = "access_token"
	inProtocol = "subprotocol"
)

// dialWith opens a WebSocket passing token the way how says ("" for no
// token). It returns the connection, or the refused handshake's response.
func dialWith(t *testing.T, base, how, token string) (*conn, *http.Response, error) {
	t.Helper()
	u := wsURL(base)
	opts := &wstest.Options{HTTPHeader: http.Header{}}
	switch how {
	case inHeader:
		opts.HTTPHeader.Set("Authorization", "Bearer "+token)
	case inQuery:
		u += "?access_token=" + url.QueryEscape(token)
	case inProtocol:
		opts.Subprotocols = []string{auth.Subprotocol, auth.BearerPrefix + token}
	}
	w, resp, err := wstest.TryDial(t, u, connOptions(opts))
	if err != nil {
		return nil, resp, err
	}
	return newConn(t, w), resp, nil
}

// connectAs dials with a token in the Authorization header and reads
// system.connected.
func connectAs(t *testing.T, base, token string) (*conn, wsproto.Connected) {
	t.Helper()
	c, resp, err := dialWith(t, base, inHeader, token)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, status(resp))
	}
	var m wsproto.Connected
	c.expectMeta(wsproto.EventConnected, &m)
	return c, m
}

func status(resp *http.Response) string {
	if resp == nil {
		return "no response"
	}
	return resp.Status
}

// TestAuthHandshake: with authentication on, a handshake without a valid
// credential is refused with 401 and a Bearer challenge before any
// upgrade; a good one works in each of the three places a client may put
// it. The log never holds a token.
func TestAuthHandshake(t *testing.T) {
	t.Parallel()
	var staticLog, jwtLog logSink
	static := startServerLogging(t, &staticLog, twoSubjects...)
	jwts := startServerLogging(t, &jwtLog, "--jwt-secret", jwtSecret)
	sign := func(claims map[string]any) string {
		tok, err := auth.SignHS256([]byte(jwtSecret), claims)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	hour := time.Now().Add(time.Hour).Unix()
	good := sign(map[string]any{"sub": "carol", "exp": hour})
	expired := sign(map[string]any{"sub": "carol", "exp": time.Now().Add(-time.Hour).Unix()})
	// Carol's signature on a payload naming mallory; carol's payload with
	// alg none and no signature.
	part := func(tok string, i int) string { return strings.Split(tok, ".")[i] }
	forged := part(good, 0) + "." + part(sign(map[string]any{"sub": "mallory", "exp": hour}), 1) + "." + part(good, 2)
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + part(good, 1) + "."

	tests := []struct {
		name      string
		base      string
		how       string
		token     string
		challenge string // want a 401 with this WWW-Authenticate; "" wants the upgrade
	}{
		{"no token", static, "", "", `Bearer realm="baton"`},
		{"an unknown token", static, inHeader, "tok-nobody-0123456789", `Bearer realm="baton", error="invalid_token"`},
		{"an unknown token in the query", static, inQuery, "tok-nobody-0123456789", `Bearer realm="baton", error="invalid_token"`},
		{"an unknown token as a subprotocol", static, inProtocol, "tok-nobody-0123456789", `Bearer realm="baton", error="invalid_token"`},
		{"a token cut short", static, inHeader, aliceToken[:len(aliceToken)-1], `Bearer realm="baton", error="invalid_token"`},
		{"good, in Authorization", static, inHeader, aliceToken, ""},
		{"good, in access_token", static, inQuery, aliceToken, ""},
		{"good, as a subprotocol", static, inProtocol, bobToken, ""},
		{"a JWT, in Authorization", jwts, inHeader, good, ""},
		{"a JWT, in access_token", jwts, inQuery, good, ""},
		{"a JWT, as a subprotocol", jwts, inProtocol, good, ""},
		{"no JWT", jwts, "", "", `Bearer realm="baton"`},
		{"an expired JWT", jwts, inHeader, expired, `Bearer realm="baton", error="invalid_token"`},
		{"a tampered JWT", jwts, inHeader, forged, `Bearer realm="baton", error="invalid_token"`},
		{"an alg none JWT", jwts, inProtocol, none, `Bearer realm="baton", error="invalid_token"`},
		{"a static token on the JWT server", jwts, inHeader, aliceToken, `Bearer realm="baton", error="invalid_token"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, resp, err := dialWith(t, tt.base, tt.how, tt.token)
			if tt.challenge != "" {
				if err == nil {
					t.Fatalf("the handshake was upgraded")
				}
				if resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != tt.challenge {
					t.Fatalf("refused with %v, challenge %q; want 401, %q", status(resp), resp.Header.Get("WWW-Authenticate"), tt.challenge)
				}
				return
			}
			if err != nil {
				t.Fatalf("dial: %v (%v)", err, status(resp))
			}
			if tt.how == inProtocol && c.ws.Subprotocol() != auth.Subprotocol {
				t.Errorf("subprotocol %q selected, want %q (a browser fails the handshake otherwise)", c.ws.Subprotocol(), auth.Subprotocol)
			}
			c.expect(wsproto.EventConnected)
			c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "a", Title: "A"}}})
			c.until(wsproto.EventFinalAnswer)
		})
	}

	// A plain HTTP request is refused the same way: nothing before the
	// credential is served.
	resp, err := http.Get(static + "/ws")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "authentication required") {
		t.Errorf("GET /ws without a token: %s %q", resp.Status, body)
	}

	for _, l := range []*logSink{&staticLog, &jwtLog} {
		for _, secret := range []string{aliceToken, bobToken, good, expired, jwtSecret, "tok-nobody"} {
			if strings.Contains(l.String(), secret) {
				t.Errorf("the log holds a credential %q", secret)
			}
		}
	}
	if staticLog.find(t, "websocket handshake unauthenticated", nil) == nil {
		t.Errorf("no log of a refused handshake")
	}
	if staticLog.find(t, "connection opened", map[string]any{"subject": "alice"}) == nil ||
		jwtLog.find(t, "run started", map[string]any{"subject": "carol"}) == nil {
		t.Errorf("the connection and run logs do not name the subject")
	}
}

// TestCrossSubjectResume: a session belongs to the subject that created
// it. Another subject holding its id and resume token is answered
// resume_rejected, exactly as for a session that does not exist, and the
// session is untouched: its owner resumes it afterwards.
func TestCrossSubjectResume(t *testing.T) {
	t.Parallel()
	base := startServer(t, twoSubjects...)
	alice, hello := connectAs(t, base, aliceToken)
	frames := solveAll(t, alice, []wsproto.Task{{ID: "a", Title: "A"}})
	last := frames[len(frames)-1].Seq
	sums := checksums(frames)
	alice.ws.CloseNow()

	resumeAs := func(token, sessionID string) *conn {
		c, _ := connectAs(t, base, token)
		c.send("user.reconnect_with_state", map[string]any{"session_id": sessionID,
			"resume_token": hello.ResumeToken, "last_seq": 1, "state_checksum": sums[1]})
		return c
	}
	stolen := resumeAs(bobToken, hello.SessionID).expectError(wsproto.CodeResumeRejected)
	unknown := resumeAs(bobToken, "sess_00000000-0000-0000-0000-000000000000").expectError(wsproto.CodeResumeRejected)
	if !reflect.DeepEqual(stolen, unknown) {
		t.Errorf("another subject's session is answered %+v, an unknown one %+v: they must not differ", stolen, unknown)
	}

	mine := resumeAs(aliceToken, hello.SessionID)
	m := meta[wsproto.Connected](mine.t, mine.expect(wsproto.EventConnected))
	if !m.Resumed || m.SessionID != hello.SessionID || m.LastSeq != last || m.Replayed == nil || uint64(*m.Replayed) != last-1 {
		t.Fatalf("the owner's resume after the refused one: %+v", m)
	}
}

// TestBudgetRuns: a subject starting runs faster than
// --budget-runs-per-minute is answered rate_limited, saying when to
// retry, and nothing starts; other subjects keep their own budget.
func TestBudgetRuns(t *testing.T) {
	t.Parallel()
	base := startServer(t, append([]string{"--budget-runs-per-minute", "2"}, twoSubjects...)...)
	alice, _ := connectAs(t, base, aliceToken)
	task := []wsproto.Task{{ID: "a", Title: "A"}}
	solveAll(t, alice, task)
	// The budget is the subject's, across its sessions.
	other, _ := connectAs(t, base, aliceToken)
	solveAll(t, other, task)

	alice.send("user.solve_tasks", map[string]any{"tasks": task})
	e := alice.expectError(wsproto.CodeRateLimited)
	if e.RefType != wsproto.EventUserSolve || !strings.Contains(e.Message, "more than 2 runs started in a minute; retry in ") {
		t.Errorf("rate_limited %+v", e)
	}
	alice.message("Plan something")
	alice.expectError(wsproto.CodeRateLimited)
	alice.send("user.cancel", nil)
	alice.expectError(wsproto.CodeNoActiveRun) // the refused starts started nothing

	bob, _ := connectAs(t, base, bobToken)
	solveAll(t, bob, task)
}

// TestBudgetTokens: once a subject's runs have used
// --budget-tokens-per-day (counted from the model's usage), it cannot
// start another run that day; another subject still can.
func TestBudgetTokens(t *testing.T) {
	t.Parallel()
	fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan }, nil))
	base := startServer(t, append([]string{"--model", "openai", "--openai-base-url", fake.BaseURL(), "--openai-model", "test-model",
		"--budget-tokens-per-day", "30"}, twoSubjects...)...)
	alice, _ := connectAs(t, base, aliceToken)
	frames := solveAll(t, alice, []wsproto.Task{{ID: "a", Title: "A"}}) // a task and the aggregation: 36 tokens
	if used := meta[wsproto.PipelineCompleted](t, framesOf(frames, wsproto.EventPipelineCompleted)[0]).Usage.TotalTokens; used != 36 {
		t.Fatalf("the run used %d tokens, want 36", used)
	}
	alice.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{{ID: "b", Title: "B"}}})
	if e := alice.expectError(wsproto.CodeRateLimited); !strings.Contains(e.Message, "daily budget of 30 model tokens is spent; runs may start again at 00:00 UTC") {
		t.Errorf("rate_limited %+v", e)
	}
	bob, _ := connectAs(t, base, bobToken)
	solveAll(t, bob, []wsproto.Task{{ID: "a", Title: "A"}})
}

// TestAuthConfig: the authentication flags are checked at start, and an
// error names the flag and the line, never a token.
func TestAuthConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := file("bad", "# who may connect\nalice=tok-alice-0123456789\nsecret-without-subject\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"both", []string{"--auth-tokens", "a=tok"}, map[string]string{"BATON_JWT_SECRET": jwtSecret},
			"configure: --auth-tokens and BATON_JWT_SECRET are both set: choose static tokens or JWTs"},
		{"an empty token", []string{"--auth-tokens", "alice=,bob=tok"}, nil,
			`configure: --auth-tokens: entry 1: empty token for subject "alice"`},
		{"no subject", []string{"--auth-tokens", "tok-only"}, nil,
			"configure: --auth-tokens: entry 1: no '='; want SUBJECT=TOKEN"},
		{"a malformed line", []string{"--auth-tokens", "@" + bad}, nil,
			"configure: --auth-tokens: " + bad + ":3: no '='; want SUBJECT=TOKEN"},
		{"no file", nil, map[string]string{"BATON_AUTH_TOKENS": "@" + dir + "/missing"},
			"configure: BATON_AUTH_TOKENS: read the token file: open " + dir + "/missing: no such file or directory"},
		{"a token twice", []string{"--auth-tokens", "a=tok-1,b=tok-1"}, nil,
			"configure: --auth-tokens: auth: tokens 1 and 2 are the same (a token names one subject)"},
		{"a short secret", []string{"--jwt-secret", "short"}, nil,
			"configure: --jwt-secret: auth: an HS256 secret must be at least 32 bytes (RFC 7518 §3.2)"},
		{"a negative budget", []string{"--budget-runs-per-minute", "-1"}, nil,
			"configure: --budget-runs-per-minute: must not be negative (got -1; 0 is unlimited)"},
		{"a negative token budget", nil, map[string]string{"BATON_BUDGET_TOKENS_PER_DAY": "-5"},
			"configure: BATON_BUDGET_TOKENS_PER_DAY: must not be negative (got -5; 0 is unlimited)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refusesConfig(t, tt.args, tt.env, tt.want, "tok-alice", "secret-without", "tok-1", "short", jwtSecret)
		})
	}
}

// refusesConfig runs Baton with args (on a free loopback port) and env,
// and checks that it stops at once with the error want, which quotes none
// of secrets.
func refusesConfig(t *testing.T, args []string, env map[string]string, want string, secrets ...string) {
	t.Helper()
	args = append([]string{"--addr", "127.0.0.1:0"}, args...)
	err := run(context.Background(), args, func(k string) string { return env[k] }, io.Discard, io.Discard)
	if err == nil || err.Error() != want {
		t.Fatalf("run: %v\nwant: %s", err, want)
	}
	for _, secret := range secrets {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the error quotes a secret: %v", err)
		}
	}
}

// TestExposureWarning: Baton warns at start when it listens beyond
// loopback with no authentication — and, with a real model, that anyone
// reaching the port spends the key — and says nothing of the kind on
// loopback or with authentication on.
func TestExposureWarning(t *testing.T) {
	t.Parallel()
	fake := openaitest.NewServer(t, fakeModel(func(int64) string { return fakePlan }, nil))
	openai := []string{"--model", "openai", "--openai-base-url", fake.BaseURL(), "--openai-model", "test-model"}
	const (
		exposed = "no authentication and listening beyond this machine: anyone who reaches the port can start runs; " +
			"keep it on a trusted network, listen on 127.0.0.1, or set --auth-tokens or --jwt-secret"
		spends = "with --model openai and no authentication, anyone who reaches the port spends the model key"
	)
	tests := []struct {
		name   string
		args   []string
		warned []string
	}{
		{"every interface", []string{"--addr", ":0"}, []string{exposed}},
		{"0.0.0.0", []string{"--addr", "0.0.0.0:0"}, []string{exposed}},
		{"every interface, a real model", append([]string{"--addr", ":0"}, openai...), []string{exposed, spends}},
		{"loopback", []string{"--addr", "127.0.0.1:0"}, nil},
		{"loopback, a real model", append([]string{"--addr", "127.0.0.1:0"}, openai...), nil},
		{"every interface with tokens", append([]string{"--addr", ":0"}, twoSubjects...), nil},
		{"every interface with JWTs, a real model", append([]string{"--addr", ":0", "--jwt-secret", jwtSecret}, openai...), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log logSink
			startServerLogging(t, &log, tt.args...) // the warnings come before "baton listening"
			var got []string
			for _, r := range log.records(t) {
				if r["level"] == "WARN" && (r["msg"] == exposed || r["msg"] == spends) {
					got = append(got, r["msg"].(string))
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.warned, "\n") {
				t.Errorf("warnings %q, want %q", got, tt.warned)
			}
		})
	}
}

// TestClusterCrossSubjectResume: with the Redis store, a session's subject
// travels with it. Another subject is rejected on a node that serves the
// session from the store, and again once that node has taken the session
// over from its dead owner; the owner's subject resumes it both times.
func TestClusterCrossSubjectResume(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL(), twoSubjects...)
	b := startNode(t, "B", "127.0.0.1:0", rds.URL(), twoSubjects...)
	onA, onB := "http://"+a.addr, "http://"+b.addr

	alice, hello := connectAs(t, onA, aliceToken)
	alice.send("user.solve_tasks", map[string]any{"tasks": slowTasks(3)})
	alice.expect(wsproto.EventSolverStart)
	// Each resume rotates the resume token: every one presents the latest.
	resumeToken := hello.ResumeToken
	resumeAs := func(token string) *conn {
		c, _ := connectAs(t, onB, token)
		c.send("user.reconnect_with_state", map[string]any{"session_id": hello.SessionID,
			"resume_token": resumeToken, "last_seq": 0, "state_checksum": ""})
		return c
	}

	resumeAs(bobToken).expectError(wsproto.CodeResumeRejected) // served from the store
	m := meta[wsproto.Connected](t, resumeAs(aliceToken).expect(wsproto.EventConnected))
	if !m.Resumed {
		t.Fatalf("alice's resume through B: %+v", m)
	}
	resumeToken = m.ResumeToken

	a.kill(t)
	// The lease lapses in about 3 s; the deadline leaves room for a loaded machine.
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(b.log.String(), "session taken over"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B did not take the session over within 60 s")
		}
	}
	resumeAs(bobToken).expectError(wsproto.CodeResumeRejected) // held by B now
	back := resumeAs(aliceToken)
	if m := meta[wsproto.Connected](t, back.expect(wsproto.EventConnected)); !m.Resumed {
		t.Fatalf("alice's resume on B after the takeover: %+v", m)
	}
	back.until(wsproto.EventFinalAnswer)
}
