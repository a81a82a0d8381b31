package tool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSearchFiles(t *testing.T) {
	tr := newTree(t)
	tests := []struct {
		name, args, want, wantErr string
	}{
		// .git, binary, non-UTF-8 files and symbolic links (link-in-dir,
		// link-out-dir, sub/link-up) are not searched.
		{name: "whole workspace", args: `{"pattern":"needle"}`,
			want: "sub/b.txt:1: a needle here\nsub/deeper/c.go:1: package c // needle"},
		{name: "subdirectory", args: `{"pattern":"needle","path":"sub/deeper"}`, want: "sub/deeper/c.go:1: package c // needle"},
		{name: "one file", args: `{"pattern":"o","path":"a.txt"}`, want: "a.txt:1: hello\na.txt:2: world"},
		{name: "symlinked directory inside, given", args: `{"pattern":"needle","path":"link-in-dir"}`,
			want: "link-in-dir/b.txt:1: a needle here\nlink-in-dir/deeper/c.go:1: package c // needle"},
		{name: "regular expression", args: `{"pattern":"^(?i)HELLO$"}`, want: "a.txt:1: hello"},
		{name: "no match", args: `{"pattern":"zebra"}`, want: "no matches (6 files read)"},
		{name: "secret is not reached", args: `{"pattern":"SECRET"}`, want: "no matches (6 files read)"},
		{name: "git directory given", args: `{"pattern":"needle","path":".git"}`, want: ".git/config:1: needle"},
		{name: "bad pattern", args: `{"pattern":"a(b"}`, wantErr: "bad pattern \"a(b\": error parsing regexp: missing closing )"},
		{name: "no pattern", args: `{"path":"sub"}`, wantErr: `argument "pattern" is required`},
		{name: "missing path", args: `{"pattern":"x","path":"nope"}`, wantErr: `path "nope" does not exist`},
		{name: "unknown argument", args: `{"pattern":"x","glob":"*.go"}`, wantErr: `unknown argument "glob"`},
		{name: "pattern too long", args: `{"pattern":"` + strings.Repeat("a", searchMaxPattern+1) + `"}`, wantErr: "at most 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.call(t, context.Background(), "search_files", tt.args)
			check(t, out, err, tt.want, tt.wantErr)
		})
	}
}

