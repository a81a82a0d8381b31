package wsproto_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/baton-run/baton/wsproto"
)

// The codes DecodeText may answer with: §7's list narrowed to the three that
// describe a frame rather than the session (§2, "Bad frames").
var decodeCodes = map[string]bool{
	wsproto.CodeInvalidJSON:    true,
	wsproto.CodeInvalidMessage: true,
	wsproto.CodeUnknownType:    true,
}

var clientEvents = map[string]bool{
	wsproto.EventUserMessage: true, wsproto.EventUserSolve: true, wsproto.EventUserResponse: true,
	wsproto.EventUserCancel: true, wsproto.EventUserCancelTask: true, wsproto.EventUserRestart: true,
	wsproto.EventUserReplan: true, wsproto.EventUserAck: true, wsproto.EventUserReconnect: true,
}

// FuzzDecodeText: any bytes are either a typed request or one system.error
// with a code of §2's table, never a panic. A request encodes back into a
// frame that decodes to the same request; an error carries ref_type exactly
// when the frame's event was readable.
func FuzzDecodeText(f *testing.F) {
	for _, s := range []string{
		`{"event":"user.message","content":"hi"}`,
		`{"event":"user.message","content":"hi","metadata":{"adaptive":true}}`,
		`{"event":"user.ack","metadata":{"last_seq":1}}`,
		`{"event":"user.solve_tasks","metadata":{"tasks":[{"id":"a","title":"A","depends_on":["b"]}]}}`,
		`{"event":"user.response","step_id":"s","metadata":{"confirmed":true,"tasks":[]}}`,
		`{"event":"user.response","metadata":{"step_id":"s","action":"skip"}}`,
		`{"event":"user.reconnect_with_state","metadata":{"session_id":"sess_1","resume_token":"t","last_seq":0}}`,
		`{"event":"user.ack","content":5}`,
		`{"event":"user.dance","metadata":"x"}`,
		`[]`, `{"event":5}`, `{"Event":"user.cancel"}`, "\xff", `{"event":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, e := wsproto.DecodeText(data)
		if (req == nil) == (e == nil) {
			t.Fatalf("DecodeText(%q) = %v, %v: want exactly one", data, req, e)
		}
		ev, readable, ambiguous := readableEvent(data)
		if e != nil {
			checkDecodeError(t, data, e, ev, readable, ambiguous)
			return
		}
		if !ambiguous && (!readable || req.Event() != ev) {
			t.Fatalf("DecodeText(%q) = %T for event %q (readable %v)", data, req, ev, readable)
		}
		checkRequest(t, req)
		again, e2 := wsproto.DecodeText(encodeRequest(t, req))
		if e2 != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("DecodeText(%q) = %#v; encoded and decoded again: %#v, %+v", data, req, again, e2)
		}
	})
}

func checkDecodeError(t *testing.T, data []byte, e *wsproto.Error, ev string, readable, ambiguous bool) {
	t.Helper()
	if !decodeCodes[e.Code] || e.Message == "" {
		t.Fatalf("DecodeText(%q): error %+v, want a code of §2 and a message", data, e)
	}
	if len(e.Details) != 0 {
		t.Fatalf("DecodeText(%q): error with details %+v", data, e.Details)
	}
	if (e.Code == wsproto.CodeInvalidJSON) != (!utf8.Valid(data) || !json.Valid(data)) {
		t.Fatalf("DecodeText(%q): code %s, but valid UTF-8 %v, valid JSON %v", data, e.Code, utf8.Valid(data), json.Valid(data))
	}
	if e.Code == wsproto.CodeUnknownType && clientEvents[e.RefType] {
		t.Fatalf("DecodeText(%q): unknown_type for the known event %q", data, e.RefType)
	}
	if ambiguous {
		return // "event" more than once: which one is read is encoding/json's business
	}
	if want := map[bool]string{true: ev}[readable]; e.RefType != want {
		t.Fatalf("DecodeText(%q): ref_type %q, want %q (%+v)", data, e.RefType, want, e)
	}
}

// checkRequest checks what a decoded request promises its consumer.
func checkRequest(t *testing.T, req wsproto.Request) {
	t.Helper()
	bad := false
	switch r := req.(type) {
	case *wsproto.Message:
		bad = r.Text == ""
	case *wsproto.Response:
		bad = r.StepID == ""
	case *wsproto.CancelTask:
		bad = r.TaskID == ""
	case *wsproto.RestartTask:
		bad = r.TaskID == ""
	case *wsproto.SolveTasks:
		for _, tk := range r.Tasks {
			bad = bad || tk.DependsOn == nil
		}
	}
	if r, ok := req.(*wsproto.Response); ok {
		for _, tk := range r.Tasks {
			bad = bad || tk.DependsOn == nil
		}
	}
	if bad {
		t.Fatalf("decoded request breaks its promises: %#v", req)
	}
}

// readableEvent reads the top-level "event" member of a JSON object the way
// a client author would: found by a token scan (matched case-insensitively,
// as encoding/json matches fields), readable when it is a non-empty string.
// ambiguous reports more than one such member.
func readableEvent(data []byte) (ev string, readable, ambiguous bool) {
	if !utf8.Valid(data) || !json.Valid(data) {
		return "", false, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return "", false, false
	}
	found := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", false, false
		}
		if key, _ := tok.(string); strings.EqualFold(key, "event") {
			found++
			var s string
			if json.Unmarshal(raw, &s) == nil && s != "" {
				ev, readable = s, true
			} else {
				ev, readable = "", false
			}
		}
	}
	return ev, readable, found > 1
}

// encodeRequest writes req as a client would send it (§2), the reference
// encoder the decoder is checked against.
func encodeRequest(t *testing.T, req wsproto.Request) []byte {
	t.Helper()
	frame := map[string]any{"event": req.Event()}
	meta := map[string]any{}
	switch r := req.(type) {
	case *wsproto.Message:
		frame["content"] = r.Text
		meta["adaptive"] = r.Adaptive
	case *wsproto.SolveTasks:
		meta["tasks"], meta["adaptive"] = r.Tasks, r.Adaptive
	case *wsproto.Response:
		frame["step_id"] = r.StepID
		if r.Confirmed != nil {
			meta["confirmed"] = *r.Confirmed
		}
		if r.Tasks != nil {
			meta["tasks"] = r.Tasks
		}
		if r.Action != "" {
			meta["action"] = r.Action
		}
		if r.Approved != nil {
			meta["approved"] = *r.Approved
		}
		if r.Text != nil {
			meta["text"] = *r.Text
		}
	case *wsproto.Cancel:
	case *wsproto.CancelTask:
		meta["task_id"] = r.TaskID
	case *wsproto.RestartTask:
		meta["task_id"] = r.TaskID
	case *wsproto.Replan:
		meta["feedback"] = r.Feedback
	case *wsproto.Ack:
		meta["last_seq"] = r.LastSeq
	case *wsproto.Reconnect:
		meta["session_id"], meta["resume_token"] = r.SessionID, r.ResumeToken
		meta["last_seq"], meta["state_checksum"] = r.LastSeq, r.StateChecksum
	default:
		t.Fatalf("no encoding for %T", req)
	}
	frame["metadata"] = meta
	b, err := json.Marshal(frame)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The problem codes ValidateTasks may report: §5.1's list without
// invalid_directive, which only a model reports.
var taskCodes = []string{
	wsproto.ProblemEmpty, wsproto.ProblemTooMany, wsproto.ProblemEmptyID, wsproto.ProblemDuplicateID,
	wsproto.ProblemEmptyTitle, wsproto.ProblemUnknownDependency, wsproto.ProblemCycle,
}

// FuzzValidateTasks: any task list gets exactly the problems a plain
// reference finds (counted by code), each well formed; a list with none is
// valid by the reference's rules, its cycle check a different algorithm
// (Kahn's) from the validator's depth-first search.
func FuzzValidateTasks(f *testing.F) {
	// Two bytes a task: id taskIDs[b%7] (1 is "a", 2 "b" …), an empty title
	// when b>>3&7 is 1; then the number of dependencies, each a byte
	// (taskIDs[d%8]: 7 is "z", unknown).
	f.Add([]byte{}, uint8(50))
	f.Add([]byte{1, 0}, uint8(50))                                  // a
	f.Add([]byte{1, 0, 2, 1, 1, 3, 1, 1, 4, 2, 2, 3}, uint8(50))    // a diamond
	f.Add([]byte{1, 1, 1}, uint8(0))                                // a depends on itself
	f.Add([]byte{1, 1, 2, 2, 1, 3, 3, 1, 1}, uint8(50))             // a→b→c→a
	f.Add([]byte{1, 0, 1, 0, 0, 0}, uint8(2))                       // a duplicate, an empty id, too many
	f.Add([]byte{9, 1, 7}, uint8(50))                               // an empty title, an unknown dependency
	f.Add([]byte{1, 1, 0, 2, 2, 1, 2, 3, 2, 1, 1, 1, 3}, uint8(50)) // an empty dependency, a cycle behind duplicates
	f.Fuzz(func(t *testing.T, data []byte, maxTasks uint8) {
		tasks := tasksFrom(data)
		got := wsproto.ValidateTasks(tasks, int(maxTasks))
		counts := map[string]int{}
		for _, p := range got {
			counts[p.Code]++
			checkProblem(t, tasks, p)
		}
		want := referenceProblems(tasks, int(maxTasks))
		for _, code := range taskCodes {
			if counts[code] != want[code] {
				t.Fatalf("tasks %+q (max %d): %d %s problems, the reference finds %d; all: %+v", tasks, maxTasks, counts[code], code, want[code], showProblems(got))
			}
			delete(counts, code)
		}
		if len(counts) != 0 {
			t.Fatalf("tasks %+q: problems with codes outside §5.1: %v", tasks, showProblems(got))
		}
		if (got == nil) != (len(tasks) > 0 && sum(want) == 0) {
			t.Fatalf("tasks %+q: ValidateTasks = %v, reference %v", tasks, showProblems(got), want)
		}
	})
}

func checkProblem(t *testing.T, tasks []wsproto.Task, p wsproto.TaskProblem) {
	t.Helper()
	if p.Message == "" {
		t.Fatalf("problem without a message: %+v", p)
	}
	listWide := p.Code == wsproto.ProblemEmpty || p.Code == wsproto.ProblemTooMany
	switch {
	case listWide && (p.Index != nil || p.TaskID != ""):
		t.Fatalf("%s names a task: %+v", p.Code, p)
	case listWide:
	case p.Index == nil || *p.Index < 0 || *p.Index >= len(tasks) || tasks[*p.Index].ID != p.TaskID:
		t.Fatalf("problem %+v does not name a task of the list %+q", p, tasks)
	case p.Code == wsproto.ProblemCycle && !onCycle(tasks, p.TaskID):
		t.Fatalf("cycle reported at %q, which is on no cycle: %+q", p.TaskID, tasks)
	}
}

// taskIDs is a small alphabet, so that duplicates, unknown dependencies and
// cycles are common; "" is an empty id, "z" is never a task's.
var taskIDs = []string{"", "a", "b", "c", "d", "e", "f", "z"}

// tasksFrom turns fuzz bytes into a task list: two bytes a task (the id and
// an empty title from the first, the number of dependencies from the
// second), then one byte per dependency.
func tasksFrom(data []byte) []wsproto.Task {
	var tasks []wsproto.Task
	for len(data) >= 2 {
		b, n := data[0], int(data[1]%4)
		data = data[2:]
		tk := wsproto.Task{ID: taskIDs[b%7], Title: "T", DependsOn: []string{}}
		if b>>3&7 == 1 {
			tk.Title = ""
		}
		for ; n > 0 && len(data) > 0; n-- {
			tk.DependsOn = append(tk.DependsOn, taskIDs[data[0]%8])
			data = data[1:]
		}
		tasks = append(tasks, tk)
	}
	return tasks
}

// referenceProblems counts the problems of §5.1 by code, rule by rule.
func referenceProblems(tasks []wsproto.Task, maxTasks int) map[string]int {
	want := map[string]int{}
	if len(tasks) == 0 {
		want[wsproto.ProblemEmpty] = 1
		return want
	}
	if maxTasks > 0 && len(tasks) > maxTasks {
		want[wsproto.ProblemTooMany] = 1
	}
	first := map[string]int{} // each id's first task
	for i, tk := range tasks {
		if tk.ID == "" {
			want[wsproto.ProblemEmptyID]++
		} else if _, dup := first[tk.ID]; dup {
			want[wsproto.ProblemDuplicateID]++
		} else {
			first[tk.ID] = i
		}
		if tk.Title == "" {
			want[wsproto.ProblemEmptyTitle]++
		}
	}
	for _, tk := range tasks {
		for _, d := range tk.DependsOn {
			if _, ok := first[d]; !ok {
				want[wsproto.ProblemUnknownDependency]++
			}
		}
	}
	// Kahn: repeatedly retire tasks whose known dependencies are all
	// retired; whatever is left lies on or behind a cycle.
	waiting := map[string]int{}
	dependents := map[string][]string{}
	for id, i := range first {
		for _, d := range tasks[i].DependsOn {
			if _, ok := first[d]; ok {
				waiting[id]++
				dependents[d] = append(dependents[d], id)
			}
		}
	}
	var ready []string
	for id := range first {
		if waiting[id] == 0 {
			ready = append(ready, id)
		}
	}
	retired := 0
	for len(ready) > 0 {
		id := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		retired++
		for _, up := range dependents[id] {
			if waiting[up]--; waiting[up] == 0 {
				ready = append(ready, up)
			}
		}
	}
	if retired < len(first) {
		want[wsproto.ProblemCycle] = 1
	}
	return want
}

// onCycle reports whether id's task can reach itself through dependencies
// (each id standing for its first task).
func onCycle(tasks []wsproto.Task, id string) bool {
	first := map[string]int{}
	for i, tk := range tasks {
		if _, ok := first[tk.ID]; !ok && tk.ID != "" {
			first[tk.ID] = i
		}
	}
	seen := map[string]bool{}
	stack := []string{id}
	for len(stack) > 0 {
		cur := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		i, ok := first[cur]
		if !ok {
			continue
		}
		for _, d := range tasks[i].DependsOn {
			if d == id {
				return true
			}
			if !seen[d] {
				seen[d] = true
				stack = append(stack, d)
			}
		}
	}
	return false
}

func showProblems(ps []wsproto.TaskProblem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Code
		if p.Index != nil {
			out[i] += fmt.Sprintf("@%d(%q)", *p.Index, p.TaskID)
		}
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
