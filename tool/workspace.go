package tool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// The workspace tools' bounds. They keep one result well under what a
// model can take in and one call well under a second on a large tree.
const (
	listMax     = 1000    // entries a list_files result shows
	listScanMax = 100_000 // entries list_files reads from one directory

	readMax = 64 << 10 // bytes a read_file result holds (the default and the maximum limit)

	searchMaxMatches = 200      // matching lines a search_files result shows
	searchMaxLine    = 256      // bytes shown of one matching line
	searchMaxFiles   = 10_000   // files search_files reads in one call
	searchMaxBytes   = 64 << 20 // bytes search_files reads in one call
	searchLineScan   = 64 << 10 // bytes of one line that are searched
	searchMaxPattern = 4 << 10  // bytes of a pattern

	sniffLen = 1024 // bytes at the start of a file that decide whether it is text
)

// Workspace gives the agent loop read-only access to one directory: the
// tools list_files, read_file and search_files.
//
// Every path a tool is given is relative to the directory, and every file
// is opened through an [os.Root], so a path that resolves outside it (a
// ".." too many, an absolute path, a symbolic link to outside, also one
// swapped in while a call runs) is refused and nothing outside is read.
// Symbolic links that stay inside the directory are followed (a
// project's own links, README.md -> docs/README.md, are part of it),
// except that search_files does not follow those it meets while walking
// a tree: their targets are searched where they are, and a walk cannot
// loop. Results and errors name paths relative to the directory, never
// its own path.
//
// A Workspace is safe for concurrent use, and so are its tools.
type Workspace struct {
	root *os.Root
	// escapes is the error os.Root gives for a path that leaves it; os
	// does not export it, so OpenWorkspace captures it.
	escapes error
	// maxFiles and maxBytes bound one search (searchMaxFiles and
	// searchMaxBytes; tests lower them).
	maxFiles int
	maxBytes int64
}

// OpenWorkspace opens dir as a workspace. dir must be an existing
// directory; it is held open (not looked up again by name) until Close.
func OpenWorkspace(dir string) (*Workspace, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open workspace: %s is not a directory", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	w := &Workspace{root: root, maxFiles: searchMaxFiles, maxBytes: searchMaxBytes}
	if _, err := root.Lstat(".."); err != nil {
		w.escapes = err
		var pe *os.PathError
		if errors.As(err, &pe) {
			w.escapes = pe.Err
		}
	}
	return w, nil
}

// Tools returns list_files, read_file and search_files.
func (w *Workspace) Tools() []Tool {
	return []Tool{listFiles{w}, readFile{w}, searchFiles{w}}
}

// Close releases the directory. Calls made after Close fail.
func (w *Workspace) Close() error { return w.root.Close() }

