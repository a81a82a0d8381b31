package redisstore

import "testing"

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
