package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The AG-UI tests run the real server and speak to POST /agui and
// GET /agui/{threadId} over real HTTP (package agui).

// sse is one event of an AG-UI stream.
type sse struct {
	id   string
	data map[string]any
}

func (e sse) typ() string { return fmt.Sprint(e.data["type"]) }

// newThread is an unguessable threadId, as AG-UI's clients make.
func newThread() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "thread-" + hex.EncodeToString(b)
}

// aguiInput is a RunAgentInput asking text in mode, or answering resume.
func aguiInput(thread, runID, text, mode string, resume ...map[string]any) map[string]any {
	in := map[string]any{"threadId": thread, "runId": runID, "messages": []any{}, "tools": []any{}, "context": []any{}}
	if text != "" {
		in["messages"] = []any{map[string]any{"id": "m-" + runID, "role": "user", "content": text}}
	}
	if mode != "" {
		in["forwardedProps"] = map[string]any{"mode": mode}
	}
	if len(resume) > 0 {
		in["resume"] = resume
	}
	return in
}

// aguiDo sends a request to /agui with body as JSON ([]byte: as is).
func aguiDo(t *testing.T, ctx context.Context, method, url string, body any, header map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if raw, ok := body.([]byte); ok {
		rd = bytes.NewReader(raw) // sent as is
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// readSSE reads a stream's events: all of them, or the first max (> 0),
// then closes the body (a cut).
func readSSE(t *testing.T, resp *http.Response, max int) []sse {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != nil {
				out = append(out, cur)
				if max > 0 && len(out) == max {
					return out
				}
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &cur.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		}
	}
	return out
}

// post runs one POST /agui to the stream's end.
func post(t *testing.T, ctx context.Context, base string, in map[string]any, header map[string]string) []sse {
	t.Helper()
	return readSSE(t, aguiDo(t, ctx, http.MethodPost, base+"/agui", in, header), 0)
}

// lastOf is the stream's last event, which must end the run.
func lastOf(t *testing.T, evs []sse) sse {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("empty stream")
	}
	last := evs[len(evs)-1]
	if tp := last.typ(); tp != "RUN_FINISHED" && tp != "RUN_ERROR" {
		t.Fatalf("stream ends with %s, not RUN_FINISHED or RUN_ERROR", tp)
	}
	return last
}

// interrupts are the interrupts a stream ended with, nil when it did not.
func interrupts(t *testing.T, evs []sse) []map[string]any {
	t.Helper()
	out, _ := lastOf(t, evs).data["outcome"].(map[string]any)
	if out == nil || out["type"] != "interrupt" {
		return nil
	}
	var ins []map[string]any
	for _, in := range out["interrupts"].([]any) {
		ins = append(ins, in.(map[string]any))
	}
	return ins
}

