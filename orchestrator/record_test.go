package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
	"github.com/baton-run/baton/wsproto"
)

// creates is a node's cluster that notes every session it records.
type creates struct {
	*redisstore.Cluster
	mu  sync.Mutex
	ids []string
}

func (c *creates) Create(ctx context.Context, id string, rec orchestrator.Record) error {
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.mu.Unlock()
	return c.Cluster.Create(ctx, id, rec)
}

func (c *creates) created(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.ids, id)
}

// connectedTo reads c's system.connected and returns its session id and
// resume token.
func connectedTo(t *testing.T, c *wsClient) wsproto.Connected {
	t.Helper()
	f, err := c.next(wsproto.EventConnected, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var hello wsproto.Connected
	if err := json.Unmarshal(f.Metadata, &hello); err != nil {
		t.Fatal(err)
	}
	return hello
}

// silentRecorded opens a connection that sends nothing and waits until its
// fresh session is recorded (recordIdle): every fresh session made before
// it, and still open and silent, has been recorded by then too.
func silentRecorded(t *testing.T, cl *creates, url string) wsproto.Connected {
	t.Helper()
	hello := connectedTo(t, dialNode(t, url))
	deadline := time.Now().Add(10 * time.Second)
	for !cl.created(hello.SessionID) {
		if time.Now().After(deadline) {
			t.Fatalf("a silent connection's session %s was not recorded in 10s", hello.SessionID)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition that stays true once true
	}
	return hello
}

// TestFreshSessionRecorded: a connection's fresh session reaches the store
// when it is used — the first frame that is not a resume, or a connection
// that stays silent (so that another server can find it) — and never for
// a connection whose first frame is a resume, answered or refused.
func TestFreshSessionRecorded(t *testing.T) {
	rds := redistest.Start(t)
	cl := &creates{Cluster: joinCluster(t, rds)}
	url := serveNode(t, cl)
	other := serveNode(t, joinCluster(t, rds))

	t.Run("a command", func(t *testing.T) {
		c := dialNode(t, url)
		hello := connectedTo(t, c)
		if cl.created(hello.SessionID) {
			t.Fatal("recorded before its first frame")
		}
		if _, err := c.command(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if !cl.created(hello.SessionID) {
			t.Fatal("not recorded once a command was answered")
		}
		rec, err := cl.Lookup(t.Context(), hello.SessionID)
		if err != nil || rec.Owner != cl.Node() || rec.Conn == "" {
			t.Fatalf("the store holds %+v (%v), want the session owned by %s with its connection", rec, err, cl.Node())
		}
	})

	t.Run("a silent connection, followed on another server", func(t *testing.T) {
		hello := silentRecorded(t, cl, url)
		f := dialNode(t, other)
		connectedTo(t, f)
		f.SendFrame(map[string]any{"event": wsproto.EventUserReconnect, "metadata": map[string]any{
			"session_id": hello.SessionID, "resume_token": hello.FollowToken, "last_seq": 0, "follow": true}})
		got := connectedTo(t, f)
		if !got.Resumed || got.SessionID != hello.SessionID {
			t.Fatalf("the follow on the other server got %+v", got)
		}
	})

	for _, tc := range []struct {
		name   string
		resume func(t *testing.T) (id, token string)
		want   string // the resume's answer: system.connected, or an error code
	}{
		{"a resume", func(t *testing.T) (string, string) {
			h := silentRecorded(t, cl, url)
			return h.SessionID, h.ResumeToken
		}, wsproto.EventConnected},
		{"a resume refused", func(t *testing.T) (string, string) {
			return "sess_00000000-0000-0000-0000-000000000000", "no-such-token"
		}, wsproto.CodeResumeRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, token := tc.resume(t)
			c := dialNode(t, url)
			fresh := connectedTo(t, c)
			c.SendFrame(map[string]any{"event": wsproto.EventUserReconnect, "metadata": map[string]any{
				"session_id": id, "resume_token": token, "last_seq": 0}})
			select {
			case f := <-c.frames:
				got := f.Event
				if f.Event == wsproto.EventError {
					var e wsproto.Error
					if err := json.Unmarshal(f.Metadata, &e); err != nil {
						t.Fatal(err)
					}
					got = e.Code
				}
				if got != tc.want {
					t.Fatalf("the resume was answered %s (%s), want %s", got, f.Metadata, tc.want)
				}
			case <-c.done:
				t.Fatal(errors.Join(errors.New("the connection ended"), c.err))
			case <-time.After(5 * time.Second):
				t.Fatal("the resume was not answered in 5s")
			}
			// A silent connection opened after this one is recorded only
			// once this one's fresh session has been passed over.
			silentRecorded(t, cl, url)
			if cl.created(fresh.SessionID) {
				t.Fatalf("the fresh session %s of a connection that resumed was recorded", fresh.SessionID)
			}
		})
	}
}
