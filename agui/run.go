package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/coder/websocket"

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
	var first *frame
	if len(answers) == 0 && len(open) == 0 {
		// The request goes first, so that Baton's refusal of it (busy,
		// a bad mode or directive, rate_limited, a request over /ws's
		// read limit) is this request's error, before any event.
		meta := map[string]any{}
		if fp.Mode != "" {
			meta["mode"] = fp.Mode
		}
		if fp.Adaptive {
			meta["adaptive"] = true
		}
		f, err := h.request(ctx, c, text, meta)
		if err != nil {
			h.refusedRequest(w, err)
			return
		}
		first = &f
	}
	if ended, err := s.opening(m, true, view, open); ended || err != nil {
		return
	}
	if err := h.pump(ctx, c, m, s, nil, first); err != nil {
		h.opts.Logger.Debug("agui: stream cut", "thread_run", in.RunID, "err", err)
	}
}

// request sends the run's user.message and returns the first frame that
// follows it, or Baton's refusal as a *streamError.
func (h *Handler) request(ctx context.Context, c *conn, text string, meta map[string]any) (frame, error) {
	// A failed send is answered by the connection's end, read below: a
	// request over the read limit is closed with 1009.
	sendErr := c.send(ctx, wsproto.EventUserMessage, "", text, meta)
	for {
		f, err := c.next(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusMessageTooBig {
				return f, &streamError{code: "too_large", msg: "the request is longer than the server reads"}
			}
			return f, errors.Join(sendErr, err)
		}
		if f.Event == wsproto.EventError {
			var e wsproto.Error
			json.Unmarshal(f.Metadata, &e)
			return f, &streamError{code: e.Code, msg: e.Message}
		}
		if f.Seq > 0 && wsproto.Sequenced(f.Event) {
			return f, nil
		}
	}
}

// refusedRequest answers a request Baton refused: 400 for what is wrong
// with it, 429 for too many, 409 for a thread that is busy.
func (h *Handler) refusedRequest(w http.ResponseWriter, err error) {
	var se *streamError
	if !errors.As(err, &se) {
		h.refused(w, err)
		return
	}
	status := http.StatusConflict
	switch se.code {
	case wsproto.CodeInvalidMessage, wsproto.CodeInvalidJSON, "too_large":
		status = http.StatusBadRequest
	case wsproto.CodeRateLimited:
		status = http.StatusTooManyRequests
	}
	httpError(w, status, se.Error())
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
		if replay {
			// The ring no longer holds what the client missed, and steps
			// or messages it saw open would never close: the state now,
			// and the stream ends; the client watches on from here.
			if s.write(snap.Seq, 1, Event{"type": "STATE_SNAPSHOT", "snapshot": viewOf(*snap)}) == nil {
				s.write(snap.Seq, 2, m.failed("the events after Last-Event-ID are gone: the snapshot is the state now; "+
					"GET the thread without Last-Event-ID to follow it", "resync"))
			}
			return
		}
		ended, err := s.opening(m, cur == nil, viewOf(*snap), pendingOf(snap))
		if ended || err != nil {
			return
		}
		if snap.Phase == "" || snap.Phase == wsproto.PhaseIdle {
			s.write(snap.Seq, 2, m.finished(nil, nil)) // nothing runs: the stream ends at once
			return
		}
		if err := h.pump(ctx, c, m, s, nil, nil); err != nil {
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
	err = h.pump(ctx, c, m, s, cur, nil)
	if err == nil && s.wrote == 0 && !s.started {
		w.WriteHeader(http.StatusNoContent) // the client has the stream whole
		return
	}
	if err != nil {
		h.opts.Logger.Debug("agui: resumed stream cut", "err", err)
	}
}
