package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// TestAGUIThreadsAreTheirOwners: with authentication, a thread is its
// subject's. Another subject using the same threadId neither reads nor
// answers it — it gets a thread of its own — and nothing it sends changes
// the owner's.
func TestAGUIThreadsAreTheirOwners(t *testing.T) {
	base := startServer(t, twoSubjects...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice := map[string]string{"Authorization": "Bearer " + aliceToken}
	bob := map[string]string{"Authorization": "Bearer " + bobToken}
	thread := "shared-thread-name" // guessable on purpose: the subject binds it

	first := post(t, ctx, base, aguiInput(thread, "a1", "Compare Go and Rust", "plan"), alice)
	ins := interrupts(t, first)
	if len(ins) != 1 {
		t.Fatalf("alice's run ends with %v", ins)
	}
	for _, tt := range []struct {
		name   string
		method string
		body   any
		header map[string]string
		status int
	}{
		{"no credential", http.MethodPost, aguiInput(thread, "x", "hi", "plan"), nil, http.StatusUnauthorized},
		{"bob resumes alice's stream", http.MethodGet, nil, map[string]string{"Authorization": bob["Authorization"], "Last-Event-ID": first[2].id}, http.StatusNotFound},
		{"bob answers alice's interrupt", http.MethodPost, aguiInput(thread, "b1", "", "", yesTo(ins[0]["id"])), bob, http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url := base + "/agui"
			if tt.body == nil {
				url += "/" + thread
			}
			resp := aguiDo(t, ctx, tt.method, url, tt.body, tt.header)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
		})
	}
	// Bob's run on the same threadId is his own thread: a fresh state.
	bobs := post(t, ctx, base, aguiInput(thread, "b2", "Something else", "plan"), bob)
	if snap := bobs[1].data["snapshot"].(map[string]any); snap["run"] != nil {
		t.Fatalf("bob's thread starts from %v, want no run", snap)
	}
	// Alice's interrupt is still hers to answer.
	second := post(t, ctx, base, aguiInput(thread, "a2", "", "", yesTo(ins[0]["id"])), alice)
	if last := lastOf(t, second); last.typ() != "RUN_FINISHED" || last.data["outcome"] != nil {
		t.Fatalf("alice's resumed run ends with %v", last.data)
	}
}

// TestAGUIBadRequests: bad input gets a clear error and no stream.
func TestAGUIBadRequests(t *testing.T) {
	base := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread := newThread()
	ins := interrupts(t, post(t, ctx, base, aguiInput(thread, "r1", "Compare Go and Rust", "plan"), nil))
	for _, tt := range []struct {
		name   string
		method string
		path   string
		body   any
		header map[string]string
		status int
		says   string
	}{
		{"not JSON", http.MethodPost, "/agui", []byte("{"), nil, http.StatusBadRequest, "RunAgentInput"},
		{"a short anonymous threadId", http.MethodPost, "/agui", aguiInput("t1", "r", "hi", ""), nil, http.StatusBadRequest, "random UUID"},
		{"no runId", http.MethodPost, "/agui", aguiInput(newThread(), "", "hi", ""), nil, http.StatusBadRequest, "runId"},
		{"an unknown mode", http.MethodPost, "/agui", aguiInput(newThread(), "r", "hi", "fast"), nil, http.StatusBadRequest, "mode"},
		{"nothing to run", http.MethodPost, "/agui", aguiInput(newThread(), "r", "", ""), nil, http.StatusBadRequest, "no user message"},
		{"resume of an unknown thread", http.MethodPost, "/agui", aguiInput(newThread(), "r", "", "", yesTo(ins[0]["id"])), nil, http.StatusNotFound, "unknown thread"},
		{"resume of no open interrupt", http.MethodPost, "/agui", aguiInput(thread, "r", "", "", yesTo("confirm_plan_nope")), nil, http.StatusConflict, "not open"},
		{"a payload of the wrong shape", http.MethodPost, "/agui", aguiInput(thread, "r", "", "",
			map[string]any{"interruptId": ins[0]["id"], "status": "resolved", "payload": map[string]any{"confirmed": "yes"}}), nil, http.StatusConflict, "boolean"},
		{"a request Baton refuses", http.MethodPost, "/agui", aguiInput(newThread(), "r", "Hi [sim:fail=bogus*1]", "chat"), nil, http.StatusBadRequest, "invalid_message"},
		{"a request over /ws's read limit", http.MethodPost, "/agui", aguiInput(newThread(), "r", strings.Repeat("long ", 20000), "plan"), nil, http.StatusBadRequest, "longer than"},
		{"a foreign Origin", http.MethodPost, "/agui", aguiInput(newThread(), "r", "hi", ""), map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, "origin"},
		{"a bad Last-Event-ID", http.MethodGet, "/agui/" + thread, nil, map[string]string{"Last-Event-ID": "12"}, http.StatusBadRequest, "SEQ:K:BASE"},
		{"a Last-Event-ID ahead", http.MethodGet, "/agui/" + thread, nil, map[string]string{"Last-Event-ID": "9999:0:1"}, http.StatusBadRequest, "ahead"},
		{"an unknown thread", http.MethodGet, "/agui/" + newThread(), nil, nil, http.StatusNotFound, "unknown thread"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := aguiDo(t, ctx, tt.method, base+tt.path, tt.body, tt.header)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.says) {
				t.Fatalf("status %d %s, want %d saying %q", resp.StatusCode, b, tt.status, tt.says)
			}
		})
	}
	// None of it changed the thread: its interrupt is still open, and
	// answering it runs the plan.
	last := lastOf(t, post(t, ctx, base, aguiInput(thread, "r2", "", "", yesTo(ins[0]["id"])), nil))
	if last.typ() != "RUN_FINISHED" || last.data["outcome"] != nil {
		t.Fatalf("the run ends with %v", last.data)
	}
}

