package redisstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestParseEntries: both stream layouts are read — an entry per write
// (fields named for seqs, values c then the frame) and an entry per event
// of earlier versions (d and c) — from a seq on, in order; malformed
// entries are errors.
func TestParseEntries(t *testing.T) {
	sum := func(b byte) string { return strings.Repeat(string(b), checksumLen) }
	old := func(id, d, c string) redis.XMessage {
		return redis.XMessage{ID: id, Values: map[string]any{"d": d, "c": c}}
	}
	entry := func(id string, kv ...string) redis.XMessage {
		m := redis.XMessage{ID: id, Values: map[string]any{}}
		for i := 0; i < len(kv); i += 2 {
			m.Values[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		msgs    []redis.XMessage
		from    uint64
		want    string // seq:frame:first byte of its sum, space-separated
		wantErr bool
	}{
		{"earlier layout", []redis.XMessage{old("1-0", "a", sum('1')), old("2-0", "b", sum('2'))}, 0, "1:a:1 2:b:2", false},
		{"an entry per write", []redis.XMessage{entry("3-0", "3", sum('3')+"c", "1", sum('1')+"a", "2", sum('2')+"b")}, 0, "1:a:1 2:b:2 3:c:3", false},
		{"from a seq inside an entry", []redis.XMessage{entry("3-0", "1", sum('1')+"a", "2", sum('2')+"b", "3", sum('3')+"c"), entry("4-0", "4", sum('4')+"d")}, 2, "2:b:2 3:c:3 4:d:4", false},
		{"both layouts in one stream", []redis.XMessage{old("1-0", "a", sum('1')), entry("3-0", "2", sum('2')+"b", "3", sum('3')+"c")}, 1, "1:a:1 2:b:2 3:c:3", false},
		{"a seq past the entry's ID", []redis.XMessage{entry("2-0", "3", sum('3')+"c")}, 0, "", true},
		{"a seq below the entry's range", []redis.XMessage{entry("3-0", "1", sum('1')+"a", "3", sum('3')+"c")}, 0, "", true},
		{"a field that is no seq", []redis.XMessage{entry("1-0", "x", sum('1')+"a")}, 0, "", true},
		{"a short record", []redis.XMessage{entry("1-0", "1", "abc")}, 0, "", true},
		{"an earlier entry without c", []redis.XMessage{{ID: "1-0", Values: map[string]any{"d": "a"}}}, 0, "", true},
		{"a bad ID", []redis.XMessage{old("x-0", "a", sum('1'))}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseEntries(tt.msgs, tt.from)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tt.wantErr)
			}
			var s []string
			for _, e := range got {
				s = append(s, strings.Join([]string{strconv.FormatUint(e.Seq, 10), string(e.Data), e.Sum[:1]}, ":"))
			}
			if strings.Join(s, " ") != tt.want {
				t.Errorf("got %q, want %q", strings.Join(s, " "), tt.want)
			}
		})
	}
}
