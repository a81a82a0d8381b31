package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// errClaimLost: another server claimed the session first.
var errClaimLost = errors.New("another server claimed the session first")

// huntEvery is how often a server of a cluster looks for runs whose server
// died, and keeps its own sessions alive in the store.
const huntEvery = time.Second

// listen hands other servers' messages to receive until the server closes.
func (s *Server) listen() {
	defer s.clusterWG.Done()
	for s.ctx.Err() == nil {
		err := s.opts.Cluster.Receive(s.ctx, s.receive)
		if err == nil || s.ctx.Err() != nil {
			return // closed, or left the cluster
		}
		s.log.Error("receive from the cluster; again in a second", "err", err)
		select {
		case <-s.ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// adoptOrphans continues the runs of servers that died, forgets the
// followers they served (dropDeadFollowers), and keeps this server's
// sessions from expiring in the store, until the server closes.
func (s *Server) adoptOrphans() {
	defer s.janitorWG.Done()
	t := time.NewTicker(huntEvery)
	defer t.Stop()
	touched := time.Now()
	for {
		select {
		case <-s.janitors.Done():
			return
		case now := <-t.C:
			ctx, cancel := context.WithTimeout(s.janitors, storeTimeout)
			s.adopt(ctx)
			s.dropDeadFollowers(ctx)
			if now.Sub(touched) >= s.opts.SessionTTL/4 {
				s.touch(ctx)
				touched = now
			}
			cancel()
		}
	}
}

// adopt claims and continues every orphaned run it can: those of dead
// servers, and this server's own that it gave up (lost, fenceOnLapse) —
// else such a run would wait for its client to resume it here, and one
// that resumes on another server would be proxied to this one, where
// nothing runs it. A run this server holds is left as it is
// (adoptShared).
func (s *Server) adopt(ctx context.Context) {
	orphans, err := s.opts.Cluster.Orphans(ctx)
	if err != nil {
		s.log.Error("look for orphaned runs", "err", err)
		return
	}
	for _, o := range orphans {
		if ctx.Err() != nil {
			return // the rest at the next hunt
		}
		_, err := s.adoptShared(ctx, o.Session, o.Node)
		switch {
		case errors.Is(err, errAdoptBusy):
			return // resumes are taking them over: the rest at the next hunt
		case errors.Is(err, errLeaseLapsed):
			// Nothing adopted while the lease lapses: the rest at the next
			// hunt, here if it holds again, or by another server.
			s.log.Debug("orphaned runs left: this server's lease lapsed", "session", o.Session, "from", o.Node)
			return
		case err == nil, errors.Is(err, errClaimLost):
		case errors.Is(err, ErrNoSession):
			// Claim forgot the run: no server tries it again.
			s.log.Info("orphaned run forgotten: its session is gone from the store",
				"session", o.Session, "from", o.Node)
		default:
			s.log.Error("take an orphaned run over", "session", o.Session, "from", o.Node, "err", err)
		}
	}
}

// touch keeps this server's sessions alive in the store.
func (s *Server) touch(ctx context.Context) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))
	for id, sess := range s.sessions {
		if !sess.unrecorded.Load() { // the store knows nothing of the others (record.go)
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	if err := s.opts.Cluster.Touch(ctx, ids...); err != nil {
		s.log.Error("keep sessions alive in the store", "err", err)
	}
}

// takeOver claims a session from a server that died (or from this one,
// which gave it up: adopt.go) and continues it here from the store: its
// ring, its state and, from its checkpoint, its run. Call it through
// adoptShared, which runs one at a time per session.
//
// It claims only while this server's lease is held, and starts the run
// only if the lease has not lapsed since (fence.go): else it fails with
// errLeaseLapsed, the session left unregistered and its ring closed
// unwritten — owned here in the store, in this server's runs, to be
// continued by whichever server adopts it next: this one's hunt once the
// lease holds again, or another's that found it lapsed.
func (s *Server) takeOver(ctx context.Context, id, from string) (*session, error) {
	cl := s.opts.Cluster
	term, err := s.currentTerm()
	if err != nil {
		return nil, fmt.Errorf("take %s over: %w", id, err)
	}
	won, err := cl.Claim(ctx, id, from)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", id, err)
	}
	if !won {
		return nil, errClaimLost
	}
	if h := s.opts.AdoptHook; h != nil {
		h(ctx, id)
	}
	// The ring reports to the session restore makes; nothing is written,
	// so nothing reported, before bind names it.
	var late atomic.Pointer[session]
	op, err := cl.Open(ctx, id, RingHooks{
		OnDurable: func(es []buffer.Entry) {
			if sess := late.Load(); sess != nil {
				sess.deliver(es)
			}
		},
		OnLost: func(err error) {
			if sess := late.Load(); sess != nil {
				sess.lost(err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	if expiredIn(op.Record, time.Now(), s.opts.SessionTTL) {
		// Its client left longer than SessionTTL ago: it expired while its
		// server was dead, and is not continued here (nor its run).
		closeRing(op.Ring, s)
		s.forgetShared(id)
		if err := cl.Running(ctx, id, false); err != nil {
			s.log.Error("record the run in the store", "session", id, "err", err)
		}
		s.log.Info("session expired while its server was dead", "session", id, "from", from)
		return nil, fmt.Errorf("take %s over: %w: %w", id, ErrNoSession, errSessionExpired)
	}
	tail, err := op.Ring.Since(ctx, max(op.CheckpointSeq, op.BaseSeq))
	if err != nil {
		closeRing(op.Ring, s)
		return nil, fmt.Errorf("load %s: events after the checkpoint: %w", id, err)
	}
	data, err := op.checkpointData()
	if err != nil {
		closeRing(op.Ring, s)
		return nil, fmt.Errorf("load %s: %w", id, err)
	}
	sess, err := s.restore(ctx, id, op.Record, op.Ring, data, tail, func(sess *session) {
		sess.shared = op.Ring
		late.Store(sess)
	}, func() error { return s.termHoldsLocked(term) })
	if err != nil {
		late.Store(nil) // nothing to report to: the ring closes unwritten
		closeRing(op.Ring, s)
		if errors.Is(err, errLeaseLapsed) {
			s.log.Warn("takeover abandoned: this server's lease lapsed during it", "session", id, "from", from, "err", err)
		}
		return nil, err
	}
	s.log.Info("session taken over", "session", id, "from", from, "checkpoint_seq", op.CheckpointSeq)
	sess.mu.Lock()
	running := sess.run != nil
	sess.mu.Unlock()
	if !running { // Claim counted it as a run of ours
		if err := cl.Running(ctx, id, false); err != nil {
			s.log.Error("record the run in the store", "session", id, "err", err)
		}
	}
	return sess, nil
}

// leftShared is when the store says a session this server owns, with no
// connection here, was left by its client: now while it has a connection
// on another live server (the sweeper then keeps it), and the store's
// Detached when the client left it elsewhere later than it left here.
// Zero when the store knows no later time, or does not answer.
func (s *Server) leftShared(id string, now time.Time) time.Time {
	cl := s.opts.Cluster
	ctx, cancel := context.WithTimeout(s.janitors, storeTimeout)
	defer cancel()
	rec, err := cl.Lookup(ctx, id)
	if err != nil {
		return time.Time{}
	}
	if rec.Conn == "" {
		return rec.Detached
	}
	node, _, _ := strings.Cut(rec.Conn, "/")
	if alive, err := cl.Alive(ctx, node); err != nil || !alive {
		return time.Time{}
	}
	return now
}

// forgetShared deletes an expired session from the store.
func (s *Server) forgetShared(id string) {
	ctx, cancel := context.WithTimeout(s.janitors, storeTimeout)
	defer cancel()
	if err := s.opts.Cluster.Delete(ctx, id); err != nil && !errors.Is(err, ErrNoSession) {
		s.log.Error("delete an expired session from the store", "session", id, "err", err)
	}
}

// markRunning records in the store that the run is in flight here, and
// that it no longer is when it has ended — not when it stops because this
// server closes or lost the session: then it is in flight still, to be
// continued elsewhere. On the run's goroutine.
func (r *run) markRunning(running bool) {
	cl := r.sess.srv.opts.Cluster
	if cl == nil {
		return
	}
	if cause := context.Cause(r.ctx); !running && (cause == ErrServerClosed || cause == errSessionLost) {
		return
	}
	if !running && !r.endStored() {
		return
	}
	ctx, cancel := context.WithTimeout(r.sess.srv.final, storeTimeout)
	defer cancel()
	if err := cl.Running(ctx, r.sess.id, running); err != nil {
		r.sess.srv.log.Error("record the run in the store", "session", r.sess.id, "run", r.id, "err", err)
	}
}

// flusher is a durable ring that can wait until the store holds all it
// was given (redisstore's).
type flusher interface {
	Flush(ctx context.Context) error
}

// endStored waits until the store holds the run's end (its last events
// and checkpoint), and reports whether it does. Until then the run is in
// flight as far as the store knows: a node that gives the session up
// before its end was written (Redis stalled) must leave it in its runs
// set, to be adopted and continued from the last checkpoint stored, or
// nobody ever continues it.
func (r *run) endStored() bool {
	r.sess.mu.Lock()
	f, ok := r.sess.shared.(flusher)
	r.sess.mu.Unlock()
	if !ok {
		return true
	}
	// Flush ends when the ring is lost too, at the latest after its
	// give-up time; the bound is for a store that answers nothing.
	ctx, cancel := context.WithTimeout(r.sess.srv.final, 2*storeTimeout)
	defer cancel()
	if err := f.Flush(ctx); err != nil {
		r.sess.srv.log.Warn("the run's end is not in the store: it stays a run in flight there", "session", r.sess.id, "run", r.id, "err", err)
		return false
	}
	return true
}

// stateOf is the client-visible state of a session loaded from the store:
// its checkpoint's, with the events after it folded in.
func stateOf(ctx context.Context, op Opened, historyRuns int) (wsproto.State, error) {
	st := wsproto.State{HistoryLimit: historyRuns}
	after := op.CheckpointSeq
	data, err := op.checkpointData()
	if err != nil {
		return st, err
	}
	if data != nil {
		var cp checkpoint
		if err := json.Unmarshal(data, &cp); err != nil {
			return st, fmt.Errorf("decode checkpoint: %w", err)
		}
		st = wsproto.State{Phase: cp.Phase, Run: cp.Run, History: cp.History, HistoryLimit: historyRuns}
		after = cp.Seq
	}
	// Acks and eviction may have dropped events after the checkpoint:
	// those were progress, which the state can do without (every
	// transition writes a checkpoint with its event).
	tail, err := op.Ring.Since(ctx, max(after, op.BaseSeq))
	if err != nil {
		return st, fmt.Errorf("events after the checkpoint: %w", err)
	}
	for _, e := range tail {
		if err := applyFrame(&st, e.Data); err != nil {
			return st, fmt.Errorf("event %d: %w", e.Seq, err)
		}
	}
	return st, nil
}

// applyFrame folds an encoded event into st.
func applyFrame(st *wsproto.State, data []byte) error {
	var f struct {
		Event    string          `json:"event"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("decode frame: %w", err)
	}
	return st.ApplyJSON(f.Event, f.Metadata)
}
