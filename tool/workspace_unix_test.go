//go:build unix

package tool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
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

// TestHardlinks links a file outside the workspace into it, and one
// inside to another name: both are refused (a link count cannot tell
// where the other name is), unless the workspace allows hard links.
func TestHardlinks(t *testing.T) {
	tr := newTree(t)
	mustDo(t, os.Link(filepath.Join(tr.outside, "secret.txt"), filepath.Join(tr.dir, "hard.txt")))
	mustDo(t, os.Link(filepath.Join(tr.dir, "a.txt"), filepath.Join(tr.dir, "sub", "a-again.txt")))
	mustDo(t, os.Symlink("hard.txt", filepath.Join(tr.dir, "link-hard.txt")))
	tests := []struct {
		name, tool, args, want, wantErr string
	}{
		{name: "read a link to outside", tool: "read_file", args: `{"path":"hard.txt"}`,
			wantErr: `path "hard.txt" is not read: it has more than one hard link, and a hard link may lead outside the workspace`},
		{name: "read a symbolic link to it", tool: "read_file", args: `{"path":"link-hard.txt"}`, wantErr: "more than one hard link"},
		{name: "read a link inside", tool: "read_file", args: `{"path":"sub/a-again.txt"}`, wantErr: "more than one hard link"},
		{name: "read the other name inside", tool: "read_file", args: `{"path":"a.txt"}`, wantErr: "more than one hard link"},
		{name: "list", tool: "list_files", args: `{"path":"sub"}`,
			want: "sub/b.txt\nsub/deeper/\nsub/link-up\n[1 file with more than one hard link not shown: a hard link may lead outside the workspace]"},
		{name: "search", tool: "search_files", args: `{"pattern":"SECRET|hello"}`,
			want: "no matches (5 files read)\n[3 files with more than one hard link skipped: a hard link may lead outside the workspace]"},
		{name: "search the file", tool: "search_files", args: `{"pattern":"SECRET","path":"hard.txt"}`,
			want: "no matches (0 files read)\n[1 file with more than one hard link skipped: a hard link may lead outside the workspace]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.call(t, context.Background(), tt.tool, tt.args)
			check(t, out, err, tt.want, tt.wantErr)
		})
	}

	t.Run("allowed", func(t *testing.T) {
		ws, err := OpenWorkspace(tr.dir, &WorkspaceOptions{AllowHardlinks: true})
		mustDo(t, err)
		defer ws.Close()
		out, err := readFile{ws}.Call(context.Background(), json.RawMessage(`{"path":"hard.txt"}`))
		if err != nil || !strings.HasPrefix(out, secret) {
			t.Fatalf("got %q, %v; want the linked file", out, err)
		}
	})
}