// fail turns the error of a file operation on p, the path as the model
// gave it, into a tool error. It never includes the error's own path,
// which may hold the workspace's.
func (w *Workspace) fail(p string, err error) error {
	switch {
	case path.IsAbs(p) || filepath.IsAbs(p):
		// The root refuses every absolute path. Not echoed: it may hold
		// the workspace's own.
		return errors.New("an absolute path is outside the workspace; paths are relative to its root")
	case w.escapes != nil && errors.Is(err, w.escapes):
		return fmt.Errorf("path %q is outside the workspace", p)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("path %q does not exist", p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("path %q: permission denied", p)
	case errors.Is(err, fs.ErrClosed):
		return errors.New("the workspace is closed")
	}
	var pe *os.PathError
	for errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("path %q: %v", p, err)
}

// clean returns p as a path relative to the workspace, "." for the
// workspace itself. os.Root resolves ".." lexically too, so once the root
// has accepted p the result names the same file and has no ".." in it.
func clean(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// join returns the path of entry name in directory dir, as results show it.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// openRegular opens p for reading if it is a regular file. O_NONBLOCK
// keeps a FIFO (perhaps swapped in after a check) from blocking the open.
func (w *Workspace) openRegular(p, shown string) (*os.File, fs.FileInfo, error) {
	f, err := w.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, w.fail(shown, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, w.fail(shown, err)
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, nil, fmt.Errorf("path %q is a directory; list it with list_files", shown)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, nil, fmt.Errorf("path %q is not a regular file", shown)
	}
	return f, fi, nil
}

type listFiles struct{ w *Workspace }

var _ Tool = listFiles{}

func (listFiles) Spec() Spec {
	return Spec{
		Name: "list_files",
		Description: "List a directory of the workspace: one entry per line, sorted by name, as a path " +
			"relative to the workspace root (usable as is by read_file and search_files); directories " +
			"end with \"/\". path defaults to the workspace root. At most 1000 entries are shown, then " +
			"a line says how many were left out. Read-only.",
		InputSchema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"path": {"type": "string", "description": "Directory relative to the workspace root; default \".\" (the root)."}
	},
	"required": [],
	"additionalProperties": false
}`),
	}
}

func (t listFiles) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	w := t.w
	f, err := w.root.OpenFile(clean(a.Path), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", w.fail(a.Path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", w.fail(a.Path, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("path %q is not a directory; read it with read_file", a.Path)
	}
	dir := clean(a.Path)

	var entries []fs.DirEntry
	complete := false
	for len(entries) < listScanMax {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		batch, err := f.ReadDir(min(1024, listScanMax-len(entries)))
		entries = append(entries, batch...)
		if err == io.EOF {
			complete = true
			break
		}
		if err != nil {
			return "", w.fail(a.Path, err)
		}
	}
	if len(entries) == 0 {
		return "(empty directory)", nil
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })

	var b strings.Builder
	for i, e := range entries[:min(len(entries), listMax)] {
		if i > 0 {
			b.WriteByte('\n')
		}
		p := join(dir, e.Name())
		b.WriteString(p)
		isDir := e.IsDir()
		if e.Type()&fs.ModeSymlink != 0 {
			// A link is shown as what it leads to when that is inside.
			if fi, err := w.root.Stat(p); err == nil {
				isDir = fi.IsDir()
			}
		}
		if isDir {
			b.WriteByte('/')
		}
	}
	switch more := len(entries) - listMax; {
	case !complete:
		fmt.Fprintf(&b, "\n[… at least %d more entries not shown]", max(more, 1))
	case more > 0:
		fmt.Fprintf(&b, "\n[… %d more entries not shown]", more)
	}
	return b.String(), nil
}

type readFile struct{ w *Workspace }

var _ Tool = readFile{}

func (readFile) Spec() Spec {
	return Spec{
		Name: "read_file",
		Description: "Read a text file of the workspace: at most limit bytes (default and maximum 65536; " +
			"a larger limit is lowered to 65536) from byte offset (default 0). When the file goes on, " +
			"the result ends with a line \"[… N more bytes; read on with offset=M]\": call again with " +
			"offset M to read the next part. Binary files and directories are refused. Read-only.",
		InputSchema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"path": {"type": "string", "description": "File relative to the workspace root."},
		"offset": {"type": "integer", "minimum": 0, "description": "Byte to start at; default 0."},
		"limit": {"type": "integer", "minimum": 1, "description": "Most bytes to return; default and maximum 65536."}
	},
	"required": ["path"],
	"additionalProperties": false
}`),
	}
}

