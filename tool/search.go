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
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"
)

// search_files's bounds. Go's regexp is linear in the input, but its
// constant is the size of the compiled pattern: one match call costs up
// to bytes × instructions × some ns (5–35 ns measured on a 2-core
// machine, idle to busy, some 30 times that under the race detector), so
// (.*){1000}x (4003 instructions) over a 64 KiB line took over a second.
// The bounds keep one match call to tens of milliseconds (searchCallWork:
// a line is searched in its first searchLineScan bytes, fewer for a large
// pattern) and a whole call to a few seconds, ten on a busy machine
// (searchMaxWork), and ctx is looked at every searchCheckWork of that
// work, so a call ends soon after its deadline or cancel whatever it was
// given.
const (
	searchMaxMatches = 200      // matching lines a search_files result shows
	searchMaxLine    = 256      // bytes shown of one matching line
	searchMaxFiles   = 10_000   // files search_files reads in one call
	searchMaxBytes   = 64 << 20 // bytes search_files reads in one call
	searchLineScan   = 16 << 10 // bytes of one line that are searched (one match call), at most
	searchCallWork   = 2 << 20  // bytes × instructions of one match call, at most
	searchMaxPattern = 4 << 10  // bytes of a pattern
	searchMaxInst    = 1000     // instructions of a compiled pattern
	searchMaxWork    = 1 << 28  // bytes searched × instructions in one call
	searchCheckWork  = 2 << 20  // bytes read, or searched × instructions, between two looks at ctx
)

type searchFiles struct{ w *Workspace }

var _ Tool = searchFiles{}

func (searchFiles) Spec() Spec {
	return Spec{
		Name: "search_files",
		Description: "Search the text files under a path of the workspace (default: all of it) for a " +
			"regular expression (Go RE2 syntax, e.g. \"(?i)todo\" for case-insensitive), line by line. " +
			"Returns one line per matching line, \"path:line: text\", path relative to the workspace " +
			"root, text cut to 256 bytes around the match. Only the first 16384 bytes of a line are " +
			"searched (fewer for a complex pattern). Stops after 200 matches, 10000 files or 64 MiB read (less for a complex " +
			"pattern), and says so: then narrow the pattern or the path. A pattern that compiles to " +
			"more than 1000 instructions (large repetitions like (.*){500}) is refused. Binary files, " +
			"symbolic links, files with more than one hard link and .git directories are skipped. Read-only.",
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

// compilePattern compiles a search pattern, refusing one too long or
// whose program has more than searchMaxInst instructions. It returns the
// program's size too.
func compilePattern(pattern string) (*regexp.Regexp, int, error) {
	if len(pattern) > searchMaxPattern {
		return nil, 0, fmt.Errorf("pattern is %d bytes; at most %d", len(pattern), searchMaxPattern)
	}
	// regexp.Compile parses with syntax.Perl and compiles the simplified
	// tree: the same program it will run.
	parsed, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, 0, fmt.Errorf("bad pattern %q: %v", pattern, err)
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return nil, 0, fmt.Errorf("bad pattern %q: %v", pattern, err)
	}
	if n := len(prog.Inst); n > searchMaxInst {
		return nil, 0, fmt.Errorf("pattern %q is too complex to search with: it compiles to %d instructions, at most %d "+
			"(large counted repetitions such as (.*){100} or .{0,500} make it large); simplify it", pattern, n, searchMaxInst)
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, 0, fmt.Errorf("bad pattern %q: %v", pattern, err)
	}
	return re, len(prog.Inst), nil
}

// search is one search_files call's progress.
type search struct {
	w       *Workspace
	re      *regexp.Regexp
	insts   int64 // the size of re's program
	scan    int   // bytes of a line that are searched: searchLineScan or fewer
	out     strings.Builder
	matches int
	files   int
	bytes   int64  // read
	work    int64  // bytes searched × insts
	pending int64  // work and bytes read since ctx was last looked at
	cut     int    // lines longer than scan, searched only in part
	linked  int    // files skipped for having more than one hard link
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
	re, insts, err := compilePattern(a.Pattern)
	if err != nil {
		return "", err
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

	insts = max(insts, 1)
	s := &search{w: w, re: re, insts: int64(insts), scan: min(searchLineScan, searchCallWork/insts)}
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
	return s.result(), nil
}

// result is what the search found, with notes on what it left out.
func (s *search) result() string {
	var notes []string
	if s.cut > 0 {
		notes = append(notes, fmt.Sprintf("[%s longer than %d bytes: only the first %d bytes of each were searched]",
			plural(s.cut, "line"), s.scan, s.scan))
	}
	if s.linked > 0 {
		notes = append(notes, fmt.Sprintf("[%s with more than one hard link skipped: a hard link may lead outside the workspace]", plural(s.linked, "file")))
	}
	if s.stopped != "" {
		notes = append(notes, fmt.Sprintf("[… %s; narrow the pattern or the path]", s.stopped))
	}
	text := strings.TrimSuffix(s.out.String(), "\n")
	if s.matches == 0 && s.stopped == "" {
		text = fmt.Sprintf("no matches (%d files read)", s.files)
	}
	return strings.Join(slices.DeleteFunc(append([]string{text}, notes...), func(l string) bool { return l == "" }), "\n")
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
// regular file, has more than one hard link or is binary is passed over;
// only ctx's error is returned.
func (s *search) file(ctx context.Context, p string) error {
	if s.bytes >= s.w.maxBytes {
		s.stopped = fmt.Sprintf("stopped after reading %d bytes", s.bytes)
		return nil
	}
	f, fi, err := s.w.openRegular(p, p)
	if errors.Is(err, errHardlinked) {
		s.linked++
	}
	if err != nil {
		return nil
	}
	defer f.Close()
	s.files++

	budget := s.w.maxBytes - s.bytes
	// One more byte than is searched: a line of s.scan bytes and its
	// newline are read whole.
	r := bufio.NewReaderSize(io.LimitReader(f, budget), s.scan+1)
	head, _ := r.Peek(sniffLen)
	if looksBinary(head, len(head) < sniffLen) {
		return nil
	}
	var read int64
	defer func() {
		s.bytes += read
		if read >= budget && fi.Size() > read && s.stopped == "" {
			s.stopped = fmt.Sprintf("stopped after reading %d bytes", s.bytes)
		}
	}()
	for line := 1; ; line++ {
		text, err := r.ReadSlice('\n')
		read += int64(len(text))
		s.pending += int64(len(text))
		if err == bufio.ErrBufferFull {
			// Only the start of a long line is searched; skip the rest.
			s.cut++
			s.match(p, line, text[:s.scan])
			for err == bufio.ErrBufferFull {
				var rest []byte
				rest, err = r.ReadSlice('\n')
				read += int64(len(rest))
				s.pending += int64(len(rest))
			}
		} else if len(text) > 0 {
			s.match(p, line, bytes.TrimSuffix(bytes.TrimSuffix(text, []byte("\n")), []byte("\r")))
		}
		if s.stopped != "" {
			return nil
		}
		if s.pending >= searchCheckWork {
			s.pending = 0
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err != nil {
			return nil // io.EOF, or a read error: the file ends here
		}
	}
}

// match adds line n of file p to the result if it matches, unless that
// would take the search past its work bound.
func (s *search) match(p string, n int, line []byte) {
	work := int64(len(line)) * s.insts
	if s.work+work > s.w.maxWork {
		s.stopped = fmt.Sprintf("stopped after searching %d bytes, the most for a pattern of this size", s.work/s.insts)
		return
	}
	s.work += work
	s.pending += work
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

// plural returns "1 line", "2 lines".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
