// Package clustertest wraps an orchestrator.Cluster so that a test sees,
// and can order, the calls a server makes to its store: a resume's token
// rotation and its attaches, the messages it sends other servers and those
// it receives. A Sequence then forces an interleaving of several servers'
// calls deterministically, however the scheduler runs them — the orders
// a retried resume on two servers can take in production, one at a time.
//
// It knows the orchestrator only through the Cluster interface (and the
// "kind" and "session" of the servers' JSON messages); the real store is
// the one wrapped, so what a test proves, it proves of that store.
package clustertest

import (
	"context"
	"encoding/json"
	"time"

	"github.com/baton-run/baton/orchestrator"
)

// Call is a call a server made to its Cluster, as a hook sees it: before
// it starts, then twice once it returned — first Returned, which a hook
// should not hold (the call is over, its server not yet told), then Done,
// which a hook may hold to keep the server from going on. For Receive,
// around the server's handling of one message.
type Call struct {
	Label    string // the wrapper's: which server (Wrap)
	Op       string // "Rotate", "Attach", "Send", "Receive", "Commit", "Lookup"
	Session  string
	Kind     string // a message's kind, for Send and Receive
	Rot      uint64 // Attach's rotation number
	Returned bool
	Done     bool
}

// Wrap returns cl with hook called around the calls Call lists (the
// others go straight through), labelled label. The wrapper keeps cl's
// orchestrator.LeaseWatcher, if it has one.
func Wrap(cl orchestrator.Cluster, label string, hook func(Call)) orchestrator.Cluster {
	h := &hooked{Cluster: cl, label: label, hook: hook}
	if lw, ok := cl.(orchestrator.LeaseWatcher); ok {
		return &watching{hooked: h, lw: lw}
	}
	return h
}

type hooked struct {
	orchestrator.Cluster
	label string
	hook  func(Call)
}

type watching struct {
	*hooked
	lw orchestrator.LeaseWatcher
}

func (w *watching) Lapses() <-chan struct{} { return w.lw.Lapses() }
func (w *watching) LeaseHeld() bool         { return w.lw.LeaseHeld() }

var _ orchestrator.LeaseWatcher = (*watching)(nil)

func (h *hooked) around(c Call) func() {
	c.Label = h.label
	h.hook(c)
	return func() {
		c.Returned = true
		h.hook(c)
		c.Returned, c.Done = false, true
		h.hook(c)
	}
}

func (h *hooked) Rotate(ctx context.Context, id string, old, next [32]byte, at time.Time) (uint64, error) {
	defer h.around(Call{Op: "Rotate", Session: id})()
	return h.Cluster.Rotate(ctx, id, old, next, at)
}

func (h *hooked) Commit(ctx context.Context, id string, current [32]byte) (bool, error) {
	defer h.around(Call{Op: "Commit", Session: id})()
	return h.Cluster.Commit(ctx, id, current)
}

func (h *hooked) Lookup(ctx context.Context, id string) (orchestrator.Record, error) {
	defer h.around(Call{Op: "Lookup", Session: id})()
	return h.Cluster.Lookup(ctx, id)
}

func (h *hooked) Attach(ctx context.Context, id, conn string, rot uint64) (string, bool, error) {
	defer h.around(Call{Op: "Attach", Session: id, Rot: rot})()
	return h.Cluster.Attach(ctx, id, conn, rot)
}

func (h *hooked) Send(ctx context.Context, node string, msg []byte) (bool, error) {
	kind, id := peek(msg)
	defer h.around(Call{Op: "Send", Session: id, Kind: kind})()
	return h.Cluster.Send(ctx, node, msg)
}

func (h *hooked) Receive(ctx context.Context, fn func(msg []byte)) error {
	return h.Cluster.Receive(ctx, func(msg []byte) {
		kind, id := peek(msg)
		defer h.around(Call{Op: "Receive", Session: id, Kind: kind})()
		fn(msg)
	})
}

// peek reads a server message's kind and session.
func peek(msg []byte) (kind, session string) {
	var m struct{ Kind, Session string }
	json.Unmarshal(msg, &m) // a message that is not JSON has neither
	return m.Kind, m.Session
}
