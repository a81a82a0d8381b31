package agui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-run/baton/wsproto"
)

// run serves POST /agui: a run of the thread — a new request, or the
// answers to its interrupts — streamed until it ends or asks again.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, subject string) {
	var in runInput
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.opts.MaxBody))
	if err := dec.Decode(&in); err != nil {
		httpError(w, http.StatusBadRequest, "RunAgentInput: "+err.Error())
		return
	}
	if msg := h.checkThread(in.ThreadID); msg != "" {
		httpError(w, http.StatusBadRequest, msg)
		return
	}
	text, fp, problem := checkInput(&in)
	if problem != "" {
		httpError(w, http.StatusBadRequest, problem)
		return
	}
	ctx := r.Context()
	rec, err := h.lookup(ctx, subject, in.ThreadID)
	if err != nil {
		h.refused(w, err)
		return
	}
	if rec == nil && len(in.Resume) > 0 {
		httpError(w, http.StatusNotFound, "resume: unknown thread")
		return
	}
	c, err := h.dial(ctx, r)
	if err != nil {
		h.refused(w, err)
		return
	}
	defer c.Close()
	fresh, err := c.hello(ctx)
	if err != nil {
		h.refused(w, err)
		return
	}
	var snap *wsproto.Snapshot
	claim := true
	if rec != nil {
		_, snap, err = c.follow(ctx, *rec, 0, true)
		if errors.Is(err, errSessionGone) && len(in.Resume) == 0 {
			// The session has ended: the thread goes on in a new one,
			// this connection's.
			rec, snap, claim = nil, nil, false
		} else if err != nil {
			h.refused(w, err)
			return
		}
	}
	if rec == nil {
		fr := record{SessionID: fresh.SessionID, FollowToken: fresh.FollowToken}
		ok, err := h.keep(ctx, subject, in.ThreadID, fr, claim)
		if err != nil {
			h.refused(w, err)
			return
		}
		if !ok {
			httpError(w, http.StatusConflict, "another request is creating this thread")
			return
		}
	}
	pending := pendingOf(snap)
	answers, err := answersFor(in.Resume, pending)
	if err != nil {
		httpError(w, http.StatusConflict, err.Error())
		return
	}
	view := View{Phase: wsproto.PhaseIdle}
	var base uint64
	if snap != nil {
		view, base = viewOf(*snap), snap.Seq
	}

	s := newStream(w, h.opts.WriteTimeout, base)
	defer s.done()
	m := newMapper(in.ThreadID, in.RunID)
	for _, a := range answers {
		if err := c.send(ctx, wsproto.EventUserResponse, a.stepID, "", a.meta); err != nil {
			h.refused(w, err)
			return
		}
	}
	var open []wsproto.UserConfirm // the confirmations still waiting
	for _, p := range pending {
		if !answered(answers, p.StepID) {
			open = append(open, p)
		}
	}
	if ended, err := s.opening(m, true, view, open); ended || err != nil {
		return
	}
	if len(answers) == 0 {
		meta := map[string]any{}
		if fp.Mode != "" {
			meta["mode"] = fp.Mode
		}
		if fp.Adaptive {
			meta["adaptive"] = true
		}
		if err := c.send(ctx, wsproto.EventUserMessage, "", text, meta); err != nil {
			return
		}
	}
	if err := h.pump(ctx, c, m, s, nil); err != nil {
		h.opts.Logger.Debug("agui: stream cut", "thread_run", in.RunID, "err", err)
	}
}

func answered(as []answer, stepID string) bool {
	for _, a := range as {
		if a.stepID == stepID {
			return true
		}
	}
	return false
}

// resume serves GET /agui/{threadId}. With Last-Event-ID it resumes the
// stream that id is from, exactly: what the client had not received, then
// live, to the stream's end. Without, or when the ring no longer holds
// what the client missed, it starts from the state now: STATE_SNAPSHOT,
// then live. A stream the client has whole is answered 204.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, subject, threadID string) {
	if msg := h.checkThread(threadID); msg != "" {
		httpError(w, http.StatusBadRequest, msg)
		return
	}
	var cur *position
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		p, err := parsePosition(id)
		if err != nil {
			httpError(w, http.StatusBadRequest, err.Error())
			return
		}
		cur = &p
	}
	ctx := r.Context()
	rec, err := h.lookup(ctx, subject, threadID)
	if err != nil {
		h.refused(w, err)
		return
	}
	if rec == nil {
		httpError(w, http.StatusNotFound, "unknown thread")
		return
	}
	c, err := h.dial(ctx, r)
	if err != nil {
		h.refused(w, err)
		return
	}
	defer c.Close()
	if _, err := c.hello(ctx); err != nil {
		h.refused(w, err)
		return
	}
	if cur != nil && cur.seq == cur.base && cur.k >= 2 {
		w.WriteHeader(http.StatusNoContent) // the stream ended at its opening
		return
	}
	runID := r.URL.Query().Get("runId")
	// Within the stream's first events the client holds no step or
	// message open: a fresh snapshot serves it as well as a replay.
	replay := cur != nil && !(cur.seq == cur.base && cur.k <= 1)
	var from uint64
	if replay {
		from = cur.base
	}
	hi, snap, err := c.follow(ctx, *rec, from, !replay)
	if err != nil {
		h.refused(w, err)
		return
	}
	if snap != nil {
		// From the state now: the client has RUN_STARTED unless it
		// came without Last-Event-ID.
		if runID == "" {
			runID = fmt.Sprintf("resume-%d", snap.Seq)
		}
		s := newStream(w, h.opts.WriteTimeout, snap.Seq)
		defer s.done()
		m := newMapper(threadID, runID)
		ended, err := s.opening(m, cur == nil, viewOf(*snap), pendingOf(snap))
		if ended || err != nil {
			return
		}
		if snap.Phase == "" || snap.Phase == wsproto.PhaseIdle {
			s.write(snap.Seq, 2, m.finished(nil, nil)) // nothing runs: the stream ends at once
			return
		}
		if err := h.pump(ctx, c, m, s, nil); err != nil {
			h.opts.Logger.Debug("agui: stream cut", "thread", "resumed", "err", err)
		}
		return
	}
	if cur.seq > hi.LastSeq {
		httpError(w, http.StatusBadRequest, "Last-Event-ID is ahead of the thread")
		return
	}
	if runID == "" {
		runID = fmt.Sprintf("resume-%d", cur.base)
	}
	s := newStream(w, h.opts.WriteTimeout, cur.base)
	defer s.done()
	m := newMapper(threadID, runID)
	err = h.pump(ctx, c, m, s, cur)
	if err == nil && s.wrote == 0 && !s.started {
		w.WriteHeader(http.StatusNoContent) // the client has the stream whole
		return
	}
	if err != nil {
		h.opts.Logger.Debug("agui: resumed stream cut", "err", err)
	}
}
