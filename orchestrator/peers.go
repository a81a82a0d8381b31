package orchestrator

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Peers: the work other servers' messages cause here, and what this server
// sends them in answer, queued by peer. The cluster's Receive loop only
// decodes a message and hands it on (receive): a reply or a replace is
// handled there at once, as neither waits on anything; a command, an
// attach or a detach is queued for the peer it came from, and that peer's
// sender — a goroutine that exists only while its queue holds something —
// applies it and publishes the reply. So a reply publish that is slow or
// stalls (a pooled Redis connection stuck, a Redis path with seconds of
// latency) holds up only the messages of the one peer it answers: every
// other peer's commands are applied and answered meanwhile, and the
// Receive loop never waits.
//
// A peer's messages are handled in the order they came, by one goroutine:
// a connection's frames come from one peer, in order, so they are applied
// in the order the client sent them, as are its attach and its detach.
// A replace this server sends (sendReplace) goes through the queue of the
// peer it is for, behind the replies to that peer.

// maxPeerQueue bounds what one peer's queue holds. A peer's forwarders
// wait for each reply (one command in flight per connection), so it fills
// only when the sender is stuck while that peer has this many connections
// waiting. Past it a message is dropped: a dropped command is neither
// applied nor answered, and its forwarder closes its connection with 1012
// after storeTimeout, as when the owner does not answer at all; the
// client's resume shows the command was not applied.
const maxPeerQueue = 1024

// peers are the queues of the peers with work waiting. Its zero value is
// ready; closePeers waits for every sender.
type peers struct {
	mu     sync.Mutex // guards the fields below
	queues map[string]*peerQueue
	closed bool           // closePeers: no sender starts any more
	wg     sync.WaitGroup // the senders (sendTo)
}

// peerQueue is one peer's waiting work. It is in peers.queues exactly
// while its sender runs: from the post that finds none until the sender
// finds the queue empty.
type peerQueue struct {
	node string
	jobs []peerJob
	// overflowed says a message was dropped since the queue was last
	// below its bound: one log line per overflow, not per message.
	overflowed bool
}

// peerJob is one piece of a peer's work: a message it sent (in) to handle,
// or one to send it (out).
type peerJob struct {
	in      *message
	out     []byte
	session string    // out's session, for the log
	at      time.Time // when it was queued
}

// post queues job for node's sender, starting one if none runs. It never
// blocks: past maxPeerQueue the job is dropped.
func (s *Server) post(node string, job peerJob) {
	p := &s.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	q := p.queues[node]
	if q == nil {
		if p.queues == nil {
			p.queues = make(map[string]*peerQueue)
		}
		q = &peerQueue{node: node}
		p.queues[node] = q
		p.wg.Add(1)
		go s.sendTo(q) // owned by s.peers: Server.Close waits for it
	}
	if len(q.jobs) >= maxPeerQueue {
		if !q.overflowed {
			q.overflowed = true
			s.log.Warn("a server's message queue is full: its messages are dropped until it drains",
				"node", node, "queued", len(q.jobs))
		}
		return
	}
	q.jobs = append(q.jobs, job)
}

// sendTo handles q's jobs in order until none is left, and then leaves:
// the queue leaves peers.queues with it, under the lock, so a job posted
// after that finds no sender and starts one.
func (s *Server) sendTo(q *peerQueue) {
	p := &s.peers
	defer p.wg.Done()
	for {
		p.mu.Lock()
		if len(q.jobs) == 0 {
			delete(p.queues, q.node)
			p.mu.Unlock()
			return
		}
		job := q.jobs[0]
		q.jobs[0] = peerJob{}
		q.jobs = q.jobs[1:]
		if len(q.jobs) < maxPeerQueue {
			q.overflowed = false
		}
		p.mu.Unlock()
		if s.ctx.Err() != nil {
			continue // closing: nothing more is applied, or sent
		}
		if job.in != nil {
			s.handle(q.node, job.in, job.at)
		} else {
			s.publish(q.node, job.out, "session", job.session)
		}
	}
}

// handle applies a peer's command, attach or detach, received at at, and
// publishes the reply to a command or an attach that waits for one (it
// has an id). A command whose forwarder has given up waiting (it came
// longer than storeTimeout ago) is dropped unapplied: its connection is
// closing for a resume, whose answer tells the client whether to send it
// again, and applying it now could apply it twice.
func (s *Server) handle(node string, m *message, at time.Time) {
	if h := s.opts.PeerHook; h != nil {
		defer h(m.Kind, m.Session)
	}
	r := message{Kind: msgReply, From: s.opts.Cluster.Node(), Conn: m.Conn, ID: m.ID}
	switch m.Kind {
	case msgDetach:
		s.detachRemote(*m)
		return
	case msgAttach:
		r.Error, r.Moved = s.attachRemote(*m)
	case msgCommand:
		if time.Since(at) > storeTimeout {
			s.log.Warn("a forwarded command waited past its forwarder's patience; dropped",
				"session", m.Session, "from", node, "waited", time.Since(at).Round(time.Millisecond))
			return
		}
		r.Error, r.Moved = s.command(*m)
	}
	if m.ID == 0 {
		return // an attach no one waits for (a plain resume's)
	}
	if time.Since(at) > storeTimeout {
		return // its forwarder has stopped waiting
	}
	b, _ := json.Marshal(r)
	s.publish(node, b, "session", m.Session, "kind", m.Kind)
}

// publish sends b to node, logging a failure with attrs.
func (s *Server) publish(node string, b []byte, attrs ...any) {
	ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
	defer cancel()
	if _, err := s.opts.Cluster.Send(ctx, node, b); err != nil && s.ctx.Err() == nil {
		s.log.Error("send to another server", append(attrs, "to", node, "err", err)...)
	}
}

// closePeers stops every sender and waits for them: a sender's job under
// way ends (its publish is bounded by storeTimeout, and by the server's
// context, done by now), and the jobs behind it are dropped.
func (s *Server) closePeers() {
	p := &s.peers
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
}
