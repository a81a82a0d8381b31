package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestLostSlots(t *testing.T) {
	// The nodes' lines of the ten-minute run that found it, shortened:
	// redis-4 (c4) serves 0-322 in the others' views, 0-188 and 190-322
	// in its own.
	line := func(id, flags, of string, slots ...string) string {
		s := id + " 127.0.0.1:1@2 " + flags + " " + of + " 0 0 44 connected"
		for _, sl := range slots {
			s += " " + sl
		}
		return s + "\n"
	}
	others := line("c4", "master", "-", "0-322") + line("e6", "master", "-", "323-16383")
	tests := []struct {
		name  string
		views []string
		want  map[int][]int
	}{
		{name: "agreed", views: []string{
			line("c4", "myself,master", "-", "0-322") + line("e6", "master", "-", "323-16383"),
			line("e6", "myself,master", "-", "323-16383") + line("c4", "master", "-", "0-322"),
		}, want: map[int][]int{}},
		{name: "a master without a slot every other server says it serves", views: []string{
			line("c4", "myself,master", "-", "0-188", "190-322") + line("e6", "master", "-", "323-16383"),
			line("e6", "myself,master", "-", "323-16383") + line("c4", "master", "-", "0-322"),
			line("r1", "myself,slave", "c4") + others,
		}, want: map[int][]int{0: {189}}},
		{name: "moving: another server sees the slot elsewhere", views: []string{
			line("c4", "myself,master", "-", "0-188", "190-322") + line("e6", "master", "-", "323-16383"),
			line("e6", "myself,master", "-", "189", "323-16383") + line("c4", "master", "-", "0-188", "190-322"),
			line("r1", "myself,slave", "c4") + others,
		}, want: map[int][]int{}},
		{name: "migrating is no owner", views: []string{
			line("c4", "myself,master", "-", "0-322", "[189->-e6]") + line("e6", "master", "-", "323-16383"),
			line("r1", "myself,slave", "c4") + others,
		}, want: map[int][]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			views := make([][]clusterNode, len(tt.views))
			for i, v := range tt.views {
				views[i] = parseNodes(v)
			}
			if got := lostSlots(views); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("lostSlots = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSlotRanges(t *testing.T) {
	tests := []struct {
		name  string
		slots []int
		want  string
	}{
		{name: "one", slots: []int{189}, want: "189"},
		{name: "a range and one", slots: []int{100, 101, 102, 189}, want: "100-102,189"},
		{name: "none", slots: nil, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slotRanges(tt.slots); got != tt.want {
				t.Errorf("slotRanges(%v) = %q, want %q", tt.slots, got, tt.want)
			}
		})
	}
}

// TestLostSlotGivenBack makes the state Redis 7.0 can leave a master in —
// a slot unassigned in its own view, its own in every other server's —
// with CLUSTER DELSLOTS on a real cluster, and sees the run give it back.
func TestLostSlotGivenBack(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			skipreport.Skip(t, bin+" not found: install Debian's redis-server and redis-tools (7.0 or later) to run the Redis Cluster tests")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := startCluster(ctx, t.TempDir(), io.Discard)
	defer rs.kill()
	if err != nil {
		t.Fatal(err)
	}
	cs := rs.cluster
	shards, err := cs.shards(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	owner := shards[0].master
	if err := cs.admin[owner].Do(ctx, "cluster", "delslots", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cs.waitReady(ctx); err != nil {
		t.Fatalf("the cluster not whole again: %v", err)
	}
	if len(cs.defects) != 1 || !strings.Contains(cs.defects[0], fmt.Sprintf("redis-%d serves slot 0 ", owner+1)) {
		t.Errorf("defects %q, want slot 0 of redis-%d given back", cs.defects, owner+1)
	}
}
