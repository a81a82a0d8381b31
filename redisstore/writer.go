package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/buffer"
)

// writeTimeout bounds one round trip of the writer (where the client
// honours context deadlines; its own read and write timeouts apply too),
// or Options.GiveUpAfter when that is shorter: a write must not outlast
// the patience of the rings it carries.
const writeTimeout = 10 * time.Second

// replicaWait is how long one round trip's WAIT waits for the replicas
// (Options.Replicas, replicaSet) before the write is sent again. Well under the
// client's read timeout (3 s by default), which would close the
// connection instead.
const replicaWait = time.Second

// job is one session's write in a round trip: the ring's flight, to be
// written after the seq Redis held when it was taken.
type job struct {
	r       *Ring
	from    uint64
	fromSum string
}

// run is the writer: it takes the rings with committed units, writes them
// in one pipeline, and hands each ring its outcome, until Close; then it
// goes on while there is work, for up to Options.FlushTimeout.
func (s *Store) run() {
	defer close(s.done)
	defer s.abandon()
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second),
		backoff.WithMaxElapsedTime(0), // each ring gives up on its own (GiveUpAfter)
	)
	stopping := false
	var deadline time.Time
	for {
		if stopping && !time.Now().Before(deadline) {
			return
		}
		jobs, lost := s.take()
		for _, r := range lost {
			r.tellLost()
		}
		if len(jobs) == 0 {
			if len(lost) > 0 {
				continue
			}
			if stopping {
				return
			}
			select {
			case <-s.wake:
			case <-s.stop:
				stopping, deadline = true, time.Now().Add(s.opt.FlushTimeout)
			}
			continue
		}
		if !s.write(jobs) {
			bo.Reset()
			continue
		}
		// Some writes failed for a reason that may pass: wait before the
		// next try, less once closing so the flush ends in time.
		d := bo.NextBackOff()
		if stopping {
			d = min(d, time.Until(deadline))
		}
		t := time.NewTimer(d)
		if stopping {
			<-t.C
		} else {
			select {
			case <-t.C:
			case <-s.stop:
				stopping, deadline = true, time.Now().Add(s.opt.FlushTimeout)
			}
		}
		t.Stop()
	}
}

// take removes up to MaxBatch rings from the ready list and returns the
// writes to send for them, and the rings whose loss must be told.
func (s *Store) take() (jobs []job, lost []*Ring) {
	s.mu.Lock()
	n := min(len(s.ready), s.opt.MaxBatch)
	rings := make([]*Ring, n)
	copy(rings, s.ready)
	m := copy(s.ready, s.ready[n:])
	clear(s.ready[m:])
	s.ready = s.ready[:m]
	s.mu.Unlock()

	jobs = make([]job, 0, n)
	for _, r := range rings {
		r.mu.Lock()
		r.queued = false
		switch {
		case r.lost != nil:
			if !r.lostTold {
				r.lostTold = true
				lost = append(lost, r)
			}
		case !r.ready.empty():
			r.flight, r.ready, r.inflight = r.ready, unit{}, true
			jobs = append(jobs, job{r: r, from: r.durSeq, fromSum: r.durSum})
		}
		r.settleLocked()
		r.mu.Unlock()
	}
	return jobs, lost
}

// write sends jobs in one pipeline and hands each ring its outcome. It
// reports whether any failed for a reason that may pass.
func (s *Store) write(jobs []job) (failed bool) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), min(writeTimeout, s.opt.GiveUpAfter))
	defer cancel()
	var cmds []*redis.Cmd
	var unreplicated []error // by job: why its replicas do not count it yet; nil: they all do
	if cc := clusterOf(s.client); cc != nil && s.replicas.waits() {
		cmds, unreplicated = s.writeShards(ctx, cc, jobs)
	} else {
		pipe := s.client.Pipeline()
		cmds = make([]*redis.Cmd, len(jobs))
		for i, j := range jobs {
			cmds[i] = appendScript.EvalSha(ctx, pipe, j.scriptKeys(), j.args()...)
		}
		replicas := s.replicas.queue(ctx, pipe, replicaWait)
		_, _ = pipe.Exec(ctx) // each command's error is read below
		if err := replicas.check(); err != nil {
			unreplicated = make([]error, len(jobs))
			for i := range unreplicated {
				unreplicated[i] = err
			}
		}
	}
	s.written.roundTrips.Add(1)
	s.written.scripts.Add(uint64(len(jobs)))

	noScript, redirects := false, false
	var firstErr error
	// fail ends j's flight on err: the session is lost when Redis refused
	// the write for good (scriptError), else the flight waits for a retry.
	fail := func(j job, err error) {
		if serr := scriptError(err); serr != err {
			err = fmt.Errorf("redisstore: write session %s: %w", j.r.id, serr)
			s.log.Warn("redisstore: session lost", "session", j.r.id, "err", err)
			j.r.lose(err)
			return
		}
		failed = true
		if firstErr == nil {
			firstErr = err
		}
		j.r.retry(fmt.Errorf("redisstore: write session %s: %w", j.r.id, err), began)
	}
	for i, j := range jobs {
		err := cmds[i].Err()
		switch {
		case err == nil && unreplicated != nil && unreplicated[i] != nil:
			// The master has it, too few replicas do: a failover could
			// lose it. Send it again (the script skips what is there).
			fail(j, unreplicated[i])
		case err == nil:
			s.written.entries.Add(uint64(len(j.r.flight.events)))
			j.r.written()
		case redis.HasErrorPrefix(err, codeBehind):
			// Redis lost writes it had acknowledged: fence them off, then
			// send the flight again.
			if ferr := s.fence(ctx, j, err); ferr != nil {
				fail(j, ferr)
				continue
			}
			j.r.retry(nil, began)
		case redis.HasErrorPrefix(err, "NOSCRIPT") || errors.Is(err, redis.ErrNoScript):
			// Redis lost its script cache (restarted): load it and send
			// again; the script had not run.
			noScript = true
			j.r.retry(nil, began)
		case redirected(err):
			// A cluster's slot moved, or is moving (writeShards): send it
			// again once the slot map is reloaded. The script had not run.
			redirects = true
			j.r.retry(nil, began)
		default:
			fail(j, err)
		}
	}
	if noScript {
		if err := appendScript.Load(ctx, s.client).Err(); err != nil {
			failed = true
			firstErr = fmt.Errorf("load the append script: %w", err)
		}
	}
	if failed {
		s.log.Warn("redisstore: write failed, retrying", "sessions", len(jobs), "err", firstErr)
	}
	return failed || redirects
}

