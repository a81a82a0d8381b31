//go:build unix

package tool

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
)

// TestFIFO checks that a named pipe, which would block a plain open until
// a writer came, is refused or passed over at once.
func TestFIFO(t *testing.T) {
	tr := newTree(t)
	mustDo(t, syscall.Mkfifo(filepath.Join(tr.dir, "sub", "pipe"), 0o644))
	tests := []struct {
		name, tool, args, want, wantErr string
	}{
		{name: "read", tool: "read_file", args: `{"path":"sub/pipe"}`, wantErr: `path "sub/pipe" is not a regular file`},
		{name: "list", tool: "list_files", args: `{"path":"sub/pipe"}`, wantErr: `path "sub/pipe" is not a directory`},
		{name: "search the pipe", tool: "search_files", args: `{"pattern":"x","path":"sub/pipe"}`, wantErr: "is not a regular file"},
		{name: "search past it", tool: "search_files", args: `{"pattern":"needle","path":"sub"}`,
			want: "sub/b.txt:1: a needle here\nsub/deeper/c.go:1: package c // needle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.call(t, context.Background(), tt.tool, tt.args)
			check(t, out, err, tt.want, tt.wantErr)
		})
	}
}
