package orchestrator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stubborn is a model that ignores cancellation: a turn returns only when
// the test releases it.
type stubborn struct {
	entered chan struct{} // receives once per turn begun
	release chan struct{} // closed to let every turn return
}

func (m stubborn) Turn(context.Context, *solver.Turn, func(float64, string)) (solver.Reply, error) {
	m.entered <- struct{}{}
	<-m.release
	return solver.Reply{Text: "late"}, nil
}

// TestCloseBoundsTheWaitForRuns: a run whose model does not return on
// cancellation holds Close only until Close's context ends.
func TestCloseBoundsTheWaitForRuns(t *testing.T) {
	model := stubborn{entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv, err := New(Models{&planner.Sim{}, model, &aggregator.Sim{}}, &Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, _ := srv.newSession(context.Background(), "")
	if e := sess.startRun("", []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}}}, false); e != nil {
		t.Fatal(e.Message)
	}
	select {
	case <-model.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the model was never called")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = srv.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the context's deadline", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Close took %v past its 50ms context", took)
	}
	if n := srv.Sessions(); n != 0 {
		t.Errorf("%d sessions after Close", n)
	}
	close(model.release) // the run ends now; goleak checks nothing stays
	srv.runWG.Wait()
}

// TestExpireRechecksTheTTL: the sweeper picks sessions from a reading
// taken without their lock; expire decides again under it.
func TestExpireRechecksTheTTL(t *testing.T) {
	const ttl = time.Minute
	now := time.Now()
	tests := []struct {
		name    string
		prepare func(sess *session)
		expired bool
	}{
		{"detached for longer than the TTL", func(sess *session) {
			sess.detachedAt.Store(now.Add(-ttl - time.Second).UnixNano())
		}, true},
		{"resumed and dropped again since the sweeper looked", func(sess *session) {
			sess.detachedAt.Store(now.Add(-time.Second).UnixNano())
		}, false},
		{"dropped after the sweeper's tick", func(sess *session) {
			sess.detachedAt.Store(now.Add(time.Millisecond).UnixNano())
		}, false},
		{"attached", func(sess *session) {
			sess.members = []*member{{c: &conn{}}}
			sess.detachedAt.Store(0)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := New(simModels(), &Options{SessionTTL: ttl, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			tt.prepare(sess)
			if got := sess.expire(now); got != tt.expired {
				t.Errorf("expire = %v, want %v", got, tt.expired)
			}
			if kept := srv.lookup(sess.id) != nil; kept == tt.expired {
				t.Errorf("session kept: %v, want %v", kept, !tt.expired)
			}
			if freed := sess.ctx.Err() != nil; freed != tt.expired {
				t.Errorf("session context done: %v, want %v", freed, tt.expired)
			}
		})
	}
}

// closingRing is a Ring that holds resources: it records its Close and any
// call made after it.
type closingRing struct {
	buffer.Ring
	mu     sync.Mutex // guards closed, late
	closed int
	late   []string
}

func (r *closingRing) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed++
	return nil
}

func (r *closingRing) call(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed > 0 {
		r.late = append(r.late, name)
	}
}

func (r *closingRing) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	r.call("Append")
	return r.Ring.Append(ctx, id, encode)
}

func (r *closingRing) Ack(ctx context.Context, lastSeq uint64) error {
	r.call("Ack")
	return r.Ring.Ack(ctx, lastSeq)
}

func (r *closingRing) state() (closed int, late []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed, append([]string(nil), r.late...)
}

// TestRingClosedWhenTheSessionIsFreed: a ring that implements io.Closer is
// closed once, whichever way its session goes, and not called after.
func TestRingClosedWhenTheSessionIsFreed(t *testing.T) {
	tests := []struct {
		name string
		free func(srv *Server, sess *session)
	}{
		{"discarded", func(srv *Server, sess *session) { srv.dropSession(sess); srv.dropSession(sess) }},
		{"expired", func(srv *Server, sess *session) {
			sess.detachedAt.Store(time.Now().Add(-time.Hour).UnixNano())
			sess.expire(time.Now())
		}},
		{"server closed", func(srv *Server, sess *session) { srv.Close(context.Background()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ring *closingRing
			srv, err := New(simModels(), &Options{SessionTTL: time.Minute, Logger: quiet(),
				NewRing: func(n int) buffer.Ring { ring = &closingRing{Ring: buffer.NewMemory(n)}; return ring }})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			sess.emit(wsproto.EventPlanStart, "", "", &wsproto.PlanStart{RunID: "run_1"})
			tt.free(srv, sess)
			sess.emit(wsproto.EventPlanStart, "", "", &wsproto.PlanStart{RunID: "run_2"})
			if e := sess.ack("", 1); e == nil || e.Code != wsproto.CodeInternal {
				t.Errorf("ack on a freed session: %+v, want internal", e)
			}
			if closed, late := ring.state(); closed != 1 || len(late) != 0 {
				t.Errorf("ring closed %d times, called after: %v; want once, never", closed, late)
			}
		})
	}
}
