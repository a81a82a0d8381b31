package client

import (
	"context"
	"encoding/json"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/wsproto"
)

func writeJSON(ctx context.Context, ws *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

// Send writes one client frame. It fails while the client is between
// connections (the frame was not sent); with Resume set, a caller that
// cares sends it again once the client has resumed (View's Stats.Resumes
// grows). It returns ErrClosed once the client is closed.
func (c *Client) Send(ctx context.Context, event, stepID, content string, meta any) error {
	frame := map[string]any{"event": event}
	if stepID != "" {
		frame["step_id"] = stepID
	}
	if content != "" {
		frame["content"] = content
	}
	if meta != nil {
		frame["metadata"] = meta
	}
	b, err := json.Marshal(frame)
	if err != nil {
		return err
	}
	c.mu.Lock()
	ws, closed := c.ws, c.closed
	if event == wsproto.EventUserResponse {
		c.answers[stepID] = b
		switch a := meta.(type) {
		case Answer:
			c.closeConfirm(stepID, a)
		case *Answer:
			c.closeConfirm(stepID, *a)
		default:
			c.state.CloseConfirm(stepID)
		}
	}
	c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return ws.Write(ctx, websocket.MessageText, b)
}

// closeConfirm folds the client's own answer into its state, as the
// server does: the confirmation closes, and an input_request's answer is
// recorded.
func (c *Client) closeConfirm(stepID string, a Answer) {
	if a.Text != nil {
		c.state.Answer(stepID, *a.Text)
		return
	}
	c.state.CloseConfirm(stepID)
}

// Message starts a run for a request.
func (c *Client) Message(ctx context.Context, text string) error {
	return c.Send(ctx, wsproto.EventUserMessage, "", text, nil)
}

// MessageChat starts a chat run for a request (§5.6): one agent loop
// answers it directly, with no plan and no plan confirmation; the run's
// one task is t1 and its result the final answer.
func (c *Client) MessageChat(ctx context.Context, text string) error {
	return c.Send(ctx, wsproto.EventUserMessage, "", text, map[string]any{"mode": wsproto.ModeChat})
}

// MessagePlan starts a plan-mode run for a request whatever the server's
// --default-mode.
func (c *Client) MessagePlan(ctx context.Context, text string) error {
	return c.Send(ctx, wsproto.EventUserMessage, "", text, map[string]any{"mode": wsproto.ModePlan})
}

// MessageAdaptive starts an adaptive run for a request (§11): the model
// decides after each task whether to continue, adjust the plan, ask the
// user or synthesize.
func (c *Client) MessageAdaptive(ctx context.Context, text string) error {
	return c.Send(ctx, wsproto.EventUserMessage, "", text, map[string]any{"adaptive": true})
}

// SolveTasks starts a run of the given tasks.
func (c *Client) SolveTasks(ctx context.Context, tasks []wsproto.Task) error {
	c.mu.Lock()
	c.seed = tasks
	c.mu.Unlock()
	return c.Send(ctx, wsproto.EventUserSolve, "", "", map[string]any{"tasks": tasks})
}

// Replan sends the plan awaiting confirmation back to the planner with
// the user's feedback.
func (c *Client) Replan(ctx context.Context, feedback string) error {
	return c.Send(ctx, wsproto.EventUserReplan, "", "", map[string]any{"feedback": feedback})
}

// RestartTask asks a finished task of the running run to run again.
func (c *Client) RestartTask(ctx context.Context, taskID string) error {
	return c.Send(ctx, wsproto.EventUserRestart, "", "", map[string]any{"task_id": taskID})
}

// Respond answers a confirmation.
func (c *Client) Respond(ctx context.Context, stepID string, a Answer) error {
	if a.Tasks != nil && a.Confirmed != nil && *a.Confirmed {
		c.mu.Lock()
		if r := c.state.Run; r != nil {
			for _, p := range r.PendingConfirm {
				if p.StepID == stepID && p.Kind == wsproto.ConfirmPlan {
					c.seed = a.Tasks // the edited plan is what the run solves
				}
			}
		}
		c.mu.Unlock()
	}
	return c.Send(ctx, wsproto.EventUserResponse, stepID, "", a)
}

// Ack acknowledges every event up to lastSeq.
func (c *Client) Ack(ctx context.Context, lastSeq uint64) error {
	return c.Send(ctx, wsproto.EventUserAck, "", "", map[string]any{"last_seq": lastSeq})
}
