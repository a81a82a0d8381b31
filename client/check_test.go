package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/buffer/buffertest"
	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// TestLiveStreamChecks: a scripted server sends system.connected and then
// sequenced events; every event sent twice, left out, out of order or of
// another session is a violation, and the application still gets each
// event of its session at most once — with the state kept or not
// (Options.SkipState).
func TestLiveStreamChecks(t *testing.T) {
	tests := []struct {
		name    string
		seqs    []uint64
		want    string // in the violations; "" for none
		dups    int
		foreign uint64   // this seq is sent as another session's
		saw     []uint64 // what OnEvent got
	}{
		{name: "in order", seqs: []uint64{1, 2, 3}, saw: []uint64{1, 2, 3}},
		{name: "one sent twice", seqs: []uint64{1, 2, 2, 3}, want: "duplicate: event seq 2", dups: 1, saw: []uint64{1, 2, 3}},
		{name: "an old one again", seqs: []uint64{1, 2, 3, 1}, want: "duplicate: event seq 1", dups: 1, saw: []uint64{1, 2, 3}},
		{name: "one left out", seqs: []uint64{1, 3, 4}, want: "gap: event seq 3 after 1", saw: []uint64{1, 3, 4}},
		{name: "two swapped", seqs: []uint64{1, 3, 2, 4}, want: "gap: event seq 3 after 1", dups: 1, saw: []uint64{1, 3, 4}},
		// Seq 2 of another session, where this one's seq 2 was due: only
		// its session_id shows it.
		{name: "one of another session", seqs: []uint64{1, 2, 3}, foreign: 2,
			want: "foreign frame: solver.progress (seq 2) of session other reached session s", saw: []uint64{1, 3}},
	}
	for _, skip := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name
			if skip {
				name += ", state skipped"
			}
			t.Run(name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ws, err := websocket.Accept(w, r, nil)
					if err != nil {
						return
					}
					defer ws.CloseNow()
					ctx := r.Context()
					write := func(v map[string]any) { b, _ := json.Marshal(v); ws.Write(ctx, websocket.MessageText, b) }
					write(map[string]any{"event": wsproto.EventConnected, "event_id": "c", "session_id": "s", "timestamp": time.Now(),
						"metadata": map[string]any{"session_id": "s", "resume_token": "t", "resumed": false, "last_seq": 0, "buffer_capacity": 10}})
					for _, seq := range tt.seqs {
						session := "s"
						if seq == tt.foreign {
							session = "other"
						}
						write(map[string]any{"event": wsproto.EventSolverProgress, "event_id": fmt.Sprint("e", seq), "seq": seq,
							"session_id": session, "timestamp": time.Now(), "metadata": map[string]any{"run_id": "r", "task_id": "a", "attempt": 1, "progress": 0.5}})
					}
					ws.Read(ctx) // until the client closes
				}))
				defer srv.Close()
				var mu sync.Mutex
				var saw []uint64
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &client.Options{SkipState: skip, OnEvent: func(f client.Frame) {
					if f.Seq != 0 {
						mu.Lock()
						saw = append(saw, f.Seq)
						mu.Unlock()
					}
				}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Each frame sent is either applied or counted as a duplicate
				// or a foreign frame.
				if err := c.Wait(ctx, func(v client.View) bool {
					return v.Stats.Events+v.Stats.Duplicates+v.Stats.Foreign == len(tt.seqs)
				}); err != nil {
					t.Fatal(err)
				}
				v := c.View()
				if got := strings.Join(v.Stats.Violations, "; "); tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
					t.Errorf("violations %q, want %q", got, tt.want)
				}
				mu.Lock()
				defer mu.Unlock()
				if v.Stats.Duplicates != tt.dups || fmt.Sprint(saw) != fmt.Sprint(tt.saw) {
					t.Errorf("duplicates %d, the application saw %v; want %d and %v", v.Stats.Duplicates, saw, tt.dups, tt.saw)
				}
			})
		}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// finalAnswer is how an agent.final_answer frame starts.
