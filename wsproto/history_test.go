package wsproto_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// TestStateHistory: each run's last event adds the run's entry from what
// it carries, once per run, the oldest dropped past HistoryLimit; a
// snapshot carries the history and Load takes it back.
func TestStateHistory(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	start := func(id, req string) (string, any) {
		return wsproto.EventPlanStart, &wsproto.PlanStart{RunID: id, Request: req}
	}
	answer := func(id, req, status string) (string, any) {
		return wsproto.EventFinalAnswer, &wsproto.FinalAnswer{RunID: id, Content: "answer to " + req, Request: req, Status: status, EndedAt: at}
	}
	type ev struct {
		event string
		meta  any
	}
	e := func(event string, meta any) ev { return ev{event, meta} }
	for _, tt := range []struct {
		name   string
		limit  int
		events []ev
		want   []string // run_id/request/answer/status of each entry
	}{
		{"no run", 0, nil, nil},
		{"a run not ended", 0, []ev{e(start("r1", "a"))}, nil},
		{"an answered run", 0, []ev{e(start("r1", "a")), e(answer("r1", "a", "partial"))},
			[]string{"r1/a/answer to a/partial"}},
		{"cancelled runs have no answer", 0, []ev{
			e(start("r1", "a")), e(wsproto.EventPlanCancelled, &wsproto.PlanCancelled{RunID: "r1", Reason: wsproto.ReasonUserReject, Request: "a", EndedAt: at}),
			e(wsproto.EventPipelineCancelled, &wsproto.PipelineCancelled{RunID: "r2", Reason: wsproto.ReasonUserCancel, Request: "T1; T2", EndedAt: at})},
			[]string{"r1/a//cancelled", "r2/T1; T2//cancelled"}},
		{"one entry per run", 0, []ev{e(answer("r1", "a", "succeeded")), e(answer("r1", "a", "succeeded"))},
			[]string{"r1/a/answer to a/succeeded"}},
		{"the oldest go past the limit", 2, []ev{e(answer("r1", "a", "succeeded")), e(answer("r2", "b", "failed")),
			e(answer("r3", "c", "succeeded"))}, []string{"r2/b/answer to b/failed", "r3/c/answer to c/succeeded"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var s wsproto.State
			s.SetHistoryLimit(tt.limit)
			for _, x := range tt.events {
				s.Apply(x.event, x.meta)
			}
			var got []string
			for _, h := range s.History {
				got = append(got, h.RunID+"/"+h.Request+"/"+h.Answer+"/"+h.Status)
				if !h.EndedAt.Equal(at) {
					t.Errorf("entry %s ended at %v, want %v", h.RunID, h.EndedAt, at)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("history %q, want %q", got, tt.want)
			}

			// Through a snapshot's JSON and back, as a resyncing client.
			b, err := json.Marshal(s.Snapshot(7, ""))
			if err != nil {
				t.Fatal(err)
			}
			var snap wsproto.Snapshot
			if err := json.Unmarshal(b, &snap); err != nil {
				t.Fatal(err)
			}
			if snap.History == nil {
				t.Errorf("the snapshot's history is %s, want an array", b)
			}
			var back wsproto.State
			back.SetHistoryLimit(tt.limit)
			back.Load(snap)
			if !slices.EqualFunc(back.History, s.History, func(a, b wsproto.HistoryEntry) bool { return a == b }) {
				t.Errorf("loaded %+v, want %+v", back.History, s.History)
			}
		})
	}
}
