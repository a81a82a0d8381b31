package main

import (
	"encoding/json"
	"sync"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// runs follows a session's runs, from its sequenced events and from the
// snapshots of its resyncs: a resync can span a run's start or its end, and
// then the snapshot is all the client learns of it. A run counts as started
// once, and as ended once, whichever told first.
type runs struct {
	mu      sync.Mutex      // guards the fields below
	started map[string]bool // run ids seen
	ended   map[string]bool // run ids seen to end
	// why the last run that ended without a final answer did, "" when the
	// last one had one.
	reason string
}

func newRuns() *runs { return &runs{started: map[string]bool{}, ended: map[string]bool{}} }

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
		r.start(s.Run.RunID)
		if s.Phase == wsproto.PhaseIdle { // the run is over (§6)
			why := ""
			if s.Run.FinalAnswer == nil {
				why = "a resync's snapshot shows it over with no final answer"
			}
			r.end(s.Run.RunID, why)
		}
	case wsproto.Sequenced(f.Event):
		// Only the run id is read: the tool sees every event of the load.
		id, _ := f.MetaString("run_id")
		if id == "" {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.start(id)
		switch f.Event {
		case wsproto.EventFinalAnswer:
			r.end(id, "")
		case wsproto.EventPlanCancelled, wsproto.EventPipelineCancelled:
			r.end(id, f.Event+" "+string(f.Metadata))
		}
	}
}

func (r *runs) start(id string) { r.started[id] = true }

func (r *runs) end(id, why string) {
	if r.ended[id] {
		return
	}
	r.ended[id] = true
	r.reason = why
}

// counts returns how many runs started and ended so far.
func (r *runs) counts() (started, ended int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.started), len(r.ended)
}

// lastReason returns why the last run ended without a final answer, ""
// when it had one.
func (r *runs) lastReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason
}
