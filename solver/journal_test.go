package solver

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/baton-run/baton/tool"
	"github.com/baton-run/baton/wsproto"
)

// journaling is a recorder that keeps a journal (Journal).
type journaling struct {
	*recorder
	mu      sync.Mutex // guards replied, settled
	replied []string
	settled int
}

var _ Journal = (*journaling)(nil)

func (j *journaling) Replied(id string, r Round) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.replied = append(j.replied, fmt.Sprintf("%s %d calls=%d final=%t", id, r.Number, len(r.Reply.ToolCalls), r.Final))
}

func (j *journaling) Settled(context.Context) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.settled++
}

// counting is a tool that records each execution and whether it was told
// it is a retry.
type counting struct {
	mu    sync.Mutex // guards execs
	execs []string
}

func (c *counting) tool() fakeTool {
	return fakeTool{name: "count", call: func(ctx context.Context, args json.RawMessage) (string, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.execs = append(c.execs, fmt.Sprintf("%s retry=%t", args, tool.Retry(ctx)))
		return "counted " + string(args), nil
	}}
}

// TestResumeJournal: a running task resumed with a journal goes on from
// its last round: no journaled reply is asked for again and no journaled
// result is run again; a call that began and never returned runs again,
// told it is a retry; the conversation is as it was.
func TestResumeJournal(t *testing.T) {
	n1, n2 := `{"n":1}`, `{"n":2}`
	tests := []struct {
		name    string
		journal []Round
		// rounds: the rounds the model is asked (the others replayed);
		// execs: the tool's executions.
		rounds []int
		execs  []string
		result string
	}{
		{name: "no journal: from scratch", rounds: []int{1, 2, 3},
			execs: []string{n1 + " retry=false", n2 + " retry=false"}, result: "answer"},
		{name: "reply in, its call not begun",
			journal: []Round{{Number: 1, Reply: calls(1, "count "+n1)}},
			rounds:  []int{2, 3}, execs: []string{n1 + " retry=false", n2 + " retry=false"}, result: "answer"},
		{name: "call begun, never returned",
			journal: []Round{{Number: 1, Reply: calls(1, "count "+n1), Results: []CallResult{{Retry: true}}}},
			rounds:  []int{2, 3}, execs: []string{n1 + " retry=true", n2 + " retry=false"}, result: "answer"},
		{name: "results in, next reply not",
			journal: []Round{{Number: 1, Reply: calls(1, "count "+n1), Results: []CallResult{{Text: "counted " + n1}}}},
			rounds:  []int{2, 3}, execs: []string{n2 + " retry=false"}, result: "answer"},
		{name: "second round's reply in",
			journal: []Round{
				{Number: 1, Reply: calls(1, "count "+n1), Results: []CallResult{{Text: "counted " + n1}}},
				{Number: 2, Reply: calls(2, "count "+n2)},
			},
			rounds: []int{3}, execs: []string{n2 + " retry=false"}, result: "answer"},
		{name: "the answer in",
			journal: []Round{
				{Number: 1, Reply: calls(1, "count "+n1), Results: []CallResult{{Text: "counted " + n1}}},
				{Number: 2, Reply: calls(2, "count "+n2), Results: []CallResult{{Text: "counted " + n2}}},
				{Number: 3, Reply: Reply{Text: "journaled answer"}, Final: true},
			},
			result: "journaled answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := &counting{}
			model := &scripted{next: byRound(calls(1, "count "+n1), calls(2, "count "+n2))}
			ev := &journaling{recorder: &recorder{}}
			from := Resume{Tasks: []ResumeTask{stood(task("a"), wsproto.TaskRunning, 1)}}
			from.Tasks[0].Journal = tt.journal
			rep := NewResumed(from, model, ev, Options{Loop: Loop{Tools: toolSet(t, tl.tool())}}).Execute(t.Context())
			if rep.Results["a"] != tt.result {
				t.Errorf("result %q, want %q (report %+v)", rep.Results["a"], tt.result, rep)
			}
			var rounds []int
			for _, turn := range model.turns {
				rounds = append(rounds, turn.Round)
			}
			if !slices.Equal(rounds, tt.rounds) {
				t.Errorf("the model was asked rounds %v, want %v", rounds, tt.rounds)
			}
			if !slices.Equal(tl.execs, tt.execs) {
				t.Errorf("tool executions %q, want %q", tl.execs, tt.execs)
			}
			// The conversation the model is asked with is the one it
			// would have had: every earlier reply and result in it.
			for _, turn := range model.turns {
				var asked, answered int
				for _, m := range turn.Messages {
					switch {
					case m.Role == RoleAssistant:
						asked++
					case m.Role == RoleTool && m.Content == fmt.Sprintf("counted {\"n\":%d}", answered+1):
						answered++
					}
				}
				if asked != turn.Round-1 || answered != turn.Round-1 {
					t.Errorf("round %d was asked with %d replies and %d results, want %d of each", turn.Round, asked, answered, turn.Round-1)
				}
			}
			// Every reply the model gave is journaled, and the loop
			// waits for the journal before each model call and each
			// tool run.
			if len(ev.replied) != len(tt.rounds) || ev.settled != len(tt.rounds)+len(tt.execs) {
				t.Errorf("replied %q, settled %d times; want %d replies and %d waits", ev.replied, ev.settled, len(tt.rounds), len(tt.rounds)+len(tt.execs))
			}
			if n := len(tt.rounds); n > 0 && ev.replied[n-1] != "a 3 calls=0 final=true" {
				t.Errorf("last reply journaled as %q", ev.replied[n-1])
			}
		})
	}
}
