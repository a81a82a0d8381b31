package main

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// The client package checks each session's stream as it applies it: seqs
// contiguous, none twice, a replay exactly the events after the client's
// last seq, the client's checksum chain equal to the server's. It records
// what fails as violations; classify sorts them into what the report
// counts. A resync (a snapshot in place of a replay) is legal, and
// counted apart.

// violations counts a session's violations by kind.
type violations struct {
	Gaps       int `json:"gaps"`       // a seq skipped
	Duplicates int `json:"duplicates"` // a seq delivered twice
	// Forks counts a stream that split from the server's: the checksum
	// chain the client computed differs from the server's, or a replay
	// starts from a seq that is not the client's (seqs went backwards).
	Forks int `json:"forks"`
	Other int `json:"other"` // a frame of another session, a bad frame
}

func (v *violations) add(o violations) {
	v.Gaps += o.Gaps
	v.Duplicates += o.Duplicates
	v.Forks += o.Forks
	v.Other += o.Other
}

// classify sorts the client's violations (client.Stats.Violations) by
// their prefix, which the client package writes.
func classify(list []string) violations {
	var v violations
	for _, s := range list {
		switch {
		case strings.HasPrefix(s, "gap:"):
			v.Gaps++
		case strings.HasPrefix(s, "duplicate:"):
			v.Duplicates++
		case strings.HasPrefix(s, "checksum"), strings.HasPrefix(s, "replay:"):
			v.Forks++
		default:
			v.Other++
		}
	}
	return v
}

// runs follows one session's runs from its sequenced events and from the
// snapshots of its resyncs: a resync can span a run's start or its end,
// and then the snapshot is all the client learns of it. A run ends with
// its agent.final_answer, or explicitly without one (plan.cancelled,
// pipeline.cancelled, a snapshot showing it over).
type runs struct {
	mu      sync.Mutex        // guards the fields below
	started map[string]bool   // run ids seen
	ended   map[string]string // run ids seen to end: "" with a final answer, else why not
}

func newRuns() *runs { return &runs{started: map[string]bool{}, ended: map[string]string{}} }

// frame takes one frame of the session, as the client's OnEvent gets it.
func (r *runs) frame(f client.Frame) {
	switch {
	case f.Event == wsproto.EventStateSnapshot:
		var s wsproto.Snapshot
		if json.Unmarshal(f.Metadata, &s) != nil || s.Run == nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.started[s.Run.RunID] = true
		if s.Phase == wsproto.PhaseIdle { // the run is over (§6)
			why := ""
			if s.Run.FinalAnswer == nil {
				why = "a resync's snapshot shows it over with no final answer"
			}
			r.end(s.Run.RunID, why)
		}
	case wsproto.Sequenced(f.Event):
		id, _ := f.MetaString("run_id")
		if id == "" {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.started[id] = true
		switch f.Event {
		case wsproto.EventFinalAnswer:
			r.end(id, "")
		case wsproto.EventPlanCancelled, wsproto.EventPipelineCancelled:
			r.end(id, f.Event)
		}
	}
}

// end records the first end a run is seen to have.
func (r *runs) end(id, why string) {
	if _, ok := r.ended[id]; !ok {
		r.ended[id] = why
	}
}

// counts returns how many runs started, ended, and ended without a final
// answer.
func (r *runs) counts() (started, ended, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, why := range r.ended {
		if why != "" {
			failed++
		}
	}
	return len(r.started), len(r.ended), failed
}

// open returns the runs started and not ended.
func (r *runs) open() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.started {
		if _, ok := r.ended[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}