// TestAGUIClusterResume: with the Redis store, a thread made on one node
// is run, cut and resumed on the others: its stream is answered on B,
// cut, and resumed exactly on A, and the pieces are the stream.
func TestAGUIClusterResume(t *testing.T) {
	rds := redistest.Start(t)
	a := startServer(t, "--store", "redis", "--redis-url", rds.URL(), "--sim-delay", "5ms")
	b := startServer(t, "--store", "redis", "--redis-url", rds.URL(), "--sim-delay", "5ms")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread := newThread()
	ins := interrupts(t, post(t, ctx, a, aguiInput(thread, "r1", "Compare Go and Rust", "plan"), nil))
	if len(ins) != 1 {
		t.Fatalf("the first stream ends with %v", ins)
	}
	got := readSSE(t, aguiDo(t, ctx, http.MethodPost, b+"/agui", aguiInput(thread, "r2", "", "", yesTo(ins[0]["id"])), nil), 10)
	got = append(got, readSSE(t, aguiDo(t, ctx, http.MethodGet, a+"/agui/"+thread+"?runId=r2", nil,
		map[string]string{"Last-Event-ID": got[len(got)-1].id}), 0)...)
	checkIDs(t, got)
	if last := lastOf(t, got); last.typ() != "RUN_FINISHED" || last.data["outcome"] != nil {
		t.Fatalf("the resumed stream ends with %v", last.data)
	}
	replay := readSSE(t, aguiDo(t, ctx, http.MethodGet, b+"/agui/"+thread+"?runId=r2", nil,
		map[string]string{"Last-Event-ID": got[2].id}), 0)
	if !reflect.DeepEqual(replay, got[3:]) {
		t.Fatalf("a replay on B has %d events, the cut stream %d after its third", len(replay), len(got)-3)
	}
	if want := attach(t, ctx, a, thread, nil); !reflect.DeepEqual(fold(t, nil, got), want) {
		t.Errorf("the stream's state is not the server's")
	}
}

// TestAGUIShutdown: a server shutting down ends its streams (the client
// resumes elsewhere) instead of waiting for their runs.
func TestAGUIShutdown(t *testing.T) {
	srvCtx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	base := startServerCtx(t, srvCtx, done, io.Discard, "--sim-delay", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp := aguiDo(t, ctx, http.MethodPost, base+"/agui", aguiInput(newThread(), "r1", "Compare Go and Rust", "plan"), nil)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 3 && sc.Scan(); { // the run is on: RUN_STARTED, STATE_SNAPSHOT, STATE_DELTA
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	stop()
	var rest strings.Builder
	for sc.Scan() { // to the stream's end, which the shutdown makes
		rest.WriteString(sc.Text())
	}
	if strings.Contains(rest.String(), "RUN_FINISHED") {
		t.Fatalf("the stream finished its run: %s", rest.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the server did not stop with a stream open")
	}
}