func TestSearchFilesBounds(t *testing.T) {
	tr := newTree(t)
	write := func(name, content string) {
		p := filepath.Join(tr.dir, filepath.FromSlash(name))
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("many/m.txt", strings.Repeat("match\n", searchMaxMatches+50))
	write("exact/m.txt", strings.Repeat("match\n", searchMaxMatches))
	write("long/l.txt", strings.Repeat("x", 5_000)+"needle"+strings.Repeat("é", 5_000)+"\n")
	write("huge/h.txt", "needle"+strings.Repeat("y", 2*searchLineScan)+"\nneedle again\n")
	write("late/l.txt", strings.Repeat("y", 2*searchLineScan)+"needle\n")
	for i := range 5 {
		write(fmt.Sprintf("files/f%d.txt", i), "needle\n")
	}
	write("bytes/a.txt", strings.Repeat("z", 100)+"\n")
	write("bytes/b.txt", strings.Repeat("z", 100)+"\nneedle\n")
	write("bytes/c.txt", "needle\n")

	t.Run("many matches", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"match","path":"many"}`)
		mustDo(t, err)
		lines := strings.Split(out, "\n")
		if len(lines) != searchMaxMatches+1 || lines[searchMaxMatches-1] != "many/m.txt:200: match" ||
			lines[searchMaxMatches] != "[… stopped at 200 matches; narrow the pattern or the path]" {
			t.Fatalf("got %d lines, ending %q", len(lines), lines[len(lines)-2:])
		}
	})
	t.Run("exactly the most matches", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"match","path":"exact"}`)
		mustDo(t, err)
		if lines := strings.Split(out, "\n"); len(lines) != searchMaxMatches || strings.Contains(out, "stopped") {
			t.Fatalf("got %d lines, ending %q", len(lines), lines[len(lines)-1])
		}
	})
	t.Run("long line is cut around the match", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"needle","path":"long"}`)
		mustDo(t, err)
		text, ok := strings.CutPrefix(out, "long/l.txt:1: …")
		if !ok || !strings.HasSuffix(text, "…") || !strings.Contains(text, "xneedleé") ||
			len(text) > searchMaxLine+len("…") || strings.ContainsRune(text, '\uFFFD') {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("only the start of a huge line is searched", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"needle","path":"huge"}`)
		mustDo(t, err)
		if !strings.HasPrefix(out, "huge/h.txt:1: needleyyy") || !strings.HasSuffix(out, "…\nhuge/h.txt:2: needle again\n"+
			"[1 line longer than 16384 bytes: only the first 16384 bytes of each were searched]") {
			t.Fatalf("got %q", out)
		}
		out, err = tr.call(t, context.Background(), "search_files", `{"pattern":"needle","path":"late"}`)
		check(t, out, err, "no matches (1 files read)\n[1 line longer than 16384 bytes: only the first 16384 bytes of each were searched]", "")
	})

	tr.ws.maxFiles = 3
	t.Run("files bound", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"needle","path":"files"}`)
		check(t, out, err, "files/f0.txt:1: needle\nfiles/f1.txt:1: needle\nfiles/f2.txt:1: needle\n"+
			"[… stopped after reading 3 files; narrow the pattern or the path]", "")
	})
	tr.ws.maxFiles = searchMaxFiles
	tr.ws.maxBytes = 150
	t.Run("bytes bound", func(t *testing.T) {
		out, err := tr.call(t, context.Background(), "search_files", `{"pattern":"needle","path":"bytes"}`)
		check(t, out, err, "[… stopped after reading 150 bytes; narrow the pattern or the path]", "")
	})
	tr.ws.maxBytes = searchMaxBytes
}

func TestCompilePattern(t *testing.T) {
	tests := []struct {
		name, pattern string
		insts         int    // when accepted
		wantErr       string // when refused
	}{
		{name: "plain", pattern: "(?i)todo", insts: 6},
		{name: "nested stars are small", pattern: "(a*)*b", insts: 9},
		{name: "the most a repetition may take", pattern: "(.*){200}x", insts: 803},
		{name: "a counted class", pattern: "[a-z]{1,200}Q", insts: 402},
		{name: "a repeated star", pattern: "(.*){1000}x", wantErr: "compiles to 4003 instructions, at most 1000"},
		{name: "a long counted literal", pattern: "x{1000}", wantErr: "compiles to 1002 instructions"},
		{name: "a bounded any", pattern: ".{0,1000}", wantErr: "too complex to search with"},
		{name: "nested counts", pattern: "((a{10}){10}){10}", wantErr: "compiles to 1222 instructions"},
		{name: "nested counts past the parser's size", pattern: "((a{100}){100}){100}", wantErr: "bad pattern"},
		{name: "over the parser's count", pattern: "a{1001}", wantErr: "invalid repeat count"},
		{name: "syntax", pattern: "a(b", wantErr: "missing closing )"},
		{name: "too long", pattern: strings.Repeat("a", searchMaxPattern+1), wantErr: "at most 4096"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re, insts, err := compilePattern(tt.pattern)
			switch {
			case tt.wantErr == "" && (err != nil || insts != tt.insts || re == nil):
				t.Fatalf("got %d instructions, %v; want %d", insts, err, tt.insts)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %d instructions, %v; want an error with %q", insts, err, tt.wantErr)
			}
		})
	}
}

// A search that meets long lines, a work bound or a cancel says so, or
// stops, within the file: not only between files, nor every 4096 lines.
func TestSearchWithinAFile(t *testing.T) {
	tr := newTree(t)
	write := func(name, content string) {
		p := filepath.Join(tr.dir, filepath.FromSlash(name))
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("long/one.txt", strings.Repeat(strings.Repeat("a", searchLineScan)+"\n", 200))
	write("long/wide.txt", strings.Repeat("a", 1<<20)+"x\n"+strings.Repeat("a", 1<<20)+"x\n")
	write("work/w.txt", strings.Repeat(strings.Repeat("z", 100)+"\n", 10)+"needle\n")
	write("long/short-for-complex.txt", strings.Repeat("a", 16000)+"\n")
	_, needle, err := compilePattern("needle")
	mustDo(t, err)
	_, complex, err := compilePattern("(.*){200}x")
	mustDo(t, err)

	tests := []struct {
		name, args string
		ctx        func() context.Context
		maxWork    int64
		want       string
		wantErr    error
	}{
		{name: "cancelled in the middle of a file", args: `{"pattern":"b","path":"long/one.txt"}`,
			// Call looks once before it starts; the file's loop next.
			ctx:     func() context.Context { c := &cancelAfter{Context: context.Background()}; c.n.Store(1); return c },
			wantErr: context.Canceled},
		{name: "long lines cut, and said so", args: `{"pattern":"x","path":"long/wide.txt"}`,
			want: "no matches (1 files read)\n[2 lines longer than 16384 bytes: only the first 16384 bytes of each were searched]"},
		{name: "lines cut shorter for a complex pattern", args: `{"pattern":"(.*){200}x","path":"long/short-for-complex.txt"}`,
			want: fmt.Sprintf("no matches (1 files read)\n[1 line longer than %d bytes: only the first %[1]d bytes of each were searched]", searchCallWork/complex)},
		{name: "work bound", args: `{"pattern":"needle","path":"work"}`, maxWork: int64(550 * needle),
			want: "[… stopped after searching 500 bytes, the most for a pattern of this size; narrow the pattern or the path]"},
		{name: "under the work bound", args: `{"pattern":"needle","path":"work"}`, maxWork: int64(1007 * needle),
			want: "work/w.txt:11: needle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			tr.ws.maxWork = searchMaxWork
			if tt.maxWork > 0 {
				tr.ws.maxWork = tt.maxWork
			}
			out, err := tr.call(t, ctx, "search_files", tt.args)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %q, %v; want %v", out, err, tt.wantErr)
				}
				return
			}
			check(t, out, err, tt.want, "")
		})
	}
}
