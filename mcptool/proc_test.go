package mcptool

import (
	"log/slog"
	"strings"
	"testing"
)

func TestStderrLog(t *testing.T) {
	w := &stderrLog{log: slog.New(slog.DiscardHandler)}
	for _, s := range []string{"one\ntw", "o\r\n\n", "three\nfour\n", "five", strings.Repeat("z", 3000), "\nsix"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	got := w.tail()
	// The last three lines, "five"+3000 bytes cut, then "six", not
	// finished yet.
	parts := strings.Split(got, " | ")
	if len(parts) != 4 || parts[0] != "three" || parts[1] != "four" || !strings.HasPrefix(parts[2], "fivezzz") ||
		len(parts[2]) > maxStderrLine || parts[3] != "six" {
		t.Fatalf("tail = %.200q…", got)
	}
}
