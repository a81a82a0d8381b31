package client

import (
	"context"
	"fmt"
	"slices"

	"github.com/baton-run/baton/wsproto"
)

// Wait blocks until cond returns true, or ctx is done, or the client stops
// for good. cond is called with the client's latest view, once at first and
// again after frames arrive — not necessarily after every frame: several may
// be applied between two calls, so a state that lasts only a few frames (a
// phase, say) can be missed. Wait for conditions that stay true once
// reached: a seq reached, an event counted, a final answer present. A
// frame's OnEvent and OnConfirm callbacks have returned before cond sees
// the frame.
func (c *Client) Wait(ctx context.Context, cond func(v View) bool) error {
	for {
		c.mu.Lock()
		v := c.viewLocked()
		ch := c.changed
		// Mid-delivery, the view may hold a frame whose callbacks have not
		// returned yet; that frame's wake comes next.
		busy := c.delivering
		c.mu.Unlock()
		if !busy && cond(v) {
			return nil
		}
		select {
		case <-ch:
		case <-c.done:
			c.mu.Lock()
			v := c.viewLocked()
			c.mu.Unlock()
			if cond(v) {
				return nil
			}
			return fmt.Errorf("client: stopped before the condition held: %w", c.Err())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// View is a copy of what the client knows at one moment.
type View struct {
	SessionID   string
	ResumeToken string
	// FollowToken lets another device follow the session (Follow); ""
	// when the server gave none.
	FollowToken string
	LastSeq     uint64
	Checksum    string
	Phase       string
	Run         *wsproto.RunState // a copy
	// History is the session's finished runs, oldest first (§6), from the
	// snapshot and each run's end event; a copy.
	History []wsproto.HistoryEntry
	Stats   Stats
}

// View returns the client's current view.
func (c *Client) View() View {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.viewLocked()
}

func (c *Client) viewLocked() View {
	s := c.stats
	s.Violations = append([]string(nil), s.Violations...)
	return View{SessionID: c.sessionID, ResumeToken: c.token, FollowToken: c.follow, LastSeq: c.lastSeq, Checksum: c.checksum.String(),
		Phase: c.state.Snapshot(0, "").Phase, Run: copyRun(c.state.Run), History: slices.Clone(c.state.History), Stats: s}
}

func copyRun(r *wsproto.RunState) *wsproto.RunState {
	if r == nil {
		return nil
	}
	out := *r
	out.Tasks = append([]wsproto.TaskState(nil), r.Tasks...)
	out.PendingConfirm = append([]wsproto.UserConfirm(nil), r.PendingConfirm...)
	out.Answers = append([]wsproto.AnswerState(nil), r.Answers...)
	if r.FinalAnswer != nil {
		a := *r.FinalAnswer
		out.FinalAnswer = &a
	}
	return &out
}
