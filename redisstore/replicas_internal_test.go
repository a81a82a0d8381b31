package redisstore

import (
	"testing"
	"time"
)

func TestReplicasOf(t *testing.T) {
	for _, tt := range []struct {
		name, info string
		want       int
	}{
		{name: "a master without replicas", info: "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n", want: 0},
		{name: "two online", info: "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
			"slave0:ip=127.0.0.1,port=7001,state=online,offset=1,lag=0\r\nslave1:ip=127.0.0.1,port=7002,state=online,offset=1,lag=1\r\n", want: 2},
		{name: "one still in its full resync counts", info: "role:master\r\nconnected_slaves:2\r\n" +
			"slave0:ip=127.0.0.1,port=7001,state=wait_bgsave,offset=0,lag=0\r\nslave1:ip=127.0.0.1,port=7002,state=online,offset=9,lag=0\r\n", want: 2},
		{name: "a replica's own INFO", info: "role:slave\r\nmaster_host:127.0.0.1\r\nslave_read_only:1\r\nslave_repl_offset:10\r\nslave_priority:100\r\nconnected_slaves:0\r\n", want: 0},
		{name: "empty", info: "", want: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := replicasOf(tt.info); got != tt.want {
				t.Errorf("replicasOf = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestReplicaHold: a replica that leaves the master's list is still
// needed for the hold (replicaHold, 5 s); more replicas are needed at
// once; min always.
func TestReplicaHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		after  time.Duration // since t0
		listed int
		need   int
	}
	for _, tt := range []struct {
		name  string
		min   int
		hold  time.Duration
		steps []step
	}{
		{name: "a promoted replica leaves the list: still needed for hold", min: 1, steps: []step{
			{0, 2, 2}, {time.Second, 1, 2}, {4 * time.Second, 1, 2}, {5*time.Second + 1, 1, 1}, {6 * time.Second, 1, 1},
		}},
		{name: "listed again within hold: the hold starts afresh", min: 1, steps: []step{
			{0, 2, 2}, {time.Second, 1, 2}, {2 * time.Second, 2, 2}, {3 * time.Second, 1, 2}, {6 * time.Second, 1, 2}, {7*time.Second + 1, 1, 1},
		}},
		{name: "more replicas are needed at once", min: 1, steps: []step{
			{0, 1, 1}, {time.Millisecond, 2, 2}, {2 * time.Millisecond, 3, 3},
		}},
		{name: "never below min", min: 2, steps: []step{
			{0, 0, 2}, {time.Second, 1, 2}, {10 * time.Second, 0, 2},
		}},
		{name: "from several down to none", min: 1, steps: []step{
			{0, 3, 3}, {time.Second, 0, 3}, {6 * time.Second, 0, 1},
		}},
		{name: "no hold (a node's lease): what is listed, at once", min: 1, hold: noHold, steps: []step{
			{0, 2, 2}, {time.Millisecond, 1, 1}, {2 * time.Millisecond, 2, 2}, {3 * time.Millisecond, 0, 1},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := &replicaSet{min: tt.min, hold: tt.hold}
			for i, s := range tt.steps {
				if got := rs.need(s.listed, t0.Add(s.after)); got != s.need {
					t.Fatalf("step %d (%d listed after %v): need %d, want %d", i, s.listed, s.after, got, s.need)
				}
				if got := rs.waitFor(); got < s.need {
					t.Fatalf("step %d: the next WAIT waits for %d, fewer than the %d needed", i, got, s.need)
				}
			}
		})
	}
}
