package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
)

// store is what a shared store holds of one session: the units its ring
// committed — events, and the latest checkpoint with the seq it is as of.
// freezeAfter, when set, is asked about each unit committed; once it says
// yes the store takes nothing more, as if the server writing to it had
// been killed right after that unit.
type store struct {
	freezeAfter func(unit []buffer.Entry, cp *checkpoint) bool

	mu      sync.Mutex // guards the fields below
	entries []buffer.Entry
	cp      []byte
	cpSeq   uint64
	frozen  bool
	froze   chan struct{} // closed when frozen
}

func newStore(freezeAfter func([]buffer.Entry, *checkpoint) bool) *store {
	return &store{freezeAfter: freezeAfter, froze: make(chan struct{})}
}

func (st *store) commit(unit []buffer.Entry, cp []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.frozen {
		return
	}
	st.entries = append(st.entries, unit...)
	var decoded *checkpoint
	if cp != nil {
		st.cp = cp
		st.cpSeq = uint64(len(st.entries)) // the entries start at seq 1
		decoded = new(checkpoint)
		if err := json.Unmarshal(cp, decoded); err != nil {
			panic(fmt.Sprintf("a checkpoint that does not decode: %v", err))
		}
	}
	if st.freezeAfter != nil && st.freezeAfter(unit, decoded) {
		st.frozen = true
		close(st.froze)
	}
}

func (st *store) isFrozen() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.frozen
}

// contents returns what the store holds: every event, the checkpoint, and
// the events after it.
func (st *store) contents() (entries []buffer.Entry, cp []byte, tail []buffer.Entry) {
	st.mu.Lock()
	defer st.mu.Unlock()
	entries = append([]buffer.Entry(nil), st.entries...)
	return entries, st.cp, entries[st.cpSeq:]
}

var errKilled = errors.New("the server was killed")

// durRing is a buffer.Durable for tests: a Memory ring whose units go to a
// store. Once the store is frozen its server is dead: Append fails, so
// nothing it emits afterwards reaches a client either.
type durRing struct {
	*buffer.Memory
	st *store

	mu   sync.Mutex // guards unit, cp, parts
	unit []buffer.Entry
	cp   []byte
	// parts is every part of the checkpoint the ring was given
	// (CheckpointParts); cp is them assembled, at each change.
	parts map[string][]byte
}

var _ buffer.Parted = (*durRing)(nil)

func (r *durRing) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	if r.st.isFrozen() {
		return buffer.Entry{}, errKilled
	}
	e, err := r.Memory.Append(ctx, id, encode)
	if err == nil {
		r.mu.Lock()
		r.unit = append(r.unit, e)
		r.mu.Unlock()
	}
	return e, err
}

func (r *durRing) Checkpoint(data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cp = bytes.Clone(data)
}

// CheckpointParts keeps the parts, and has the store take them
// assembled (assembleCheckpoint): what Restore reads from Redis.
func (r *durRing) CheckpointParts(parts map[string][]byte, reset bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reset || r.parts == nil {
		r.parts = make(map[string][]byte)
	}
	for name, b := range parts {
		if b == nil {
			delete(r.parts, name)
		} else {
			r.parts[name] = bytes.Clone(b)
		}
	}
	cp, err := assembleCheckpoint(r.parts)
	if err != nil {
		panic(fmt.Sprintf("checkpoint parts that do not assemble: %v", err))
	}
	r.cp = cp
}

func (r *durRing) Commit() {
	r.mu.Lock()
	unit, cp := r.unit, r.cp
	r.unit, r.cp = nil, nil
	r.mu.Unlock()
	r.st.commit(unit, cp)
}

func (r *durRing) Durable() (uint64, string) {
	r.st.mu.Lock()
	seq := uint64(len(r.st.entries))
	r.st.mu.Unlock()
	sum, _ := r.Memory.Checksum(context.Background(), seq)
	return seq, sum
}

// rebuild makes, for the server taking over, a ring holding the events a
// store holds, writing to a fresh store.
func rebuild(entries []buffer.Entry, capacity int) (*durRing, error) {
	r := &durRing{Memory: buffer.NewMemory(capacity), st: newStore(nil)}
	for _, e := range entries {
		var f struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(e.Data, &f); err != nil {
			return nil, err
		}
		if _, err := r.Memory.Append(context.Background(), f.EventID, func(seq uint64) ([]byte, error) {
			if seq != e.Seq {
				return nil, fmt.Errorf("entry %d would be seq %d", e.Seq, seq)
			}
			return e.Data, nil
		}); err != nil {
			return nil, err
		}
	}
	r.st.entries = append(r.st.entries, entries...)
	return r, nil
}

