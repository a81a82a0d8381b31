package orchestrator

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// The peer protocol: the messages the servers of a cluster send each other
// (message: a forwarded command and its reply, a member's attach and
// detach, a replace), how this server handles those it receives, and what
// it sends in answer, queued by peer. Which attach replaces whom is
// rotation.go's to decide; the proxy that sends commands is proxy.go.
//
// The work other servers' messages cause here is queued by peer. The cluster's Receive loop only
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

// message is what the servers of a cluster send each other.
type message struct {
	Kind    string `json:"kind"`           // msgCommand, msgReply or msgReplace
	From    string `json:"from,omitempty"` // the sending server
	Session string `json:"session,omitempty"`
	Conn    string `json:"conn,omitempty"` // the connection it is about
	// ID pairs a reply with its command.
	ID    uint64          `json:"id,omitempty"`
	Frame json.RawMessage `json:"frame,omitempty"` // a command's client frame
	// A reply's outcome: Error for the client, or Moved when the server
	// does not hold the session (any more).
	Error *wsproto.Error `json:"error,omitempty"`
	Moved bool           `json:"moved,omitempty"`
	// An attach's: a follow (else a plain resume, which replaces the
	// session's other connections), and the last_seq it resumed from.
	Follow bool   `json:"follow,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	// Rot is the number of the token rotation an attach's connection
	// holds (rotation.go); 0 for a follow by the follow token, or a
	// follow's first attach, which its rotation follows.
	Rot uint64 `json:"rot,omitempty"`
}

const (
	msgCommand = "command"
	msgReply   = "reply"
	msgReplace = "replace"
	msgAttach  = "attach" // a connection attached on another server (attachRemote)
	msgDetach  = "detach" // it left
)

// connRef names a connection across the cluster: "NODE/CONN".
func (s *Server) connRef(c *conn) string { return s.opts.Cluster.Node() + "/" + c.id }

// receive takes the messages other servers send this one, on the
// cluster's Receive loop, which waits on nothing: a reply or a replace is
// handled at once, anything else queued for its sender's peer queue
// (peers.go).
func (s *Server) receive(b []byte) {
	m := new(message)
	if err := json.Unmarshal(b, m); err != nil {
		s.log.Error("undecodable message from the cluster", "err", err)
		return
	}
	switch m.Kind {
	case msgCommand, msgAttach, msgDetach:
		s.post(m.From, peerJob{in: m, at: time.Now()})
	case msgReply:
		s.mu.Lock()
		ch := s.replies[m.ID]
		s.mu.Unlock()
		if ch != nil {
			select {
			case ch <- *m: // cap 1, one reply per id
			default: // a second reply with the id: not ours to wait for
			}
		}
	case msgReplace:
		s.replaced(m.Conn)
	}
}

// command applies a client's frame forwarded by the server that holds its
// connection.
func (s *Server) command(m message) (*wsproto.Error, bool) {
	sess := s.lookup(m.Session)
	if sess == nil {
		return nil, true
	}
	req, e := wsproto.DecodeText(m.Frame)
	if e != nil {
		return e, false
	}
	if _, ok := req.(*wsproto.Reconnect); ok {
		return &wsproto.Error{Code: wsproto.CodeInvalidState, RefType: wsproto.EventUserReconnect,
			Message: "user.reconnect_with_state must be the first frame of a connection"}, false
	}
	if a, ok := req.(*wsproto.Ack); ok {
		e = sess.ack(m.From+"/"+m.Conn, a.LastSeq)
	} else {
		e = sess.apply(req)
	}
	if e != nil && e.RefType == "" {
		e.RefType = req.Event()
	}
	return e, false
}

// attachRemote registers a connection of another server as a member of a
// session this server holds (msgAttach): a follow, under the cap, or a
// resume that rotated the token, which admitLocked orders against the
// others (a plain one replaces every other member). A resume that lost is
// closed with 4000 where it is.
func (s *Server) attachRemote(m message) (*wsproto.Error, bool) {
	sess := s.lookup(m.Session)
	if sess == nil {
		return nil, true
	}
	ref := m.From + "/" + m.Conn
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return nil, true
	}
	var rot *rotation
	if m.Rot > 0 || !m.Follow {
		rot = &rotation{n: m.Rot}
	}
	if m.Follow && sess.memberLocked(ref) == nil {
		if e := sess.followLimitLocked(); e != nil {
			sess.mu.Unlock()
			return e, false
		}
	}
	gone, ok := sess.admitLocked(ref, rot, m.Follow)
	if !ok {
		sess.removeLocked(ref, false)
		sess.mu.Unlock()
		s.sendReplace(sess.id, ref)
		return nil, false
	}
	if m.Follow {
		sess.followedLocked()
	}
	mem := sess.memberLocked(ref)
	if mem == nil {
		sess.claimGhostLocked(m.Seq)
		mem = &member{ref: ref}
		sess.members = append(sess.members, mem)
	}
	mem.holds = mem.holds || rot != nil
	sess.detachedAt.Store(0)
	sess.mu.Unlock()
	s.closeReplaced(sess.id, gone)
	return nil, false
}

// detachRemote forgets a member on another server that left (msgDetach).
func (s *Server) detachRemote(m message) {
	sess := s.lookup(m.Session)
	if sess == nil {
		return
	}
	sess.detach(m.From + "/" + m.Conn)
	s.keepAttached(sess)
}

// registerRemote tells the owner of c's session that c attached here,
// resuming from lastSeq, as a follower when follow is set, holding the
// token rotation numbered rot (0: none yet, or a follow by the follow
// token). The owner's refusal (the cap) is the answer to a follow's first
// attach, which waits for it; an attach with a rotation does not wait (a
// resume proxied to a slow owner is not made slower): the owner closes it
// where it is if it lost (attachRemote).
func (c *conn) registerRemote(follow bool, lastSeq, rot uint64) *wsproto.Error {
	s, cl := c.srv, c.srv.opts.Cluster
	if !follow || rot > 0 {
		ctx, cancel := context.WithTimeout(s.ctx, storeTimeout)
		defer cancel()
		b, _ := json.Marshal(message{Kind: msgAttach, From: cl.Node(), Session: c.remote.id, Conn: c.id,
			Follow: follow, Seq: lastSeq, Rot: rot})
		if _, err := cl.Send(ctx, c.remote.owner, b); err != nil {
			s.log.Warn("tell the session's owner a connection attached", "session", c.remote.id, "err", err)
		}
		return nil
	}
	id := s.nextMsg.Add(1)
	reply := make(chan message, 1)
	s.mu.Lock()
	s.replies[id] = reply
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.replies, id)
		s.mu.Unlock()
	}()
	e, _, ok, _ := c.exchange(message{Kind: msgAttach, From: cl.Node(), Session: c.remote.id,
		Conn: c.id, ID: id, Follow: follow, Seq: lastSeq}, reply)
	if !ok {
		// The owner did not answer (it may be dying): the attach stands
		// without it; its acks register the connection wherever the
		// session lives by then.
		return nil
	}
	return e
}

// unregisterRemote tells the owner of c's session that c left.
func (c *conn) unregisterRemote() {
	s, cl := c.srv, c.srv.opts.Cluster
	ctx, cancel := context.WithTimeout(s.final, storeTimeout)
	defer cancel()
	b, _ := json.Marshal(message{Kind: msgDetach, From: cl.Node(), Session: c.remote.id, Conn: c.id})
	if _, err := cl.Send(ctx, c.remote.owner, b); err != nil {
		s.log.Warn("tell the session's owner a connection left", "session", c.remote.id, "err", err)
	}
}
