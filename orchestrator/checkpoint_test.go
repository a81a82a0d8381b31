package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/wsproto"
)

// unitRing is a Durable ring that records its units: the events and
// whether a checkpoint came with them.
type unitRing struct {
	*buffer.Memory
	events []string
	cp     []byte
	units  []string // "event…+cp" per Commit
}

func (r *unitRing) Append(ctx context.Context, id string, encode func(uint64) ([]byte, error)) (buffer.Entry, error) {
	e, err := r.Memory.Append(ctx, id, encode)
	if err == nil {
		var f struct {
			Event string `json:"event"`
		}
		json.Unmarshal(e.Data, &f)
		r.events = append(r.events, f.Event)
	}
	return e, err
}
func (r *unitRing) Checkpoint(data []byte)    { r.cp = data }
func (r *unitRing) Durable() (uint64, string) { return 0, "" }
func (r *unitRing) Commit() {
	u := ""
	for _, e := range r.events {
		u += e + " "
	}
	if r.cp != nil {
		u += "+cp"
	}
	r.units = append(r.units, u)
	r.events, r.cp = nil, nil
}

// TestCheckpointUnits: with a durable ring, each emit is a unit of its
// own, with the checkpoint unless the event is a high-frequency one; a
// change without an event is a unit with only the checkpoint.
func TestCheckpointUnits(t *testing.T) {
	const runID = "run_1"
	tests := []struct {
		name string
		do   func(sess *session)
		want []string
	}{
		{"a transition", func(sess *session) {
			sess.emit(wsproto.EventSolverStart, "", "", &wsproto.SolverStart{RunID: runID, TaskID: "a", Attempt: 1})
		}, []string{"solver.start +cp"}},
		{"progress", func(sess *session) {
			sess.emit(wsproto.EventSolverProgress, "", "", &wsproto.SolverProgress{RunID: runID, TaskID: "a", Attempt: 1})
			sess.emit(wsproto.EventAggregateProgress, "", "", &wsproto.AggregateProgress{RunID: runID})
			sess.emit(wsproto.EventPlanStepCompleted, "", "", &wsproto.PlanStep{RunID: runID, Step: 1})
		}, []string{"solver.progress ", "aggregate.progress ", "plan.step_completed "}},
		{"an answer taken", func(sess *session) {
			c := newConfirm(sess.run, wsproto.ConfirmInput, "confirm_input_1")
			c.meta = &wsproto.UserConfirm{RunID: runID, StepID: c.stepID, Kind: wsproto.ConfirmInput, Question: "Why?"}
			sess.mu.Lock()
			sess.confirms[c.stepID] = c
			sess.mu.Unlock()
			if e := sess.respond(&wsproto.Response{StepID: c.stepID, Text: text("because")}); e != nil {
				t.Fatal(e.Message)
			}
		}, []string{"+cp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ring *unitRing
			srv, err := New(simModels(), &Options{Logger: quiet(), NewRing: func(n int) buffer.Ring {
				ring = &unitRing{Memory: buffer.NewMemory(n)}
				return ring
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			sess, _, _ := srv.newSession(context.Background(), "")
			sess.run = &run{id: runID, sess: sess, cp: &runCheckpoint{ID: runID, Stage: stageSolving}}
			tt.do(sess)
			if len(ring.units) != len(tt.want) {
				t.Fatalf("units %q, want %q", ring.units, tt.want)
			}
			for i := range tt.want {
				if ring.units[i] != tt.want[i] {
					t.Errorf("units %q, want %q", ring.units, tt.want)
				}
			}
		})
	}
}

// TestRestoreRefuses: a checkpoint that cannot be used, a session the
// server has, or a closed server is an error, and nothing is restored.
func TestRestoreRefuses(t *testing.T) {
	good, _ := json.Marshal(checkpoint{Version: checkpointVersion})
	tests := []struct {
		name string
		data []byte
		prep func(srv *Server) string // returns the id to restore
		want error
	}{
		{"not JSON", []byte("{"), nil, nil},
		{"another version", []byte(`{"version":99}`), nil, ErrCheckpointVersion},
		{"a session the server has", good, func(srv *Server) string { sess, _, _ := srv.newSession(context.Background(), ""); return sess.id }, ErrSessionExists},
		{"a closed server", good, func(srv *Server) string { srv.Close(context.Background()); return "sess_x" }, ErrServerClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := New(simModels(), &Options{Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			id := "sess_x"
			if tt.prep != nil {
				id = tt.prep(srv)
			}
			before := srv.Sessions()
			err = srv.Restore(context.Background(), id, "token", buffer.NewMemory(10), tt.data, nil)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Restore = %v, want %v", err, tt.want)
			}
			if n := srv.Sessions(); n != before {
				t.Errorf("%d sessions after, %d before", n, before)
			}
		})
	}
}
