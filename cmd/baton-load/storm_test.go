package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/orchestrator"
	"github.com/baton-run/baton/redisstore"
)

// TestStorm: every session's connection dropped at once while its run
// waits, and every session resumed at once — on the same server, and on
// another node sharing a real Redis (a takeover). Every session must
// resume, every run end in a final answer, not one violation.
func TestStorm(t *testing.T) {
	tests := []struct {
		name string
		urls func(t *testing.T) []string
	}{
		{name: "same node", urls: func(t *testing.T) []string { return []string{baton(t)} }},
		{name: "other node", urls: func(t *testing.T) []string {
			rds := redistest.Start(t)
			var urls []string
			for range 2 {
				cl, err := redisstore.NewCluster(t.Context(), rds.Client(t), redisstore.ClusterOptions{Capacity: buffer.DefaultCapacity})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cl.Close() })
				urls = append(urls, batonWith(t, orchestrator.Options{Cluster: cl}))
			}
			return urls
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"-storm", "100", "-json", "-quiet"}
			urls := tt.urls(t)
			for _, u := range urls {
				args = append(args, "-url", u)
			}
			if len(urls) > 1 {
				args = append(args, "-resume-elsewhere")
			}
			var out, errOut bytes.Buffer
			err := run(t.Context(), args, &out, &errOut)
			var rep StormReport
			if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
				t.Fatalf("report: %v (run: %v)\n%s\n%s", jerr, err, out.String(), errOut.String())
			}
			if err != nil || rep.ViolationsNum != 0 {
				t.Fatalf("run: %v; violations %v", err, rep.Violations)
			}
			if rep.Resumed != 100 || rep.Runs != 100 || rep.Rejections != 0 || rep.Events == 0 || rep.SecondsToAll <= 0 {
				t.Errorf("report %+v: want 100 sessions resumed and 100 runs ended, no rejection", rep)
			}
			t.Logf("100 resumed in %.2fs (p50 %.0fms, p99 %.0fms), %d resyncs, %d events",
				rep.SecondsToAll, rep.ResumeP50MS, rep.ResumeP99MS, rep.Resyncs, rep.Events)
		})
	}
}
