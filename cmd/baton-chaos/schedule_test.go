package main

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	tests := []struct {
		name     string
		seed     uint64
		duration time.Duration
		every    time.Duration
		nodes    int
		masters  int // a Redis Cluster's, 0 for none
		kinds    []kind
		want     func(t *testing.T, s []fault)
	}{
		{name: "every kind over a long run", seed: 1, duration: 10 * time.Minute, every: time.Second, nodes: 3, kinds: kinds,
			want: func(t *testing.T, s []fault) {
				for _, k := range kinds {
					if !slices.ContainsFunc(s, func(f fault) bool { return f.Kind == k }) {
						t.Errorf("no %s in %d faults", k, len(s))
					}
				}
				if slices.ContainsFunc(s, func(f fault) bool { return f.Kind == faultFailover }) {
					t.Errorf("a failover scheduled without --sentinel")
				}
			}},
		{name: "only the kinds asked for", seed: 2, duration: time.Minute, every: 500 * time.Millisecond, nodes: 2, kinds: []kind{faultReset, faultPubSubKill},
			want: func(t *testing.T, s []fault) {
				if len(s) == 0 {
					t.Fatal("no fault in a minute with a fault every 0.5s")
				}
				for _, f := range s {
					if f.Kind != faultReset && f.Kind != faultPubSubKill {
						t.Errorf("%s scheduled", f)
					}
				}
			}},
		{name: "the failover with --sentinel", seed: 3, duration: time.Minute, every: time.Second, nodes: 3, kinds: []kind{faultFailover},
			want: func(t *testing.T, s []fault) {
				if len(s) == 0 || s[0].Kind != faultFailover || s[0].Node != -1 {
					t.Errorf("schedule %v, want failovers of Redis", s)
				}
			}},
		{name: "every kind of a Redis Cluster over a long run", seed: 5, duration: 10 * time.Minute, every: time.Second, nodes: 3, masters: 3, kinds: clusterKinds,
			want: func(t *testing.T, s []fault) {
				for _, k := range clusterKinds {
					if !slices.ContainsFunc(s, func(f fault) bool { return f.Kind == k }) {
						t.Errorf("no %s in %d faults", k, len(s))
					}
				}
				for _, f := range s {
					if f.Kind.hitsMaster() != (f.Master >= 0) || f.Master >= 3 {
						t.Errorf("%s: master %d of 3", f, f.Master)
					}
					if f.Kind == faultReshard && (f.To == f.Master || f.To < 0 || f.To >= 3 || f.Slots < reshardSlots[0] || f.Slots > reshardSlots[1]) {
						t.Errorf("%s: to %d, %d slots", f, f.To, f.Slots)
					}
				}
			}},
		{name: "no kinds, no faults", seed: 4, duration: time.Minute, every: time.Second, nodes: 3, kinds: nil,
			want: func(t *testing.T, s []fault) {
				if len(s) != 0 {
					t.Errorf("schedule %v, want none", s)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := schedule(tt.seed, tt.duration, tt.every, tt.nodes, tt.masters, tt.kinds)
			if again := schedule(tt.seed, tt.duration, tt.every, tt.nodes, tt.masters, tt.kinds); !reflect.DeepEqual(s, again) {
				t.Errorf("the same seed gave two schedules:\n%v\n%v", s, again)
			}
			// One fault at a time, each over by the end, aimed at a node
			// that exists or at Redis.
			var end time.Duration
			for _, f := range s {
				if f.At < end {
					t.Errorf("%s begins before the fault before it is healed (%v)", f, end)
				}
				if f.At+f.For > tt.duration {
					t.Errorf("%s lasts past the run's %v", f, tt.duration)
				}
				redis := slices.Contains([]kind{faultPubSubKill, faultRedisRestart, faultFailover, faultMasterKill, faultClusterFailover, faultReshard}, f.Kind)
				if redis && f.Node != -1 || !redis && (f.Node < 0 || f.Node >= tt.nodes) {
					t.Errorf("%s aimed at node %d of %d", f, f.Node, tt.nodes)
				}
				if (f.Kind == faultLatency) != (f.Latency > 0) {
					t.Errorf("%s: latency %v", f, f.Latency)
				}
				end = f.At + f.For
			}
			tt.want(t, s)
		})
	}
	if a, b := schedule(1, time.Minute, time.Second, 3, 0, kinds), schedule(2, time.Minute, time.Second, 3, 0, kinds); reflect.DeepEqual(a, b) {
		t.Errorf("seeds 1 and 2 gave the same schedule")
	}
}

func TestParseKinds(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		mode    redisMode
		want    []kind
		wantErr bool
	}{
		{name: "all", in: joinKinds(kinds), want: kinds},
		{name: "some, spaced, repeated", in: "stall, node_kill,stall", want: []kind{faultStall, faultNodeKill}},
		{name: "none", in: "", want: nil},
		{name: "unknown", in: "stall,meteor", wantErr: true},
		{name: "the failover comes with --sentinel only", in: string(faultFailover), wantErr: true},
		{name: "with --sentinel", in: "sentinel_failover,node_kill", mode: modeSentinel, want: []kind{faultFailover, faultNodeKill}},
		{name: "with --sentinel, no proxy faults", in: "stall", mode: modeSentinel, wantErr: true},
		{name: "the cluster's faults come with --cluster only", in: "master_kill", wantErr: true},
		{name: "with --cluster, proxy faults too", in: "reshard,partition,master_kill", mode: modeCluster, want: []kind{faultReshard, faultPartition, faultMasterKill}},
		{name: "with --cluster, no Sentinel", in: "sentinel_failover", mode: modeCluster, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKinds(tt.in, tt.mode)
			if (err != nil) != tt.wantErr || !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseKinds(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestChaos's seed makes every fault in its 25 s.
func TestChaosSeedMakesEveryFault(t *testing.T) {
	s := schedule(6, 25*time.Second, 700*time.Millisecond, 3, 0, kinds)
	for _, k := range kinds {
		if !slices.ContainsFunc(s, func(f fault) bool { return f.Kind == k }) {
			t.Errorf("no %s in %v", k, s)
		}
	}
}

// TestChaosCluster's seed makes every fault it asks for in its first 12 s.
func TestChaosClusterSeedMakesEveryFault(t *testing.T) {
	s := schedule(28, 40*time.Second, time.Second, 3, clusterMasters, clusterTestKinds)
	for _, k := range clusterTestKinds {
		if !slices.ContainsFunc(s, func(f fault) bool { return f.Kind == k && f.At < 12*time.Second }) {
			t.Errorf("no %s in the first 12 s of %v", k, s)
		}
	}
}
