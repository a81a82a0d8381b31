package buffer_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-run/baton/buffer"
	"github.com/baton-run/baton/buffer/buffertest"
)

// TestMemoryContract runs the Ring contract against Memory.
func TestMemoryContract(t *testing.T) {
	buffertest.TestRing(t, func(capacity int) buffer.Ring { return buffer.NewMemory(capacity) })
}

func TestNewMemoryDefaultCapacity(t *testing.T) {
	for _, capacity := range []int{0, -1} {
		if got := buffer.NewMemory(capacity).Cap(); got != buffer.DefaultCapacity {
			t.Errorf("NewMemory(%d).Cap() = %d, want %d", capacity, got, buffer.DefaultCapacity)
		}
	}
}

func TestNextChecksum(t *testing.T) {
	h := func(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }
	a := h("a")
	if got, want := buffer.NextChecksum("", "a"), a; got != want {
		t.Errorf("NextChecksum(\"\", a) = %s, want %s", got, want)
	}
	if got, want := buffer.NextChecksum(a, "b"), h(a+"b"); got != want {
		t.Errorf("NextChecksum(c(1), b) = %s, want %s", got, want)
	}
}

// TestChecksum: the binary chain is NextChecksum's, reads back what it
// writes, refuses what is not a checksum in the contract's form, and
// folding an event allocates nothing.
func TestChecksum(t *testing.T) {
	var c buffer.Checksum
	want := ""
	for i := range 5 {
		id := fmt.Sprintf("0190a1b2-c3d4-7e5f-8a9b-%012d", i)
		c = c.Next(id)
		want = buffer.NextChecksum(want, id)
		if c.String() != want {
			t.Fatalf("after %d events: %s, want %s", i+1, c.String(), want)
		}
	}
	tests := []struct {
		in string
		ok bool
	}{
		{want, true},
		{"", true},
		{"abc", false},
		{strings.ToUpper(want), false},
		{want[:63] + "g", false},
	}
	for _, tt := range tests {
		got, err := buffer.ParseChecksum(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got.String() != tt.in) {
			t.Errorf("ParseChecksum(%q) = %v, %v", tt.in, got, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { c = c.Next("0190a1b2-c3d4-7e5f-8a9b-000000000000") }); n != 0 {
		t.Errorf("Next allocates %v times", n)
	}
}
