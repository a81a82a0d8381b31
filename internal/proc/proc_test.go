package proc

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestCPU: the CPU time grows with work done.
func TestCPU(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("CPU is not read here")
	}
	before := CPU()
	deadline := time.Now().Add(20 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	if after := CPU(); after <= before {
		t.Errorf("CPU %v, then %v after %d busy iterations: want it to grow", before, after, x)
	}
}

// TestWriteSyscalls: on Linux the count grows with every write.
func TestWriteSyscalls(t *testing.T) {
	before, ok := WriteSyscalls()
	if !ok {
		t.Skip("no /proc/self/io here")
	}
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 10 {
		f.Write([]byte("x"))
	}
	if after, _ := WriteSyscalls(); after < before+10 {
		t.Errorf("write syscalls %d, then %d after 10 writes", before, after)
	}
}

func TestField(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"present", "rchar: 12\nsyscr: 3\nsyscw: 7\n", 7, true},
		{"absent", "rchar: 12\n", 0, false},
		{"not a number", "syscw: x\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := field([]byte(tt.in), "syscw")
			if got != tt.want || ok != tt.ok {
				t.Errorf("field = %d, %v; want %d, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
