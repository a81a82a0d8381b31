package orchestrator

import (
	"time"

	"github.com/coder/websocket"
)

// heldAnswer is a resync's answer (system.connected and the snapshot)
// waiting for the store to hold the seq its snapshot is as of: a client
// must never hold an event a server taking the session over would not
// have, or its seq could go backwards after a takeover. The session's
// writer of the store delivers it (deliver) once that seq is durable; the
// pipeline goes on meanwhile, and the session's lock is not held while
// waiting.
type heldAnswer struct {
	c      *conn
	seq    uint64   // the snapshot's seq
	frames [][]byte // the answer
	then   func()   // what the writer runs once they are written (sendThen)
	// timer closes c when the store does not catch up in time.
	timer *time.Timer
}

// heldTimeout bounds how long a resync's answer waits for the store: past
// it the connection is closed with 1012 (service restart), which a client
// answers with another resume.
const heldTimeout = storeTimeout

// holdLocked holds the answer to the resync of m's connection until the
// store holds seq; under the session lock.
func (sess *session) holdLocked(m *member, seq uint64, frames [][]byte, then func()) {
	sess.dropHeldLocked(m)
	c := m.c
	h := &heldAnswer{c: c, seq: seq, frames: frames, then: then}
	h.timer = time.AfterFunc(heldTimeout, func() {
		sess.mu.Lock()
		late := m.held == h
		if late {
			m.held = nil
		}
		sess.mu.Unlock()
		if late {
			c.logger().Warn("resume: the store did not catch up with the snapshot; closing for another resume",
				"seq", seq, "timeout", heldTimeout)
			c.closeWith(websocket.StatusServiceRestart, "session store behind; resume again")
		}
	})
	m.held = h
}

// releaseHeldLocked sends m's held answer if the store now holds durable
// (its seq or more); under the session lock.
func (sess *session) releaseHeldLocked(m *member, durable uint64) {
	h := m.held
	if h == nil || durable < h.seq {
		return
	}
	m.held = nil
	h.timer.Stop()
	h.c.sendThen(h.then, h.frames...)
}

// dropHeldLocked forgets m's held answer: its connection is no longer
// the session's.
func (sess *session) dropHeldLocked(m *member) {
	if h := m.held; h != nil {
		m.held = nil
		h.timer.Stop()
	}
}
