package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

// secret is the content of the one file outside the workspace; no result
// or error may ever hold it.
const secret = "SECRET-b7e1c0ffee"

// tree is a workspace built for a test, with a directory beside it.
type tree struct {
	ws      *Workspace
	base    string // holds both the workspace and the outside directory
	dir     string // the workspace
	tools   map[string]Tool
	outside string
}

// newTree builds this layout under a temporary directory:
//
//	outside/secret.txt            secret
//	ws/a.txt                      "hello\nworld\n"
//	ws/sub/b.txt, ws/sub/deeper/c.go, ws/empty/, ws/.git/config
//	ws/bin.dat (NUL bytes), ws/latin1.txt (not UTF-8), ws/zero.txt (empty)
//	ws/link-in.txt -> a.txt       ws/link-in-dir -> sub
//	ws/link-out.txt -> ../outside/secret.txt
//	ws/link-out-abs.txt -> /…/outside/secret.txt
//	ws/link-out-dir -> ../outside ws/link-chain -> link-out.txt
//	ws/sub/link-up -> ../../outside
func newTree(t *testing.T) *tree {
	t.Helper()
	base := t.TempDir()
	tr := &tree{base: base, dir: filepath.Join(base, "ws"), outside: filepath.Join(base, "outside")}
	files := map[string]string{
		"outside/secret.txt": secret + "\nneedle\n",
		"ws/a.txt":           "hello\nworld\n",
		"ws/sub/b.txt":       "a needle here\nnothing\n",
		"ws/sub/deeper/c.go": "package c // needle\n",
		"ws/.git/config":     "needle\n",
		"ws/bin.dat":         "needle\x00\x01\x02",
		"ws/latin1.txt":      "caf\xe9 needle\n",
		"ws/zero.txt":        "",
		"ws/empty/":          "",
	}
	for name, content := range files {
		p := filepath.Join(base, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			mustDo(t, os.MkdirAll(p, 0o755))
			continue
		}
		mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
		mustDo(t, os.WriteFile(p, []byte(content), 0o644))
	}
	links := map[string]string{
		"link-in.txt":      "a.txt",
		"link-in-dir":      "sub",
		"link-out.txt":     "../outside/secret.txt",
		"link-out-abs.txt": filepath.Join(tr.outside, "secret.txt"),
		"link-out-dir":     "../outside",
		"link-chain":       "link-out.txt",
		"sub/link-up":      "../../outside",
	}
	for name, target := range links {
		mustDo(t, os.Symlink(target, filepath.Join(tr.dir, filepath.FromSlash(name))))
	}
	ws, err := OpenWorkspace(tr.dir, nil)
	mustDo(t, err)
	t.Cleanup(func() { ws.Close() })
	tr.ws = ws
	tr.tools = map[string]Tool{}
	for _, tool := range ws.Tools() {
		tr.tools[tool.Spec().Name] = tool
	}
	return tr
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// call calls a tool and checks that neither its result nor its error holds
// the secret or the workspace's absolute path.
func (tr *tree) call(t *testing.T, ctx context.Context, tool, args string) (string, error) {
	t.Helper()
	out, err := tr.tools[tool].Call(ctx, json.RawMessage(args))
	text := out
	if err != nil {
		text += "\n" + err.Error()
	}
	for _, leak := range []string{secret, tr.base} {
		if strings.Contains(text, leak) {
			t.Fatalf("%s %s: %q leaks %q", tool, args, text, leak)
		}
	}
	return out, err
}

// check compares a call's outcome with want (the whole result) or wantErr
// (a part of the error).
func check(t *testing.T, out string, err error, want, wantErr string) {
	t.Helper()
	switch {
	case wantErr != "" && err == nil:
		t.Fatalf("got result %q, want an error with %q", out, wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Fatalf("got error %q, want one with %q", err, wantErr)
	case wantErr == "" && err != nil:
		t.Fatalf("got error %q, want %q", err, want)
	case wantErr == "" && out != want:
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
}

func TestOpenWorkspace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	mustDo(t, os.WriteFile(file, nil, 0o644))
	tests := []struct {
		name    string
		dir     string
		wantErr string
	}{
		{name: "directory", dir: dir},
		{name: "missing", dir: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "file", dir: file, wantErr: "not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := OpenWorkspace(tt.dir, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			mustDo(t, err)
			mustDo(t, ws.Close())
		})
	}
}

func TestSpecs(t *testing.T) {
	ws, err := OpenWorkspace(t.TempDir(), nil)
	mustDo(t, err)
	defer ws.Close()
	var set Set
	mustDo(t, set.Add(ws.Tools()...))
	for _, tool := range set.All() {
		spec := tool.Spec()
		t.Run(spec.Name, func(t *testing.T) {
			var schema struct {
				Type                 string                     `json:"type"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
			mustDo(t, json.Unmarshal(spec.InputSchema, &schema))
			if schema.Type != "object" || schema.AdditionalProperties == nil || *schema.AdditionalProperties {
				t.Errorf("schema %s: want an object with additionalProperties false", spec.InputSchema)
			}
			for _, r := range schema.Required {
				if _, ok := schema.Properties[r]; !ok {
					t.Errorf("required %q is not a property", r)
				}
			}
			if len(spec.Description) < 100 || spec.Confirm {
				t.Errorf("spec %+v: want a full description and no confirmation", spec)
			}
		})
	}
}

func TestListFiles(t *testing.T) {
	tr := newTree(t)
	root := strings.Join([]string{".git/", "a.txt", "bin.dat", "empty/", "latin1.txt", "link-chain",
		"link-in-dir/", "link-in.txt", "link-out-abs.txt", "link-out-dir", "link-out.txt", "sub/", "zero.txt"}, "\n")
	tests := []struct {
		name, args, want, wantErr string
	}{
		{name: "default is the root", args: `{}`, want: root},
		{name: "no arguments", args: ``, want: root},
		{name: "dot", args: `{"path":"."}`, want: root},
		{name: "subdirectory", args: `{"path":"sub"}`, want: "sub/b.txt\nsub/deeper/\nsub/link-up"},
		{name: "unclean path", args: `{"path":"./sub//deeper/"}`, want: "sub/deeper/c.go"},
		{name: "dot-dot inside", args: `{"path":"sub/../sub/deeper"}`, want: "sub/deeper/c.go"},
		{name: "symlink inside", args: `{"path":"link-in-dir"}`, want: "link-in-dir/b.txt\nlink-in-dir/deeper/\nlink-in-dir/link-up"},
		{name: "empty", args: `{"path":"empty"}`, want: "(empty directory)"},
		{name: "file", args: `{"path":"a.txt"}`, wantErr: `path "a.txt" is not a directory`},
		{name: "missing", args: `{"path":"nope"}`, wantErr: `path "nope" does not exist`},
		{name: "wrong type", args: `{"path":1}`, wantErr: `argument "path" must be a string, not number`},
		{name: "unknown argument", args: `{"dir":"."}`, wantErr: `unknown argument "dir"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.call(t, context.Background(), "list_files", tt.args)
			check(t, out, err, tt.want, tt.wantErr)
		})
	}
}

func TestListFilesBound(t *testing.T) {
	tr := newTree(t)
	many := filepath.Join(tr.dir, "many")
	mustDo(t, os.Mkdir(many, 0o755))
	for i := range listMax + 5 {
		mustDo(t, os.WriteFile(filepath.Join(many, fmt.Sprintf("f%04d", i)), nil, 0o644))
	}
	out, err := tr.call(t, context.Background(), "list_files", `{"path":"many"}`)
	mustDo(t, err)
	lines := strings.Split(out, "\n")
	if len(lines) != listMax+1 || lines[0] != "many/f0000" || lines[listMax-1] != "many/f0999" ||
		lines[listMax] != "[… 5 more entries not shown]" {
		t.Fatalf("got %d lines: %q … %q", len(lines), lines[0], lines[len(lines)-2:])
	}
}

func TestReadFile(t *testing.T) {
	tr := newTree(t)
	tests := []struct {
		name, args, want, wantErr string
	}{
		{name: "whole file", args: `{"path":"a.txt"}`, want: "hello\nworld\n"},
		{name: "offset", args: `{"path":"a.txt","offset":6}`, want: "world\n"},
		{name: "offset and limit", args: `{"path":"a.txt","offset":2,"limit":3}`,
			want: "llo\n[… 7 more bytes; read on with offset=5]"},
		{name: "limit above the maximum", args: `{"path":"a.txt","limit":1000000000}`, want: "hello\nworld\n"},
		{name: "nested", args: `{"path":"sub/deeper/c.go"}`, want: "package c // needle\n"},
		{name: "dot-dot inside", args: `{"path":"sub/../a.txt"}`, want: "hello\nworld\n"},
		// Symbolic links that stay inside are followed: a project's own
		// links (a README -> docs/README.md) are part of its text.
		{name: "symlink inside", args: `{"path":"link-in.txt"}`, want: "hello\nworld\n"},
		{name: "through a symlinked directory inside", args: `{"path":"link-in-dir/b.txt"}`, want: "a needle here\nnothing\n"},
		{name: "empty file", args: `{"path":"zero.txt"}`, want: "[empty file]"},
		{name: "offset at the end", args: `{"path":"a.txt","offset":12}`, want: `[end of file: "a.txt" has 12 bytes]`},
		{name: "offset past the end", args: `{"path":"a.txt","offset":13}`, wantErr: `offset 13 is past the end of "a.txt" (12 bytes)`},
		{name: "binary", args: `{"path":"bin.dat"}`, wantErr: `path "bin.dat" is a binary file`},
		{name: "not UTF-8", args: `{"path":"latin1.txt"}`, wantErr: `path "latin1.txt" is a binary file`},
		{name: "directory", args: `{"path":"sub"}`, wantErr: `path "sub" is a directory`},
		{name: "missing", args: `{"path":"nope.txt"}`, wantErr: `path "nope.txt" does not exist`},
		{name: "no path", args: `{}`, wantErr: `argument "path" is required`},
		{name: "negative offset", args: `{"path":"a.txt","offset":-1}`, wantErr: `"offset" must not be negative`},
		{name: "negative limit", args: `{"path":"a.txt","limit":-5}`, wantErr: `"limit" must be at least 1`},
		{name: "zero limit", args: `{"path":"a.txt","limit":0}`, wantErr: `"limit" must be at least 1`},
		{name: "offset as a string", args: `{"path":"a.txt","offset":"3"}`, wantErr: `argument "offset" must be an integer, not string`},
		{name: "fractional limit", args: `{"path":"a.txt","limit":1.5}`, wantErr: `argument "limit" must be an integer, not number 1.5`},
		{name: "unknown argument", args: `{"path":"a.txt","lines":3}`, wantErr: `unknown argument "lines"`},
		{name: "not an object", args: `["a.txt"]`, wantErr: `arguments must be a JSON object, not array`},
		{name: "not JSON", args: `{"path":`, wantErr: `arguments are not valid JSON`},
		{name: "two objects", args: `{"path":"a.txt"}{}`, wantErr: `arguments are not valid JSON`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tr.call(t, context.Background(), "read_file", tt.args)
			check(t, out, err, tt.want, tt.wantErr)
		})
	}
}

// TestReadFilePaging reads files part by part as a model would, following
// the trailer, and checks that the parts make up the file exactly.
func TestReadFilePaging(t *testing.T) {
	tr := newTree(t)
	var big strings.Builder
	for i := 0; big.Len() < 3*readMax+100; i++ {
		fmt.Fprintf(&big, "line %d: naïve café — 日本語 ✓\n", i)
	}
	mustDo(t, os.WriteFile(filepath.Join(tr.dir, "big.txt"), []byte(big.String()), 0o644))
	mustDo(t, os.WriteFile(filepath.Join(tr.dir, "runes.txt"), []byte("日本語 ✓ naïve\n"), 0o644))
	trailer := regexp.MustCompile(`\n\[… (\d+) more bytes; read on with offset=(\d+)\]$`)
	tests := []struct {
		name, path, limit string
		wantParts         int
		wholeRunes        bool // every part is valid UTF-8
	}{
		{name: "default limit", path: "big.txt", wantParts: 4, wholeRunes: true},
		{name: "limit above the maximum", path: "big.txt", limit: `,"limit":1000000000`, wantParts: 4, wholeRunes: true},
		{name: "smaller limit", path: "big.txt", limit: `,"limit":50000`, wantParts: 4, wholeRunes: true},
		// A part is cut back to a whole character, unless that leaves nothing.
		{name: "limits that cut characters", path: "runes.txt", limit: `,"limit":4`, wantParts: 6, wholeRunes: true},
		{name: "one byte at a time", path: "runes.txt", limit: `,"limit":1`, wantParts: 21},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(tr.dir, tt.path))
			mustDo(t, err)
			var got strings.Builder
			offset, parts := 0, 0
			for {
				parts++
				out, err := tr.call(t, context.Background(), "read_file",
					fmt.Sprintf(`{"path":%q,"offset":%d%s}`, tt.path, offset, tt.limit))
				mustDo(t, err)
				m := trailer.FindStringSubmatchIndex(out)
				if m == nil {
					got.WriteString(out)
					break
				}
				part := out[:m[0]]
				more, _ := strconv.Atoi(out[m[2]:m[3]])
				next, _ := strconv.Atoi(out[m[4]:m[5]])
				if len(part) > readMax || next != offset+len(part) || more != len(want)-next ||
					tt.wholeRunes && !utf8.ValidString(part) {
					t.Fatalf("part at %d: %d bytes, more %d, next %d", offset, len(part), more, next)
				}
				got.WriteString(part)
				offset = next
			}
			if got.String() != string(want) || parts != tt.wantParts {
				t.Fatalf("reassembled %d bytes in %d parts, want %d bytes in %d", got.Len(), parts, len(want), tt.wantParts)
			}
		})
	}
}

