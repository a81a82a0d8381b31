package orchestrator

import (
	"strings"
	"unicode/utf8"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// A chat run (user.message with metadata.mode "chat", or any user.message
// on a server whose DefaultMode is chat) answers the request with one
// agent loop: no planning, no plan confirmation. To a client written for
// plan mode it is a user.solve_tasks run of one task — chatTaskID, titled
// with the request cut short, described by the request — whose every
// solver.start names the task and the mode (no other event does), and
// whose end is the usual aggregate.start, aggregate.completed,
// pipeline.completed and agent.final_answer, the answer being the task's
// result: no aggregation model call. Tools, their confirmations, retries,
// cancel, checkpoints and takeover are those of any task.

// chatTaskID is the id of a chat run's one task.
const chatTaskID = "t1"

// chatTitleBytes is the most of the request a chat task's title holds.
const chatTitleBytes = 80

// messageMode is the mode of a user.message: its own, else the server's.
// A message that asks for an adaptive run is planned whatever the
// server's default: only a plan can adapt.
func (sess *session) messageMode(m *wsproto.Message) string {
	switch {
	case m.Mode != "":
		return m.Mode
	case m.Adaptive:
		return wsproto.ModePlan
	case sess.srv.opts.DefaultMode == wsproto.ModeChat:
		return wsproto.ModeChat
	}
	return wsproto.ModePlan
}

// startChat starts a chat run answering request.
func (sess *session) startChat(request string) *wsproto.Error {
	return sess.start(request, []wsproto.Task{chatTask(request)}, false, true)
}

// chatTask is the one task of a chat run answering request.
func chatTask(request string) wsproto.Task {
	return wsproto.Task{ID: chatTaskID, Title: chatTitle(request), Description: request, DependsOn: []string{}}
}

// chatTitle is the request's first non-blank line, cut to chatTitleBytes on a rune
// boundary with "…" marking a cut.
func chatTitle(request string) string {
	title := strings.TrimSpace(request)
	cut := false
	if i := strings.IndexByte(title, '\n'); i >= 0 {
		title, cut = strings.TrimSpace(title[:i]), true
	}
	if len(title) > chatTitleBytes {
		n := chatTitleBytes
		for n > 0 && !utf8.RuneStart(title[n]) {
			n--
		}
		title, cut = strings.TrimRight(title[:n], " "), true
	}
	switch {
	case title == "":
		return "Chat"
	case cut:
		return title + "…"
	}
	return title
}

// chatRefused is the error of a chat message whose request the model
// refuses as a task (the simulated model: a malformed directive): the
// client sent a message, not a task list, so it is invalid_message.
func chatRefused(probs []wsproto.TaskProblem) *wsproto.Error {
	msgs := make([]string, len(probs))
	for i, p := range probs {
		msgs[i] = p.Message
	}
	return &wsproto.Error{Code: wsproto.CodeInvalidMessage,
		Message: "the request cannot be answered: " + strings.Join(msgs, "; ")}
}

// chatSummary is a chat run's aggregate.completed summary: a line, not
// the answer again (solver.completed and agent.final_answer carry it).
const chatSummary = "Answered directly (chat mode)"

// chatAnswer is a chat run's aggregation: its one task's result is the
// answer. The result was cut where it entered, so it needs no cut here.
func chatAnswer(report solver.Report) aggregator.Output {
	return aggregator.Output{Summary: chatSummary, Answer: report.Results[chatTaskID]}
}

// mode is the run's mode as its state and events say it: ModeChat for a
// chat run, "" for the others.
func (r *run) mode() string {
	if r.chat {
		return wsproto.ModeChat
	}
	return ""
}
