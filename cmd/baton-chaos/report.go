package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// report is what a chaos run found.
type report struct {
	Seed     uint64  `json:"seed"`
	Duration float64 `json:"duration_seconds"` // of the faults; the settling after is not counted
	Nodes    int     `json:"nodes"`
	Clients  int     `json:"clients"`
	Redis    string  `json:"redis"` // single, sentinel or cluster

	Faults      map[kind]int `json:"faults"`       // made, by kind
	FaultErrors []string     `json:"fault_errors"` // faults that could not be made or healed

	Sessions int `json:"sessions"`
	// Runs started and ended (with a final answer or explicitly without);
	// RunsFailed is how many of those ended had no final answer.
	RunsStarted int `json:"runs_started"`
	RunsEnded   int `json:"runs_ended"`
	RunsFailed  int `json:"runs_failed"`
	// RunsRejected were open when their session's resume was rejected:
	// the server said the session is gone, an explicit end the client
	// sees.
	RunsRejected int `json:"runs_rejected"`
	// RunsStranded started and never ended, in a session never rejected.
	RunsStranded int      `json:"runs_stranded"`
	Stranded     []string `json:"stranded,omitempty"` // the first of them

	Drops         int `json:"drops"`
	Resumes       int `json:"resumes"`
	Resyncs       int `json:"resyncs"`
	Rejections    int `json:"rejections"`
	Errors        int `json:"errors"` // system.error frames, but for re-sent answers
	ResentAnswers int `json:"resent_answers"`
	ResentStarts  int `json:"resent_starts"`

	Violations violations `json:"violations"`
	Examples   []string   `json:"violation_examples,omitempty"`

	Tools toolCounts `json:"tool_calls"`
	Dir   string     `json:"dir,omitempty"` // the logs, when kept
}

// failed reports why the run failed, "" when it did not: a duplicate, a
// gap, a fork, a stranded run or a tool call repeated unknowing.
func (r *report) failed() string {
	var why []string
	v := r.Violations
	for _, c := range []struct {
		n    int
		what string
	}{
		{v.Duplicates, "duplicates"}, {v.Gaps, "gaps"}, {v.Forks, "forks"}, {v.Other, "other violations"},
		{r.RunsStranded, "stranded runs"}, {r.Tools.Repeated, "tool calls repeated unknowing"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, ", ")
}

func (r *report) add(c clientResult) {
	r.Sessions += c.Sessions
	r.RunsStarted += c.Started
	r.RunsEnded += c.Ended
	r.RunsFailed += c.Failed
	r.RunsRejected += c.LostRejected
	r.RunsStranded += len(c.Stranded)
	for _, s := range c.Stranded {
		if len(r.Stranded) < 10 {
			r.Stranded = append(r.Stranded, s)
		}
	}
	r.Drops += c.Drops
	r.Resumes += c.Resumes
	r.Resyncs += c.Resyncs
	r.Rejections += c.Rejections
	r.Errors += c.Errors
	r.ResentAnswers += c.ResentAnswers
	r.ResentStarts += c.ResentStarts
	r.Violations.add(c.Violations)
	for _, e := range c.Examples {
		if len(r.Examples) < 10 {
			r.Examples = append(r.Examples, e)
		}
	}
}

func printReport(w io.Writer, r *report) {
	redis := map[string]string{"sentinel": ", Redis under Sentinel", "cluster": ", a Redis Cluster"}[r.Redis]
	fmt.Fprintf(w, "baton-chaos: seed %d, %v of faults, %d nodes, %d clients%s\n",
		r.Seed, time.Duration(r.Duration*float64(time.Second)).Round(time.Second), r.Nodes, r.Clients, redis)
	fmt.Fprintln(w, "faults injected:")
	for _, k := range allKinds {
		if r.Faults[k] > 0 {
			fmt.Fprintf(w, "  %-18s %d\n", k, r.Faults[k])
		}
	}
	for _, e := range r.FaultErrors {
		fmt.Fprintf(w, "  fault error: %s\n", e)
	}
	fmt.Fprintf(w, "sessions %d, runs started %d, ended %d (%d without a final answer), lost with a rejected session %d, stranded %d\n",
		r.Sessions, r.RunsStarted, r.RunsEnded, r.RunsFailed, r.RunsRejected, r.RunsStranded)
	fmt.Fprintf(w, "drops %d, resumes %d, resyncs %d, rejections %d, errors %d (re-sent answers %d, re-sent starts %d)\n",
		r.Drops, r.Resumes, r.Resyncs, r.Rejections, r.Errors, r.ResentAnswers, r.ResentStarts)
	v := r.Violations
	fmt.Fprintf(w, "duplicates %d, gaps %d, forks %d, other violations %d\n", v.Duplicates, v.Gaps, v.Forks, v.Other)
	fmt.Fprintf(w, "tool calls %d (%d distinct), repeated unknowing %d, retried (told so) %d\n",
		r.Tools.Calls, r.Tools.Keys, r.Tools.Repeated, r.Tools.Interrupted)
	for _, s := range r.Stranded {
		fmt.Fprintf(w, "  stranded: %s\n", s)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(w, "  violation: %s\n", e)
	}
	if why := r.failed(); why != "" {
		fmt.Fprintf(w, "FAIL: %s\n", why)
	} else {
		fmt.Fprintln(w, "PASS")
	}
}