// TestEscapes gives every tool every way out of the workspace.
func TestEscapes(t *testing.T) {
	tr := newTree(t)
	secretPath := filepath.Join(tr.outside, "secret.txt")
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "dot-dot", path: "..", wantErr: `path ".." is outside the workspace`},
		{name: "dot-dot to a file", path: "../outside/secret.txt", wantErr: `path "../outside/secret.txt" is outside the workspace`},
		{name: "dot-dot after a name", path: "a/../../outside/secret.txt", wantErr: "is outside the workspace"},
		{name: "dot-dot deep", path: "sub/deeper/../../../outside", wantErr: "is outside the workspace"},
		{name: "absolute outside", path: secretPath, wantErr: "an absolute path is outside the workspace"},
		{name: "absolute inside", path: filepath.Join(tr.dir, "a.txt"), wantErr: "an absolute path is outside the workspace"},
		{name: "absolute root", path: "/", wantErr: "an absolute path is outside the workspace"},
		{name: "symlink to a file outside", path: "link-out.txt", wantErr: `path "link-out.txt" is outside the workspace`},
		{name: "absolute symlink", path: "link-out-abs.txt", wantErr: "is outside the workspace"},
		{name: "chain of symlinks", path: "link-chain", wantErr: "is outside the workspace"},
		{name: "symlink to a directory outside", path: "link-out-dir", wantErr: "is outside the workspace"},
		{name: "through a symlinked directory", path: "link-out-dir/secret.txt", wantErr: "is outside the workspace"},
		{name: "symlink deeper down", path: "sub/link-up/secret.txt", wantErr: "is outside the workspace"},
		{name: "symlink inside then out", path: "link-in-dir/link-up/secret.txt", wantErr: "is outside the workspace"},
	}
	for _, tt := range tests {
		for _, tool := range []string{"list_files", "read_file", "search_files"} {
			t.Run(tt.name+"/"+tool, func(t *testing.T) {
				args, _ := json.Marshal(map[string]string{"path": tt.path})
				if tool == "search_files" {
					args, _ = json.Marshal(map[string]string{"path": tt.path, "pattern": "."})
				}
				out, err := tr.call(t, context.Background(), tool, string(args))
				check(t, out, err, "", tt.wantErr)
			})
		}
	}
}

