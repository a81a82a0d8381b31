package main

import (
	"strings"
	"testing"
)

func TestCountLedger(t *testing.T) {
	tests := []struct {
		name    string
		ledger  string
		want    toolCounts
		wantErr bool
	}{
		{name: "empty", ledger: "", want: toolCounts{}},
		{name: "each call once", ledger: "start a\nend a\nstart b\nend b\n", want: toolCounts{Calls: 2, Keys: 2}},
		{name: "interleaved across nodes", ledger: "start a\nstart b\nend b\nend a\n", want: toolCounts{Calls: 2, Keys: 2}},
		{name: "with node and time", ledger: "start a n1 17\nend a n1 18\nstart a n2 40\nend a n2 41\n", want: toolCounts{Calls: 2, Keys: 1, Repeated: 1}},
		{name: "a completed call done again", ledger: "start a\nend a\nstart a\nend a\n", want: toolCounts{Calls: 2, Keys: 1, Repeated: 1}},
		{name: "a call cut by a crash, retried", ledger: "start a n1 1\nstart a n2 2 retry\nend a n2 3\n", want: toolCounts{Calls: 2, Keys: 1, Interrupted: 1}},
		{name: "a call whose result was not stored, retried", ledger: "start a n1 1\nend a n1 2\nstart a n2 3 retry\nend a n2 4\n", want: toolCounts{Calls: 2, Keys: 1, Interrupted: 1}},
		{name: "a call cut by a crash, made again unknowing", ledger: "start a\nstart a\nend a\n", want: toolCounts{Calls: 2, Keys: 1, Repeated: 1}},
		{name: "retried, then made a third time unknowing", ledger: "start a n1 1\nstart a n2 2 retry\nend a n2 3\nstart a n3 4\n", want: toolCounts{Calls: 3, Keys: 1, Repeated: 1, Interrupted: 1}},
		{name: "cut twice, retried twice", ledger: "start a n1 1\nstart a n2 2 retry\nstart a n3 3 retry\nend a n3 4\n", want: toolCounts{Calls: 3, Keys: 1, Interrupted: 2}},
		{name: "a bad line", ledger: "start a\nbegin b\n", wantErr: true},
		{name: "no key", ledger: "start\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := countLedger(strings.NewReader(tt.ledger))
			if (err != nil) != tt.wantErr || !tt.wantErr && got != tt.want {
				t.Errorf("countLedger = %+v, %v; want %+v (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