// scriptKeys are the keys of the append script for j's session: meta and
// events, and on a cluster its tail wake (tailKey).
func (j job) scriptKeys() []string { return j.r.scriptKeys }

// abandon ends writing when the writer returns: rings still waiting are
// lost (ErrClosed) without a callback, and enqueue refuses from now on.
func (s *Store) abandon() {
	s.mu.Lock()
	s.exited = true
	rings := s.ready
	s.ready = nil
	s.mu.Unlock()
	for _, r := range rings {
		r.mu.Lock()
		r.queued = false
		r.lostTold = true
		r.loseLocked(fmt.Errorf("session %s: %w", r.id, ErrClosed))
		r.mu.Unlock()
	}
}

// args returns the append script's arguments for the ring's flight.
func (j job) args() []any {
	r, u := j.r, &j.r.flight
	hasCp, reset := "0", "0"
	if u.hasCp {
		hasCp = "1"
	}
	if u.cpReset {
		reset = "1"
	}
	var set, del []any
	for name, data := range u.cp {
		if data == nil {
			del = append(del, cpField(name))
		} else {
			set = append(set, cpField(name), data)
		}
	}
	a := make([]any, 0, 11+len(set)+len(del)+2*len(u.events))
	a = append(a, r.s.opt.Node, r.s.opt.TTL.Milliseconds(), r.mem.Cap(), j.from, j.fromSum,
		u.ack, hasCp, reset, u.cpSeq, len(set)/2, len(del))
	a = append(append(a, set...), del...)
	// Each event's record, c(seq) then the frame, cut from one buffer.
	size := 0
	for _, e := range u.events {
		size += len(e.Sum) + len(e.Data)
	}
	buf := make([]byte, 0, size)
	for _, e := range u.events {
		start := len(buf)
		buf = append(append(buf, e.Sum...), e.Data...)
		a = append(a, e.Seq, buf[start:len(buf):len(buf)])
	}
	return a
}

// cpField is the meta field of a checkpoint's part: cp for the part ""
// (a whole checkpoint, Ring.Checkpoint), cp:NAME for the others.
func cpField(name string) string {
	if name == "" {
		return "cp"
	}
	return "cp:" + name
}

// written: the flight is in Redis. Durable advances and OnDurable gets its
// entries.
func (r *Ring) written() {
	r.mu.Lock()
	ev := r.flight.events
	if u := &r.flight; u.hasCp {
		if u.cpReset || r.durParts == nil {
			r.durParts = make(map[string][]byte, len(u.cp))
		}
		for name, data := range u.cp {
			if data == nil {
				delete(r.durParts, name)
			} else {
				r.durParts[name] = data
			}
		}
		r.durCpSeq, r.hasDurCp = u.cpSeq, true
	}
	r.flight, r.inflight = unit{}, false
	r.pending -= len(ev)
	r.failingSince = time.Time{}
	if n := len(ev); n > 0 {
		r.durSeq, r.durSum = ev[n-1].Seq, ev[n-1].Sum
	}
	r.requeueLocked()
	r.settleLocked()
	r.mu.Unlock()
	if len(ev) == 0 || r.cb.OnDurable == nil {
		return
	}
	entries := make([]buffer.Entry, len(ev))
	for i := range ev {
		entries[i] = ev[i].Entry
	}
	r.callback(func() { r.cb.OnDurable(entries) })
}

// retry: the flight, sent at began, was not written. It goes back before
// what was committed since, to be sent again; err (nil when the failure
// does not count) starts or extends the run of failures that ends in
// giving up. The run starts when its first failed write was sent, not
// when the failure came back: a write into a stalled Redis takes the
// client's whole read timeout to fail, and GiveUpAfter counts it.
func (r *Ring) retry(err error, began time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = false
	if r.lost == nil {
		r.ready = r.flight.then(r.ready)
	} else {
		r.pending -= len(r.flight.events)
	}
	r.flight = unit{}
	if err != nil && r.lost == nil {
		if r.failingSince.IsZero() {
			r.failingSince = began
		}
		if time.Since(r.failingSince) > r.s.opt.GiveUpAfter {
			r.loseLocked(fmt.Errorf("gave up after %v: %w", r.s.opt.GiveUpAfter, err))
			return
		}
	}
	r.requeueLocked()
	r.settleLocked()
}

// lose: Redis refused the flight for good (err says why).
func (r *Ring) lose(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = false
	r.pending -= len(r.flight.events)
	r.flight = unit{}
	r.loseLocked(err)
}

// tellLost calls OnLost with why the ring stopped writing.
func (r *Ring) tellLost() {
	r.mu.Lock()
	err := r.lost
	r.mu.Unlock()
	if r.cb.OnLost != nil {
		r.callback(func() { r.cb.OnLost(err) })
	}
}