// TestSwappedSymlink changes what the tools read through while they read:
// "swap" goes from a directory to a symbolic link to outside and back
// (missing in between), and "flip", always a link, is pointed atomically
// inside and outside in turn.
func TestSwappedSymlink(t *testing.T) {
	tr := newTree(t)
	in := func(name string) string { return filepath.Join(tr.dir, name) }
	for _, dir := range []string{"swap", "real"} {
		mustDo(t, os.Mkdir(in(dir), 0o755))
		mustDo(t, os.WriteFile(filepath.Join(in(dir), "secret.txt"), []byte("inside\n"), 0o644))
	}
	mustDo(t, os.Symlink("real", in("flip")))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			target := "real"
			if i%2 == 0 {
				target = "../outside"
			}
			if os.Rename(in("swap"), in("parked")) != nil ||
				os.Symlink("../outside", in("link")) != nil || os.Rename(in("link"), in("swap")) != nil ||
				os.Symlink(target, in("link")) != nil || os.Rename(in("link"), in("flip")) != nil ||
				os.Remove(in("swap")) != nil || os.Rename(in("parked"), in("swap")) != nil {
				t.Error("swapping failed")
				return
			}
		}
	})
	calls := []struct{ tool, args string }{
		{"read_file", `{"path":"swap/secret.txt"}`},
		{"read_file", `{"path":"flip/secret.txt"}`},
		{"list_files", `{"path":"swap"}`},
		{"list_files", `{"path":"flip"}`},
		{"search_files", `{"pattern":"\\w","path":"swap"}`},
		{"search_files", `{"pattern":"\\w","path":"flip"}`},
		{"search_files", `{"pattern":"\\w"}`},
	}
	for range 150 {
		for _, c := range calls {
			// A call caught mid-swap may fail in several ways (refused,
			// missing, a link where a directory was); tr.call fails the test
			// if the secret shows in a result or an error.
			out, err := tr.call(t, context.Background(), c.tool, c.args)
			if err == nil && c.tool == "read_file" && out != "inside\n" {
				t.Errorf("%s %s: got %q", c.tool, c.args, out)
			}
		}
	}
	close(stop)
	wg.Wait()
}