// idKey orders SSE ids SEQ:K:BASE.
func idKey(t *testing.T, id string) [2]uint64 {
	t.Helper()
	p := strings.Split(id, ":")
	if len(p) != 3 {
		t.Fatalf("id %q: want SEQ:K:BASE", id)
	}
	seq, err1 := strconv.ParseUint(p[0], 10, 64)
	k, err2 := strconv.ParseUint(p[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("id %q: want numbers", id)
	}
	return [2]uint64{seq, k}
}

// checkIDs fails t unless every event has an id, ids grow strictly, and
// the run is opened once and ended once.
func checkIDs(t *testing.T, evs []sse) {
	t.Helper()
	var prev [2]uint64
	for i, e := range evs {
		k := idKey(t, e.id)
		if i > 0 && (k[0] < prev[0] || k[0] == prev[0] && k[1] <= prev[1]) {
			t.Fatalf("event %d: id %s after %v", i, e.id, prev)
		}
		prev = k
		if tp := e.typ(); (tp == "RUN_STARTED") != (i == 0) || (tp == "RUN_FINISHED" || tp == "RUN_ERROR") != (i == len(evs)-1) {
			t.Fatalf("event %d of %d is %s", i, len(evs), tp)
		}
	}
}

// fold applies a stream's STATE_SNAPSHOT and STATE_DELTAs to state.
func fold(t *testing.T, state any, evs []sse) any {
	t.Helper()
	for _, e := range evs {
		switch e.typ() {
		case "STATE_SNAPSHOT":
			state = e.data["snapshot"]
		case "STATE_DELTA":
			for _, op := range e.data["delta"].([]any) {
				var err error
				if state, err = applyOp(state, op.(map[string]any)); err != nil {
					t.Fatalf("event %s: %v", e.id, err)
				}
			}
		}
	}
	return state
}

// applyOp applies an RFC 6902 add or remove to doc (objects only: the
// AG-UI state has no arrays a patch goes into).
func applyOp(doc any, op map[string]any) (any, error) {
	path, _ := op["path"].(string)
	if path == "" {
		return op["value"], nil
	}
	toks := strings.Split(path[1:], "/")
	for i := range toks {
		toks[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(toks[i])
	}
	parent := doc
	for _, tok := range toks[:len(toks)-1] {
		m, ok := parent.(map[string]any)
		if !ok || m[tok] == nil {
			return nil, fmt.Errorf("%s %s: no object at %q", op["op"], path, tok)
		}
		parent = m[tok]
	}
	m, ok := parent.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s %s: parent is not an object", op["op"], path)
	}
	last := toks[len(toks)-1]
	switch op["op"] {
	case "add":
		m[last] = op["value"]
	case "remove":
		if _, ok := m[last]; !ok {
			return nil, fmt.Errorf("remove %s: nothing there", path)
		}
		delete(m, last)
	default:
		return nil, fmt.Errorf("op %v", op["op"])
	}
	return doc, nil
}

// attach GETs the thread without Last-Event-ID: the state now.
func attach(t *testing.T, ctx context.Context, base, thread string, header map[string]string) any {
	t.Helper()
	evs := readSSE(t, aguiDo(t, ctx, http.MethodGet, base+"/agui/"+thread, nil, header), 0)
	if len(evs) < 2 || evs[1].typ() != "STATE_SNAPSHOT" {
		t.Fatalf("attach: %d events, want RUN_STARTED, STATE_SNAPSHOT, …", len(evs))
	}
	return evs[1].data["snapshot"]
}

func yesTo(id any) map[string]any {
	return map[string]any{"interruptId": id, "status": "resolved", "payload": map[string]any{"confirmed": true}}
}

// TestAGUIPlanRun: a plan-mode run ends its first stream with the plan's
// interrupt, told again to whoever asks while it is open; a POST answering
// it streams the same Baton run to its answer.
// Each stream's STATE_SNAPSHOT and STATE_DELTAs fold to the state the
// server reports afterwards.
func TestAGUIPlanRun(t *testing.T) {
	base := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread := newThread()

	first := post(t, ctx, base, aguiInput(thread, "r1", "Compare Go and Rust", "plan"), nil)
	checkIDs(t, first)
	ins := interrupts(t, first)
	if len(ins) != 1 || ins[0]["reason"] != "plan_confirm" {
		t.Fatalf("first stream ends with interrupts %v, want one plan_confirm", ins)
	}
	if first[0].data["runId"] != "r1" || first[0].data["threadId"] != thread {
		t.Errorf("RUN_STARTED %v", first[0].data)
	}
	state := fold(t, nil, first)
	if got := state.(map[string]any)["phase"]; got != "awaiting_confirm" {
		t.Errorf("phase %v after the first stream, want awaiting_confirm", got)
	}

	// While the plan waits, a new request, or a look at the thread, is
	// told of the interrupt again, and changes nothing.
	for name, evs := range map[string][]sse{
		"a new request": post(t, ctx, base, aguiInput(thread, "rx", "Something else", "plan"), nil),
		"a look":        readSSE(t, aguiDo(t, ctx, http.MethodGet, base+"/agui/"+thread, nil, nil), 0),
	} {
		again := interrupts(t, evs)
		if len(evs) != 3 || len(again) != 1 || again[0]["id"] != ins[0]["id"] {
			t.Fatalf("%s: %d events ending with %v, want RUN_STARTED, STATE_SNAPSHOT and the interrupt again", name, len(evs), again)
		}
	}

	second := post(t, ctx, base, aguiInput(thread, "r2", "", "", yesTo(ins[0]["id"])), nil)
	checkIDs(t, second)
	last := lastOf(t, second)
	res, _ := last.data["result"].(map[string]any)
	if last.typ() != "RUN_FINISHED" || last.data["outcome"] != nil || res["status"] != "succeeded" {
		t.Fatalf("second stream ends with %v", last.data)
	}
	var text strings.Builder
	for _, e := range second {
		if e.typ() == "TEXT_MESSAGE_CONTENT" && strings.HasPrefix(fmt.Sprint(e.data["messageId"]), "answer-") {
			text.WriteString(e.data["delta"].(string))
		}
	}
	if text.String() != res["answer"] || text.Len() == 0 {
		t.Errorf("answer message %q, result %q", text.String(), res["answer"])
	}
	want := attach(t, ctx, base, thread, nil)
	if got := fold(t, nil, second); !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("the stream's state folds to\n%s\nthe server's is\n%s", g, w)
	}
}

