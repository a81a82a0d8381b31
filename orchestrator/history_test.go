package orchestrator

import (
	"slices"
	"strings"
	"testing"

	"github.com/baton-run/baton/wsproto"
)

// TestFitHistory: the budget keeps the newest runs whose requests and
// answers fit, whole; the oldest go first, and nothing is cut.
func TestFitHistory(t *testing.T) {
	entry := func(id string, req, ans int) wsproto.HistoryEntry {
		return wsproto.HistoryEntry{RunID: id, Request: strings.Repeat("q", req), Answer: strings.Repeat("a", ans)}
	}
	three := []wsproto.HistoryEntry{entry("r1", 10, 90), entry("r2", 20, 30), entry("r3", 5, 45)} // 100, 50, 50 bytes
	for _, tt := range []struct {
		name    string
		history []wsproto.HistoryEntry
		budget  int
		want    []string
	}{
		{"no history", nil, 1 << 10, nil},
		{"everything fits", three, 200, []string{"r1", "r2", "r3"}},
		{"more than enough", three, 1 << 20, []string{"r1", "r2", "r3"}},
		{"the oldest goes first", three, 199, []string{"r2", "r3"}},
		{"exactly the newest two", three, 100, []string{"r2", "r3"}},
		{"the newest alone", three, 99, []string{"r3"}},
		{"exactly the newest", three, 50, []string{"r3"}},
		{"not even the newest: none, never a cut one", three, 49, nil},
		{"an older one that would fit is not taken past a newer that does not", []wsproto.HistoryEntry{entry("small", 1, 1), entry("big", 100, 100)}, 50, nil},
		{"zero budget", three, 0, nil},
		{"negative budget: none", three, -1, nil},
		{"empty entries cost nothing", []wsproto.HistoryEntry{entry("e1", 0, 0), entry("e2", 0, 0)}, 1, []string{"e1", "e2"}},
		{"zero budget: none, empty entries too", []wsproto.HistoryEntry{entry("e1", 0, 0)}, 0, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.history)
			got := fitHistory(in, tt.budget)
			var ids []string
			for _, e := range got {
				ids = append(ids, e.RunID)
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("fitHistory(budget %d) = %v, want %v", tt.budget, ids, tt.want)
			}
			if !slices.EqualFunc(in, tt.history, func(a, b wsproto.HistoryEntry) bool { return a == b }) {
				t.Errorf("fitHistory changed its input")
			}
			if got != nil && cap(got) != len(got) {
				t.Errorf("the result can grow into the session's history: cap %d, len %d", cap(got), len(got))
			}
		})
	}
}