// cancelAfter is a context whose Err reports cancellation from its nth
// call on, so a test can stop a call partway through.
type cancelAfter struct {
	context.Context
	n atomic.Int32
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func TestCancelled(t *testing.T) {
	tr := newTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct{ tool, args string }{
		{"list_files", `{}`},
		{"read_file", `{"path":"a.txt"}`},
		{"search_files", `{"pattern":"x"}`},
	} {
		t.Run(c.tool, func(t *testing.T) {
			if out, err := tr.call(t, ctx, c.tool, c.args); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %q, %v; want context.Canceled", out, err)
			}
		})
	}
	t.Run("search between files", func(t *testing.T) {
		mid := &cancelAfter{Context: context.Background()}
		mid.n.Store(4)
		if out, err := tr.call(t, mid, "search_files", `{"pattern":"x"}`); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %q, %v; want context.Canceled", out, err)
		}
	})
}

// TestConcurrentCalls runs every tool from many goroutines at once (for
// the race detector).
func TestConcurrentCalls(t *testing.T) {
	tr := newTree(t)
	var wg sync.WaitGroup
	for range 8 {
		for name, args := range map[string]string{
			"list_files":   `{"path":"sub"}`,
			"read_file":    `{"path":"a.txt","limit":4}`,
			"search_files": `{"pattern":"needle"}`,
		} {
			wg.Go(func() {
				if _, err := tr.tools[name].Call(context.Background(), json.RawMessage(args)); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			})
		}
	}
	wg.Wait()
}

func TestClosed(t *testing.T) {
	tr := newTree(t)
	mustDo(t, tr.ws.Close())
	out, err := tr.call(t, context.Background(), "read_file", `{"path":"a.txt"}`)
	check(t, out, err, "", "the workspace is closed")
}