// node is one server's models, which stop working when the node dies (a
// killed process runs nothing more), and counts of what they ran. On a
// node that holds, an execution of a task whose description says "(held)"
// runs until the node dies, cancelled or not: it is running, for sure,
// when the node dies.
type node struct {
	holds bool
	dead  atomic.Bool
	died  chan struct{} // closed by kill
	once  sync.Once

	mu    sync.Mutex // guards execs, answers, deploys
	execs map[string]int
	// answers are the user's answers the executions' first rounds saw.
	answers []solver.Answer
	deploys []string
}

func newNode(holds bool) *node {
	return &node{holds: holds, died: make(chan struct{}), execs: map[string]int{}}
}

// kill makes the node dead.
func (n *node) kill() {
	n.once.Do(func() {
		n.dead.Store(true)
		close(n.died)
	})
}

// halt makes a dead node's model calls wait for their end.
func (n *node) halt(ctx context.Context) error {
	if n.dead.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (n *node) executions(id string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.execs[id]
}

func (n *node) models() Models {
	return Models{nodePlanner{&planner.Sim{}, n}, nodeSolver{&solver.Sim{}, n}, nodeAggregator{&aggregator.Sim{}, n}}
}

// tools is the node's tool set: deploy, which asks the user first.
func (n *node) tools() *tool.Set {
	set := &tool.Set{}
	if err := set.Add(deploy{n}); err != nil {
		panic(err)
	}
	return set
}

type nodePlanner struct {
	*planner.Sim
	n *node
}

func (p nodePlanner) Plan(ctx context.Context, req planner.Request, step func(string)) (planner.Plan, error) {
	if err := p.n.halt(ctx); err != nil {
		return planner.Plan{}, err
	}
	return p.Sim.Plan(ctx, req, step)
}

func (p nodePlanner) Decide(ctx context.Context, in planner.DecideInput) (planner.Decision, error) {
	if err := p.n.halt(ctx); err != nil {
		return planner.Decision{}, err
	}
	return p.Sim.Decide(ctx, in)
}

// nodeSolver counts executions by task (their first rounds).
type nodeSolver struct {
	*solver.Sim
	n *node
}

func (m nodeSolver) Turn(ctx context.Context, t *solver.Turn, progress func(float64, string)) (solver.Reply, error) {
	if err := m.n.halt(ctx); err != nil {
		return solver.Reply{}, err
	}
	if t.Round == 1 {
		m.n.mu.Lock()
		m.n.execs[t.Task.ID]++
		m.n.answers = append(m.n.answers, t.Answers...)
		m.n.mu.Unlock()
	}
	if m.n.holds && strings.Contains(t.Task.Description, "(held)") {
		<-m.n.died
		return solver.Reply{}, errKilled
	}
	return m.Sim.Turn(ctx, t, progress)
}

type nodeAggregator struct {
	*aggregator.Sim
	n *node
}

func (a nodeAggregator) Aggregate(ctx context.Context, in aggregator.Input, stream func(string)) (aggregator.Output, error) {
	if err := a.n.halt(ctx); err != nil {
		return aggregator.Output{}, err
	}
	return a.Sim.Aggregate(ctx, in, stream)
}

// deploy is a tool that changes the world: every call is confirmed first.
type deploy struct{ n *node }

func (deploy) Spec() tool.Spec {
	return tool.Spec{Name: "deploy", Description: "Deploy to a target.", Confirm: true}
}

func (d deploy) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if err := d.n.halt(ctx); err != nil {
		return "", err
	}
	var a struct {
		Target string `json:"target"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", err
	}
	d.n.mu.Lock()
	d.n.deploys = append(d.n.deploys, a.Target)
	d.n.mu.Unlock()
	return "deployed to " + a.Target, nil
}

// front is the address clients dial: it forwards to the server now
// serving (a load balancer), and answers 503 while there is none.
type front struct {
	mu sync.Mutex // guards h
	h  http.Handler
}

func (f *front) set(h http.Handler) {
	f.mu.Lock()
	f.h = h
	f.mu.Unlock()
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	h := f.h
	f.mu.Unlock()
	if h == nil {
		http.Error(w, "no server", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}
