package solver

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/baton-run/baton/wsproto"
)

const systemIntro = `You are one worker of a task pipeline: do only your task and reply with its result.
Use the tools when they help; keep your todo list current with todo_write and todo_update.
When you have what you need, answer with the result itself, without calling a tool.`

const chatIntro = `You answer the user's message directly, as an assistant in a chat.
Use the tools when they help; for work of several steps, keep a todo list with todo_write and todo_update.
When you have what you need, write the answer itself, without calling a tool: the user reads it as you write it.`

// systemPrompt is built afresh for every round from the run's task list,
// the task's todo list and the user's answers, so the model always sees
// them as they are now, once.
func systemPrompt(t *Turn) string {
	var b strings.Builder
	b.Grow(len(systemIntro) + 128 + 64*len(t.Tasks) + 64*len(t.Todo))
	line := func(parts ...string) {
		for _, p := range parts {
			b.WriteString(p)
		}
	}
	intro, tasks := systemIntro, t.Tasks
	if t.Chat {
		intro, tasks = chatIntro, nil // a chat run's one task is the message itself
	}
	line(intro, "\n\nRound ", strconv.Itoa(t.Round), " of at most ", strconv.Itoa(t.MaxRounds), ".")
	if len(t.Tools) == 0 {
		b.WriteString(" No tools this round: answer now.")
	}
	if len(tasks) > 0 {
		b.WriteString("\n\nThe run's tasks:\n")
	}
	for _, s := range tasks {
		line("- [", s.Status, "] ", s.Task.ID, ": ", s.Task.Title)
		for k, d := range s.Task.DependsOn {
			if k == 0 {
				line(" (after ", d)
			} else {
				line(", ", d)
			}
			if k == len(s.Task.DependsOn)-1 {
				b.WriteByte(')')
			}
		}
		b.WriteByte('\n')
	}
	if len(t.Todo) > 0 {
		b.WriteString("\nYour todo list:\n")
		for _, it := range t.Todo {
			line("- [", it.Status, "] ", it.ID, ": ", it.Content)
			if it.Note != "" {
				line(" (", it.Note, ")")
			}
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("\nYou have no todo list yet.\n")
	}
	if len(t.Answers) > 0 {
		b.WriteString("\nThe user's answers:\n")
		for _, a := range t.Answers {
			line("- Q: ", a.Question, "\n  A: ", a.Text, "\n")
		}
	}
	return b.String()
}

// priorMessages are the runs before this one in the session's conversation,
// as the user and assistant turns they were: each earlier request, then its
// answer (or what became of a run that gave none). They go between the
// system prompt and the task, within the history budget the server fitted
// them to; fit never elides them (it elides only tool results).
func priorMessages(history []wsproto.HistoryEntry) []Message {
	out := make([]Message, 0, 2*len(history))
	for _, h := range history {
		answer := h.Answer
		if answer == "" {
			answer = "(this run ended without an answer: " + h.Status + ")"
		}
		out = append(out, Message{Role: RoleUser, Content: h.Request}, Message{Role: RoleAssistant, Content: answer})
	}
	return out
}

// taskPrompt is the conversation's first user message: the request, the
// plan and the dependencies' results within budget bytes, and the task.
func taskPrompt(in Input, budget int) string {
	if in.Chat {
		return in.Task.Description // the user's message, as written
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Request:\n%s\n\nPlan: %s\n", in.Request, in.PlanSummary)
	if len(in.Dependencies) > 0 {
		b.WriteString("\nResults of the tasks yours depends on:\n")
		ids := make([]string, 0, len(in.Dependencies))
		for id := range in.Dependencies {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		each := budget / len(ids)
		for _, id := range ids {
			fmt.Fprintf(&b, "### %s\n%s\n", id, Truncate(in.Dependencies[id], each))
		}
	}
	fmt.Fprintf(&b, "\nYour task: %s — %s\n%s\n", in.Task.ID, in.Task.Title, in.Task.Description)
	return b.String()
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(" […]"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + " […]"
}

// size is what a message costs against the context budget, in bytes.
func (m Message) size() int {
	n := len(m.Content)
	for _, c := range m.ToolCalls {
		n += len(c.Name) + len(c.Arguments)
	}
	return n
}

// fit returns a copy of msgs within budget bytes: while over it, the oldest
// tool results are replaced by a short marker. The system prompt, the
// earlier runs and the task (every message before the first tool result)
// are never touched, nor is msgs itself.
func fit(msgs []Message, budget int) []Message {
	total := 0
	for _, m := range msgs {
		total += m.size()
	}
	out := append([]Message(nil), msgs...)
	for i := 2; i < len(out) && total > budget; i++ {
		if out[i].Role != RoleTool || strings.HasPrefix(out[i].Content, elidedPrefix) {
			continue
		}
		marker := fmt.Sprintf("%s %d bytes of an older tool result, to fit the context]", elidedPrefix, len(out[i].Content))
		total += len(marker) - len(out[i].Content)
		out[i].Content = marker
	}
	return out
}

const elidedPrefix = "[elided:"
