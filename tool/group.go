package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
)

// Group runs tool calls so that the caller never waits for one past its
// context: Call returns as soon as ctx is done, whether or not the tool
// has. A call that goes on after that is abandoned to the Group, which
// owns its goroutine until the tool returns: Wait waits for it. A tool
// that obeys its context returns soon after; one that does not (a
// runaway computation, a blocked read) holds nobody up but Wait.
//
// The zero value is ready to use. A Group is safe for concurrent use.
type Group struct {
	// abandoned counts the calls whose caller has stopped waiting and
	// that are still running.
	abandoned atomic.Int64

	// mu guards running and idle: the calls whose goroutine has not
	// ended, and a channel closed when that drops to 0 (nil when nobody
	// waits).
	mu      sync.Mutex
	running int
	idle    chan struct{}
}

// Call states: the caller waits for it, the tool has returned, the
// caller has stopped waiting.
const (
	callWaited int32 = iota
	callReturned
	callAbandoned
)

type callResult struct {
	text string
	err  error
}

// Call calls t with args on a goroutine of the Group's and returns its
// result, or ctx's cause as the error as soon as ctx is done, even
// while t goes on. A panic in t is its error.
func (g *Group) Call(ctx context.Context, t Tool, args json.RawMessage) (string, error) {
	if err := context.Cause(ctx); err != nil {
		return "", err
	}
	done := make(chan callResult, 1)
	var state atomic.Int32
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	go func() {
		defer g.ended()
		var r callResult
		defer func() {
			if p := recover(); p != nil {
				r = callResult{err: fmt.Errorf("the tool failed: %v", p)}
			}
			if !state.CompareAndSwap(callWaited, callReturned) {
				g.abandoned.Add(-1)
			}
			done <- r
		}()
		r.text, r.err = t.Call(ctx, args)
	}()
	select {
	case r := <-done:
		return r.text, r.err
	case <-ctx.Done():
	}
	g.abandoned.Add(1)
	if !state.CompareAndSwap(callWaited, callAbandoned) {
		g.abandoned.Add(-1) // it returned meanwhile: take its result
		r := <-done
		return r.text, r.err
	}
	return "", context.Cause(ctx)
}

// ended records that a call's goroutine has ended.
func (g *Group) ended() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running--; g.running == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Abandoned returns how many calls go on although their caller stopped
// waiting for them.
func (g *Group) Abandoned() int { return int(g.abandoned.Load()) }

// Wait waits until no call of the Group's is running, or ctx is done:
// then it returns an error saying how many still are.
func (g *Group) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		if g.running == 0 {
			g.mu.Unlock()
			return nil
		}
		if g.idle == nil {
			g.idle = make(chan struct{})
		}
		idle := g.idle
		g.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			g.mu.Lock()
			n := g.running
			g.mu.Unlock()
			return fmt.Errorf("%d tool calls still running (%d abandoned): %w", n, g.Abandoned(), context.Cause(ctx))
		}
	}
}