// TestAGUIResumeExact cuts a finished run's stream after n events and
// resumes it with the last id read: the rest comes again exactly, byte for
// byte, but for the runId (given as ?runId=). A cut within the stream's
// opening starts from a fresh snapshot; a stream read whole answers 204.
func TestAGUIResumeExact(t *testing.T) {
	base := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread := newThread()
	first := post(t, ctx, base, aguiInput(thread, "r1", "Plan a trip", "plan"), nil)
	whole := post(t, ctx, base, aguiInput(thread, "r2", "", "", yesTo(interrupts(t, first)[0]["id"])), nil)
	n := len(whole)
	for _, tt := range []struct {
		name string
		read int // events read before the cut
	}{
		{"after RUN_STARTED", 1},
		{"after the snapshot", 2},
		{"after the first event", 3},
		{"mid-stream", n / 2},
		{"before the end", n - 1},
		{"whole", n},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := aguiDo(t, ctx, http.MethodGet, base+"/agui/"+thread+"?runId=r2", nil,
				map[string]string{"Last-Event-ID": whole[tt.read-1].id})
			if tt.read == n {
				resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					t.Fatalf("status %d, want 204", resp.StatusCode)
				}
				return
			}
			rest := readSSE(t, resp, 0)
			if tt.read <= 2 {
				// The state now, and the run is over.
				if len(rest) != 2 || rest[0].typ() != "STATE_SNAPSHOT" || rest[1].typ() != "RUN_FINISHED" {
					t.Fatalf("got %d events, want STATE_SNAPSHOT, RUN_FINISHED", len(rest))
				}
				if got, want := rest[0].data["snapshot"], attach(t, ctx, base, thread, nil); !reflect.DeepEqual(got, want) {
					t.Errorf("snapshot %v, want %v", got, want)
				}
				return
			}
			if !reflect.DeepEqual(rest, whole[tt.read:]) {
				t.Fatalf("resumed with %d events, want the %d after the cut", len(rest), n-tt.read)
			}
		})
	}
}

// TestAGUIResumeEvicted: a resume that finds the events it needs gone
// from the ring (--buffer-size 16) gets the state now and a RUN_ERROR
// "resync"; watching the thread from there works.
func TestAGUIResumeEvicted(t *testing.T) {
	base := startServer(t, "--buffer-size", "16")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread := newThread()
	first := post(t, ctx, base, aguiInput(thread, "r1", "Compare Go and Rust", "plan"), nil)
	whole := post(t, ctx, base, aguiInput(thread, "r2", "", "", yesTo(interrupts(t, first)[0]["id"])), nil)
	rest := readSSE(t, aguiDo(t, ctx, http.MethodGet, base+"/agui/"+thread, nil, map[string]string{"Last-Event-ID": whole[3].id}), 0)
	if len(rest) != 2 || rest[0].typ() != "STATE_SNAPSHOT" || rest[1].typ() != "RUN_ERROR" || rest[1].data["code"] != "resync" {
		t.Fatalf("got %d events, want STATE_SNAPSHOT and RUN_ERROR resync", len(rest))
	}
	if want := attach(t, ctx, base, thread, nil); !reflect.DeepEqual(rest[0].data["snapshot"], want) {
		t.Errorf("the snapshot is not the state now")
	}
}