var finalAnswer = []byte(`{"event":"` + wsproto.EventFinalAnswer + `"`)

// watched is a Ring that closes ended once it has stored a final answer.
type watched struct {
	buffer.Ring
	once  sync.Once
	ended chan struct{}
}

func (w *watched) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	e, err := w.Ring.Append(ctx, id, encode)
	if err == nil && bytes.HasPrefix(e.Data, finalAnswer) {
		w.once.Do(func() { close(w.ended) })
	}
	return e, err
}

// TestResumeChecks: a server whose ring breaks the replay of a resume —
// one event again, one left out, two swapped (buffertest.Faulty) — is
// caught by the client; a healthy one is not. The client is kept out while
// the run ends, so the replay is the run's whole second half.
func TestResumeChecks(t *testing.T) {
	tests := []struct {
		fault buffertest.Fault
		want  []string // each in the violations; none for no fault
	}{
		{0, nil},
		{buffertest.Duplicate, []string{"duplicate: event seq", "replay: "}},
		{buffertest.Drop, []string{"gap: event seq", "replay: "}},
		{buffertest.Reorder, []string{"gap: event seq", "duplicate: event seq"}},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			faults := &buffertest.Faults{Fault: tt.fault, Limit: 1}
			var first atomic.Pointer[watched] // the client's session's ring: the first made
			var closed atomic.Bool            // refuses connections while set
			orch, err := orchestrator.New(orchestrator.Models{
				Planner: &planner.Sim{}, Solver: &solver.Sim{}, Aggregator: &aggregator.Sim{},
			}, &orchestrator.Options{Logger: quiet(), ConfirmTimeout: 300 * time.Millisecond,
				NewRing: func(n int) buffer.Ring {
					w := &watched{Ring: buffertest.Faulty(buffer.NewMemory(n), faults), ended: make(chan struct{})}
					first.CompareAndSwap(nil, w)
					return w
				}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if closed.Load() {
					http.Error(w, "closed for the test", http.StatusServiceUnavailable)
					return
				}
				orch.ServeHTTP(w, r)
			}))
			t.Cleanup(func() { orch.Close(context.Background()); srv.Close() })

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var mu sync.Mutex
			seen := map[uint64]int{}
			asked := make(chan struct{}, 1)
			c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &client.Options{Resume: true, ResumeDelay: 5 * time.Millisecond,
				OnEvent: func(f client.Frame) {
					mu.Lock()
					seen[f.Seq]++
					mu.Unlock()
					if f.Event == wsproto.EventUserConfirm {
						select {
						case asked <- struct{}{}:
						default:
						}
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The run stops on a question nobody answers; it goes on by
			// itself when the question expires, by then with the client out.
			err = c.SolveTasks(ctx, []wsproto.Task{{ID: "a", Title: "A", DependsOn: []string{}},
				{ID: "ask", Title: "Ask", Description: "[sim:ask=Which?]", DependsOn: []string{"a"}},
				{ID: "z", Title: "Z", DependsOn: []string{"ask"}}})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-asked:
			case <-ctx.Done():
				t.Fatal("no question")
			}
			closed.Store(true)
			c.Drop()
			select {
			case <-first.Load().ended:
			case <-ctx.Done():
				t.Fatal("the run did not end")
			}
			closed.Store(false)
			if err := c.Wait(ctx, func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil }); err != nil {
				t.Fatalf("no final answer: %v (%+v)", err, c.View().Stats)
			}
			v := c.View()
			if tt.fault != 0 && faults.Broken() != 1 {
				t.Fatalf("the fault was applied %d times, want once", faults.Broken())
			}
			got := strings.Join(v.Stats.Violations, "; ")
			if len(tt.want) == 0 && got != "" {
				t.Errorf("violations with a healthy server: %s", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("violations %q, want %q among them", got, w)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for seq, n := range seen {
				if seq != 0 && n > 1 {
					t.Errorf("the application got seq %d %d times", seq, n)
				}
			}
		})
	}
}
