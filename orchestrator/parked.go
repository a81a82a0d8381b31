package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// A running task of a restored run goes on from its last journaled round
// of the agent loop (journal.go), so the round that asked the question it
// had open when its server died (tool_confirm, input_request) runs again,
// and until then the question has no one waiting for it. It stays
// answerable with its step_id, parked, until the task asks the same thing
// again and claims it — getting the answer if one came meanwhile — or ends
// without asking, which closes it. A watcher per parked question closes it when it expires, as
// await would have.

// parked is a running task's question that a restored run had open, or
// had answered without the task acting on the answer.
type parked struct {
	c    *confirm
	ctx  context.Context // done when the task ends, or the run does
	stop context.CancelFunc
	// done is closed once answer or err is set: the answer, or why there
	// is none (errExpired, or ctx's error).
	done   chan struct{}
	answer *wsproto.Response
	err    error
}

// watchParked starts the watchers of the run's parked questions; they end
// with the run (restored.wg).
func (r *run) watchParked() {
	rs := r.restored
	r.sess.mu.Lock()
	ps := slices.Clone(rs.parked)
	r.sess.mu.Unlock()
	for _, p := range ps {
		rs.wg.Add(1)
		go r.watch(p)
	}
}

// watch waits for p's answer until it expires or its task ends.
func (r *run) watch(p *parked) {
	defer r.restored.wg.Done()
	defer p.stop()
	defer close(p.done)
	t := time.NewTimer(time.Until(p.c.expires))
	defer t.Stop()
	var err error
	select {
	case a := <-p.c.answer:
		p.answer = a
		return
	case <-p.ctx.Done():
		err = p.ctx.Err()
	case <-t.C:
		err = errExpired
	}
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	if _, open := r.sess.confirms[p.c.stepID]; open {
		r.sess.closeConfirmLocked(p.c.stepID)
		p.err = err
		return
	}
	select {
	case a := <-p.c.answer: // answered just before (respond closes and answers in one step)
		p.answer = a
	default: // closed with its run
		p.err = err
	}
}

// claim returns the answer to the question of this kind that task taskID
// had parked, when match says it is the same question; claimed is false
// when there is none (or the run is not a restored one), and the caller
// asks as usual. A question still open is asked again (agent.user_confirm
// with its step_id and expiry): the restarted task's solver.start took it
// out of the clients' state. It waits like await, until ctx is done.
func (r *run) claim(ctx context.Context, kind, taskID string, match func(m *wsproto.UserConfirm) bool) (answer *wsproto.Response, claimed bool, err error) {
	rs := r.restored
	if rs == nil {
		return nil, false, nil
	}
	sess := r.sess
	sess.mu.Lock()
	i := slices.IndexFunc(rs.parked, func(p *parked) bool {
		return p.c.kind == kind && p.c.meta.TaskID == taskID && match(p.c.meta)
	})
	if i < 0 {
		sess.mu.Unlock()
		return nil, false, nil
	}
	p := rs.parked[i]
	rs.parked = slices.Delete(rs.parked, i, i+1)
	if _, open := sess.confirms[p.c.stepID]; open && !pending(sess.state.Run, p.c.stepID) {
		sess.emitLocked(wsproto.EventUserConfirm, p.c.stepID, confirmContent(p.c.meta), p.c.meta)
	}
	sess.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.stop()
		<-p.done
	}
	if p.err != nil {
		return nil, true, p.err
	}
	if kind == wsproto.ConfirmInput && p.answer.Text != nil {
		r.recordAnswer(p.c.meta, *p.answer.Text)
	}
	return p.answer, true, nil
}

// endParked closes the parked questions of a task that ends without
// having asked them again.
func (r *run) endParked(taskID string) {
	rs := r.restored
	if rs == nil {
		return
	}
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	rs.parked = slices.DeleteFunc(rs.parked, func(p *parked) bool {
		if p.c.meta.TaskID != taskID {
			return false
		}
		p.stop() // its watcher closes it
		return true
	})
}

// recordAnswer puts an answer to a task's question in the state's answers
// when respond could not (the question was out of the state, parked).
func (r *run) recordAnswer(m *wsproto.UserConfirm, text string) {
	r.sess.mu.Lock()
	defer r.sess.mu.Unlock()
	st := r.sess.state.Run
	if st == nil || st.RunID != r.id || slices.ContainsFunc(st.Answers, func(a wsproto.AnswerState) bool { return a.StepID == m.StepID }) {
		return
	}
	st.Answers = append(st.Answers, wsproto.AnswerState{StepID: m.StepID, TaskID: m.TaskID, Question: m.Question, Text: text})
	r.sess.changedLocked()
}

func pending(st *wsproto.RunState, stepID string) bool {
	return st != nil && slices.ContainsFunc(st.PendingConfirm, func(c wsproto.UserConfirm) bool { return c.StepID == stepID })
}

// confirmContent is the content line of a task's question asked again.
func confirmContent(m *wsproto.UserConfirm) string {
	if m.Kind == wsproto.ConfirmTool {
		return "Allow " + m.Tool + "?"
	}
	return m.Question
}

// sameJSON reports whether two JSON texts are the same but for spacing.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