func (t readFile) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Path   string `json:"path"`
		Offset *int64 `json:"offset"`
		Limit  *int64 `json:"limit"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", err
	}
	if a.Path == "" {
		return "", errors.New("argument \"path\" is required")
	}
	offset, limit := int64(0), int64(readMax)
	if a.Offset != nil {
		if offset = *a.Offset; offset < 0 {
			return "", fmt.Errorf("argument \"offset\" must not be negative, got %d", offset)
		}
	}
	if a.Limit != nil {
		if limit = *a.Limit; limit < 1 {
			return "", fmt.Errorf("argument \"limit\" must be at least 1, got %d", limit)
		}
		limit = min(limit, readMax)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}

	w := t.w
	f, fi, err := w.openRegular(clean(a.Path), a.Path)
	if err != nil {
		return "", err
	}
	defer f.Close()

	head := make([]byte, sniffLen)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return "", w.fail(a.Path, err)
	}
	if looksBinary(head[:n], n < sniffLen) {
		return "", fmt.Errorf("path %q is a binary file, not text", a.Path)
	}
	size := fi.Size()
	switch {
	case offset > size:
		return "", fmt.Errorf("offset %d is past the end of %q (%d bytes)", offset, a.Path, size)
	case size == 0:
		return "[empty file]", nil
	case offset == size:
		return fmt.Sprintf("[end of file: %q has %d bytes]", a.Path, size), nil
	}

	buf := make([]byte, min(limit, size-offset))
	n, err = f.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return "", w.fail(a.Path, err)
	}
	buf = buf[:n]
	end := offset + int64(n)
	if end < size {
		// Cut at a character, so the parts join up and each is valid text.
		if cut := trimPartialRune(buf); len(cut) > 0 {
			buf = cut
			end = offset + int64(len(buf))
		}
		return fmt.Sprintf("%s\n[… %d more bytes; read on with offset=%d]", buf, size-end, end), nil
	}
	return string(buf), nil
}

// looksBinary reports whether b, the start of a file (all of it when
// whole), is not text: it holds a NUL byte or is not UTF-8.
func looksBinary(b []byte, whole bool) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	if !whole {
		b = trimPartialRune(b)
	}
	return !utf8.Valid(b)
}

// trimPartialRune returns b without an incomplete UTF-8 sequence at its
// end, if it ends with one.
func trimPartialRune(b []byte) []byte {
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		if utf8.RuneStart(b[len(b)-k]) {
			if !utf8.FullRune(b[len(b)-k:]) {
				return b[:len(b)-k]
			}
			break
		}
	}
	return b
}

type searchFiles struct{ w *Workspace }

var _ Tool = searchFiles{}

func (searchFiles) Spec() Spec {
	return Spec{
		Name: "search_files",
		Description: "Search the text files under a path of the workspace (default: all of it) for a " +
			"regular expression (Go RE2 syntax, e.g. \"(?i)todo\" for case-insensitive), line by line. " +
			"Returns one line per matching line, \"path:line: text\", path relative to the workspace " +
			"root, text cut to 256 bytes around the match. Stops after 200 matches, 10000 files or " +
			"64 MiB read, and says so: then narrow the pattern or the path. Binary files, symbolic " +
			"links and .git directories are skipped. Read-only.",
		InputSchema: json.RawMessage(`{
	"type": "object",
	"properties": {
		"pattern": {"type": "string", "description": "Regular expression in Go RE2 syntax, matched against each line."},
		"path": {"type": "string", "description": "Directory or file relative to the workspace root; default \".\" (the root)."}
	},
	"required": ["pattern"],
	"additionalProperties": false
}`),
	}
}

// search is one search_files call's progress.
type search struct {
	w       *Workspace
	re      *regexp.Regexp
	out     strings.Builder
	matches int
	files   int
	bytes   int64
	stopped string // why the search stopped early, if it did
}

func (t searchFiles) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}
	if err := decodeArgs(args, &a); err != nil {
		return "", err
	}
	if a.Pattern == "" {
		return "", errors.New("argument \"pattern\" is required")
	}
	if len(a.Pattern) > searchMaxPattern {
		return "", fmt.Errorf("pattern is %d bytes; at most %d", len(a.Pattern), searchMaxPattern)
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return "", fmt.Errorf("bad pattern %q: %v", a.Pattern, err)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	w := t.w
	start := clean(a.Path)
	fi, err := w.root.Stat(start)
	if err != nil {
		return "", w.fail(a.Path, err)
	}

	s := &search{w: w, re: re}
	switch {
	case fi.IsDir():
		err = s.dir(ctx, start)
	case fi.Mode().IsRegular():
		err = s.file(ctx, start)
	default:
		return "", fmt.Errorf("path %q is not a regular file", a.Path)
	}
	if err != nil {
		return "", err
	}
	if s.stopped != "" {
		fmt.Fprintf(&s.out, "[… %s; narrow the pattern or the path]", s.stopped)
	}
	if s.matches == 0 && s.stopped == "" {
		return fmt.Sprintf("no matches (%d files read)", s.files), nil
	}
	return strings.TrimSuffix(s.out.String(), "\n"), nil
}

// dir searches the tree under the directory p, in name order. Entries
// are taken as the directory listing gives them: a symbolic link is not
// followed, so the walk never leaves the workspace nor loops. A directory
// or file that cannot be read is passed over; only ctx's error is
// returned.
func (s *search) dir(ctx context.Context, p string) error {
	f, err := s.w.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	entries, _ := f.ReadDir(-1) // on an error, what was read is searched
	f.Close()
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		q := join(p, e.Name())
		switch {
		case e.IsDir() && e.Name() != ".git":
			err = s.dir(ctx, q)
		case e.Type().IsRegular():
			if s.files >= s.w.maxFiles {
				s.stopped = fmt.Sprintf("stopped after reading %d files", s.files)
			} else {
				err = s.file(ctx, q)
			}
		}
		if err != nil || s.stopped != "" {
			return err
		}
	}
	return nil
}

// file searches the file at p. A file that cannot be opened, is not a
// regular file or is binary is passed over; only ctx's error is returned.
func (s *search) file(ctx context.Context, p string) error {
	if s.bytes >= s.w.maxBytes {
		s.stopped = fmt.Sprintf("stopped after reading %d bytes", s.bytes)
		return nil
	}
	f, fi, err := s.w.openRegular(p, p)
	if err != nil {
		return nil
	}
	defer f.Close()
	s.files++

	budget := s.w.maxBytes - s.bytes
	r := bufio.NewReaderSize(io.LimitReader(f, budget), searchLineScan)
	head, _ := r.Peek(sniffLen)
	if looksBinary(head, len(head) < sniffLen) {
		return nil
	}
	var read int64
	defer func() {
		s.bytes += read
		if read >= budget && fi.Size() > read {
			s.stopped = fmt.Sprintf("stopped after reading %d bytes", s.bytes)
		}
	}()
	for line := 1; ; line++ {
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		text, err := r.ReadSlice('\n')
		read += int64(len(text))
		if err == bufio.ErrBufferFull {
			// Only the start of a long line is searched; skip the rest.
			s.match(p, line, text)
			for err == bufio.ErrBufferFull {
				var rest []byte
				rest, err = r.ReadSlice('\n')
				read += int64(len(rest))
			}
			if s.stopped != "" {
				return nil
			}
		} else if len(text) > 0 {
			s.match(p, line, bytes.TrimSuffix(bytes.TrimSuffix(text, []byte("\n")), []byte("\r")))
			if s.stopped != "" {
				return nil
			}
		}
		if err != nil {
			return nil // io.EOF, or a read error: the file ends here
		}
	}
}

// match adds line n of file p to the result if it matches.
func (s *search) match(p string, n int, line []byte) {
	loc := s.re.FindIndex(line)
	if loc == nil {
		return
	}
	if s.matches == searchMaxMatches {
		s.stopped = fmt.Sprintf("stopped at %d matches", s.matches)
		return
	}
	s.matches++
	fmt.Fprintf(&s.out, "%s:%d: %s\n", p, n, excerpt(line, loc[0]))
}

// excerpt returns line cut to at most searchMaxLine bytes (plus the
// marks of the cuts) so that it shows the match starting at byte at.
func excerpt(line []byte, at int) string {
	if len(line) <= searchMaxLine {
		return strings.ToValidUTF8(string(line), "\uFFFD")
	}
	from := max(0, min(at-searchMaxLine/4, len(line)-searchMaxLine))
	for from > 0 && !utf8.RuneStart(line[from]) {
		from--
	}
	cut := trimPartialRune(line[from:min(from+searchMaxLine, len(line))])
	s := strings.ToValidUTF8(string(cut), "\uFFFD")
	if from > 0 {
		s = "…" + s
	}
	if from+len(cut) < len(line) {
		s += "…"
	}
	return s
}
