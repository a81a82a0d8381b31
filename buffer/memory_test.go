package buffer_test

import (
	"crypto/sha256"
	"encoding/hex"
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
