package main

import (
	"context"
	"sync"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/wsproto"
)

// count is how many records have message msg and every attribute of want.
func (l *logSink) count(t *testing.T, msg string, want map[string]any) int {
	t.Helper()
	n := 0
	for _, r := range l.records(t) {
		if r["msg"] != msg {
			continue
		}
		match := true
		for k, v := range want {
			if r[k] != v {
				match = false
			}
		}
		if match {
			n++
		}
	}
	return n
}

// keepReading reads c until the test ends, which answers the server's
// pings as any client that reads does; the frames are dropped. The
// cleanup closes c and waits for the reader.
func keepReading(t *testing.T, c *conn) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// readUntilCommitted reads c, answering pings, until the server has
// logged its n-th "resume token committed" for session id, then closes c.
func readUntilCommitted(t *testing.T, logs *logSink, c *conn, id string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()
	eventually(t, "the commit", func() bool {
		return logs.count(t, "resume token committed", map[string]any{"session": id}) == n
	})
}

// resumeUnread resumes sessionID with token on a connection that never
// reads the answer (nor answers a ping): once the server has resumed the
// session, the connection is dropped (drop) or left open, unread.
func resumeUnread(t *testing.T, base string, logs *logSink, sessionID, token string, drop bool) {
	t.Helper()
	c, fresh := connect(t, base)
	c.send("user.reconnect_with_state", map[string]any{"session_id": sessionID,
		"resume_token": token, "last_seq": 0, "state_checksum": ""})
	eventually(t, "the resume", func() bool {
		attrs := map[string]any{"session": sessionID, "from_session": fresh.SessionID}
		return logs.count(t, "session resumed", attrs)+logs.count(t, "session resumed from the store", attrs) == 1
	})
	if drop {
		c.ws.CloseNow()
	}
}

// resumed reads the answer to a resume, which must be a resume of id.
func resumed(t *testing.T, c *conn, id string) wsproto.Connected {
	t.Helper()
	m := meta[wsproto.Connected](t, c.expect(wsproto.EventConnected))
	if !m.Resumed || m.SessionID != id || len(m.ResumeToken) < 43 {
		t.Fatalf("the resume of %s: %+v", id, m)
	}
	return m
}

// TestResumeAnswerLost: a client whose connection is lost after it sent
// its resume and before it read the answer (closed at once, or never read)
// has not learnt the new token; the one it sent still resumes, and gets a
// fresh token, while the one it never read stops working.
func TestResumeAnswerLost(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs)
	for _, tt := range []struct {
		name string
		drop bool
	}{
		{"dropped at once", true},
		{"open, never read", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, hello := connect(t, base)
			c.ws.CloseNow()
			resumeUnread(t, base, logs, hello.SessionID, hello.ResumeToken, tt.drop)
			r := resumeWith(t, base, hello.SessionID, hello.ResumeToken, 0)
			m := resumed(t, r, hello.SessionID)
			if m.ResumeToken == hello.ResumeToken {
				t.Fatalf("the resume answered the token it was sent")
			}
			// A second lost answer: the first token still works.
			resumeUnread(t, base, logs, hello.SessionID, hello.ResumeToken, tt.drop)
			r = resumeWith(t, base, hello.SessionID, hello.ResumeToken, 0)
			last := resumed(t, r, hello.SessionID)
			// The token of the answer before, which its client never
			// used, is dead.
			resumeWith(t, base, hello.SessionID, m.ResumeToken, 0).expectError(wsproto.CodeResumeRejected)
			resumed(t, resumeWith(t, base, hello.SessionID, last.ResumeToken, 0), hello.SessionID)
		})
	}
}

// TestResumeTokenCommitted: once the client has read the answer to its
// resume (it answered the ping the server wrote after it: the server logs
// "resume token committed"), the token it sent stops working; a thief
// with it is rejected. A thief with the current token gets in once, and
// after its commit the session's own client is refused: the theft shows.
func TestResumeTokenCommitted(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	base := startServerLogging(t, logs, "--log-format", "json")
	c, hello := connect(t, base)
	frames := solveAll(t, c, []wsproto.Task{{ID: "a", Title: "A"}})
	last := frames[len(frames)-1].Seq
	c.ws.CloseNow()
	id := hello.SessionID
	committed := func(n int) {
		t.Helper()
		eventually(t, "the commit", func() bool {
			return logs.count(t, "resume token committed", map[string]any{"session": id}) == n
		})
	}

	owner := resumeWith(t, base, id, hello.ResumeToken, last)
	m := resumed(t, owner, id)
	keepReading(t, owner)
	committed(1)
	resumeWith(t, base, id, hello.ResumeToken, last).expectError(wsproto.CodeResumeRejected)

	// The thief has the owner's current token.
	thief := resumeWith(t, base, id, m.ResumeToken, last)
	resumed(t, thief, id)
	keepReading(t, thief)
	committed(2)
	resumeWith(t, base, id, m.ResumeToken, last).expectError(wsproto.CodeResumeRejected)
	resumeWith(t, base, id, hello.ResumeToken, last).expectError(wsproto.CodeResumeRejected)
}

// TestClusterResumeAnswerLost: the same across two servers on Redis: a
// resume on B of A's session whose answer is lost leaves the token good on
// A; once a client on B has read its answer, the token before is refused
// on both.
func TestClusterResumeAnswerLost(t *testing.T) {
	rds := redistest.Start(t)
	a := startNode(t, "A", "127.0.0.1:0", rds.URL(), "--log-format", "json")
	b := startNode(t, "B", "127.0.0.1:0", rds.URL(), "--log-format", "json")
	onA, onB := "http://"+a.addr, "http://"+b.addr

	c, hello := connect(t, onA)
	c.message("hello")
	c.expect(wsproto.EventPlanStart)
	id := hello.SessionID

	resumeUnread(t, onB, b.log, id, hello.ResumeToken, true)
	m := resumed(t, resumeWith(t, onA, id, hello.ResumeToken, 0), id)

	r := resumeWith(t, onB, id, m.ResumeToken, 0)
	m = resumed(t, r, id)
	keepReading(t, r)
	eventually(t, "the commit on B", func() bool {
		return b.log.count(t, "resume token committed", map[string]any{"session": id}) == 1
	})
	for _, base := range []string{onA, onB} {
		resumeWith(t, base, id, hello.ResumeToken, 0).expectError(wsproto.CodeResumeRejected)
	}
	resumed(t, resumeWith(t, onA, id, m.ResumeToken, 0), id)
}
