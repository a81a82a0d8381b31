package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// naive frames each event as it is written: the run's events built with
// fresh ids, each marshalled whole and written under its own deadline.
type naive struct{}

// naiveIDs are a run's real ids: a UUID per run, per tool step, per
// confirmation.
type naiveIDs struct{ runID string }

func (n naiveIDs) run() string       { return n.runID }
func (naiveIDs) toolStep(int) string { return "tool_" + newUUID() }
func (naiveIDs) confirmStep() string { return "confirm_plan_" + newUUID() }
func (naiveIDs) expiresAt() any      { return time.Now().UTC().Add(confirmTimeout) }

func (m naive) writeRun(ctx context.Context, c *conn, req request) error {
	id := naiveIDs{runID: "run_" + newUUID()}
	if req.message != "" {
		plan := planEvents(req, id)
		if err := m.write(ctx, c, plan, false); err != nil {
			return err
		}
		ok, err := c.awaitConfirm(ctx, plan[len(plan)-1].stepID)
		if err != nil {
			return err
		}
		if !ok {
			return m.write(ctx, c, []event{rejectedEvent(id)}, true)
		}
	}
	return m.write(ctx, c, solveEvents(req, id), true)
}

func (naive) write(ctx context.Context, c *conn, evs []event, endsRun bool) error {
	for i, ev := range evs {
		if endsRun && i == len(evs)-1 {
			c.endRun()
		}
		c.seq++
		b, err := json.Marshal(frame{Event: ev.name, EventID: newUUID(), Seq: c.seq, SessionID: c.session, StepID: ev.stepID,
			Timestamp: time.Now().UTC(), Content: ev.content, Metadata: ev.meta})
		if err != nil {
			return fmt.Errorf("encode %s: %w", ev.name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err = c.ws.Write(wctx, websocket.MessageText, b)
		cancel()
		if err != nil {
			return fmt.Errorf("write %s: %w", ev.name, err)
		}
	}
	return nil
}

// preencoded writes runs from templates: a run's frames encoded once per
// distinct request, with holes where the ids, seq and timestamp go.
type preencoded struct {
	mu        sync.Mutex           // guards templates
	templates map[string]*compiled // by request key
}

// maxTemplates bounds the cache; a request beyond it is compiled for its
// run only.
const maxTemplates = 4096

func newPreencoded() *preencoded { return &preencoded{templates: map[string]*compiled{}} }

// compiled is a request's run as templates.
type compiled struct {
	plan, rejected, solve []template
}

// template is one frame: literal bytes, each followed by a hole.
type template []piece

type piece struct {
	lit  []byte
	hole byte // one of the hole kinds below; 0 for none
	n    int  // holeStep's step number
}

// Hole kinds: the placeholder "@@<kind>[n]@@" a template is compiled
// with. A seq is placed as the string "@@Q@@", whose quotes go.
const (
	holeEventID = 'E'
	holeSeq     = 'Q'
	holeSession = 'N'
	holeTime    = 'T'
	holeRun     = 'R'
	holeStep    = 'S'
	holeConfirm = 'C'
	holeExpires = 'X'
)

// placeholderIDs are the holes a template is compiled with.
type placeholderIDs struct{}

func (placeholderIDs) run() string           { return "@@R@@" }
func (placeholderIDs) toolStep(k int) string { return "@@S" + strconv.Itoa(k) + "@@" }
func (placeholderIDs) confirmStep() string   { return "@@C@@" }
func (placeholderIDs) expiresAt() any        { return "@@X@@" }

// templateFrame is frame with its seq and timestamp as placeholders.
type templateFrame struct {
	Event     string `json:"event"`
	EventID   string `json:"event_id"`
	Seq       string `json:"seq"`
	SessionID string `json:"session_id"`
	StepID    string `json:"step_id,omitempty"`
	Timestamp string `json:"timestamp"`
	Content   string `json:"content"`
	Metadata  any    `json:"metadata"`
}

func (p *preencoded) compile(req request) (*compiled, error) {
	p.mu.Lock()
	t, ok := p.templates[req.key]
	p.mu.Unlock()
	if ok {
		return t, nil
	}
	if strings.Contains(req.message, "@@") {
		return nil, errors.New("a request may not contain @@ here")
	}
	for _, t := range req.tasks {
		if strings.Contains(t.ID+t.Title+t.Description+strings.Join(t.DependsOn, ""), "@@") {
			return nil, errors.New("a task may not contain @@ here")
		}
	}
	var id placeholderIDs
	t = &compiled{rejected: templates([]event{rejectedEvent(id)}), solve: templates(solveEvents(req, id))}
	if req.message != "" {
		t.plan = templates(planEvents(req, id))
	}
	p.mu.Lock()
	if len(p.templates) < maxTemplates {
		p.templates[req.key] = t
	}
	p.mu.Unlock()
	return t, nil
}

func templates(evs []event) []template {
	out := make([]template, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(templateFrame{Event: ev.name, EventID: "@@E@@", Seq: "@@Q@@", SessionID: "@@N@@", StepID: ev.stepID,
			Timestamp: "@@T@@", Content: ev.content, Metadata: ev.meta})
		if err != nil {
			panic(err) // the event structs above always encode
		}
		out[i] = split(b)
	}
	return out
}

// split cuts an encoded frame at its placeholders.
func split(b []byte) template {
	var t template
	for {
		i := bytes.Index(b, []byte("@@"))
		if i < 0 {
			return append(t, piece{lit: b})
		}
		j := i + 2 + bytes.Index(b[i+2:], []byte("@@"))
		name, lit, rest := string(b[i+2:j]), b[:i], b[j+2:]
		p := piece{lit: lit, hole: name[0]}
		switch p.hole {
		case holeSeq:
			p.lit, rest = lit[:len(lit)-1], rest[1:] // the quotes of "@@Q@@"
		case holeStep:
			p.n, _ = strconv.Atoi(name[1:])
		}
		t = append(t, p)
		b = rest
	}
}

func (m *preencoded) writeRun(ctx context.Context, c *conn, req request) error {
	t, err := m.compile(req)
	if err != nil {
		c.endRun()
		c.sendError(ctx, "invalid_tasks", "", err.Error())
		return nil
	}
	runUUID := newUUID()
	if t.plan != nil {
		if err := m.write(ctx, c, t.plan, runUUID, false); err != nil {
			return err
		}
		ok, err := c.awaitConfirm(ctx, "confirm_plan_"+runUUID)
		if err != nil {
			return err
		}
		if !ok {
			return m.write(ctx, c, t.rejected, runUUID, true)
		}
	}
	return m.write(ctx, c, t.solve, runUUID, true)
}

// write fills and writes frames, under one deadline for the batch.
func (*preencoded) write(ctx context.Context, c *conn, frames []template, runUUID string, endsRun bool) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	for i, t := range frames {
		if endsRun && i == len(frames)-1 {
			c.endRun()
		}
		c.seq++
		c.buf = c.fill(c.buf[:0], t, runUUID)
		if err := c.ws.Write(ctx, websocket.MessageText, c.buf); err != nil {
			return fmt.Errorf("write seq %d: %w", c.seq, err)
		}
	}
	return nil
}

// fill appends t with its holes filled: event ids are the connection's
// prefix and a count, a tool step's id is made of the run's UUID and the
// step's number.
func (c *conn) fill(dst []byte, t template, runUUID string) []byte {
	now := time.Now().UTC()
	for _, p := range t {
		dst = append(dst, p.lit...)
		switch p.hole {
		case holeEventID:
			c.events++
			dst = append(dst, c.idPrefix...)
			dst = appendHex12(dst, c.events)
		case holeSeq:
			dst = strconv.AppendUint(dst, c.seq, 10)
		case holeSession:
			dst = append(dst, c.session...)
		case holeTime:
			dst = now.AppendFormat(dst, time.RFC3339Nano)
		case holeRun:
			dst = append(dst, "run_"...)
			dst = append(dst, runUUID...)
		case holeStep:
			dst = append(dst, "tool_"...)
			dst = append(dst, runUUID[:24]...)
			dst = appendHex12(dst, uint64(p.n))
		case holeConfirm:
			dst = append(dst, "confirm_plan_"...)
			dst = append(dst, runUUID...)
		case holeExpires:
			dst = now.Add(confirmTimeout).AppendFormat(dst, time.RFC3339Nano)
		}
	}
	return dst
}

// appendHex12 appends v as 12 lowercase hex digits, a UUID's last group.
func appendHex12(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for i := 44; i >= 0; i -= 4 {
		dst = append(dst, digits[v>>uint(i)&0xf])
	}
	return dst
}
