package tool

import (
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
// An os.Root cannot see hard links: a file outside the directory linked
// into it is, to the root, a file inside. So a regular file with more
// than one link is refused by read_file and skipped (and counted) by
// list_files and search_files, unless WorkspaceOptions.AllowHardlinks
// says otherwise. The link count is read from the open file (fstat), so
// a link made between a check and the read is seen too.
//
// A Workspace is safe for concurrent use, and so are its tools.
type Workspace struct {
	root *os.Root
	// escapes is the error os.Root gives for a path that leaves it; os
	// does not export it, so OpenWorkspace captures it.
	escapes error
	// allowLinks is WorkspaceOptions.AllowHardlinks.
	allowLinks bool
	// maxFiles, maxBytes and maxWork bound one search (searchMaxFiles,
	// searchMaxBytes and searchMaxWork; tests lower them).
	maxFiles int
	maxBytes int64
	maxWork  int64
}

// WorkspaceOptions tune a Workspace. A nil *WorkspaceOptions means the
// defaults.
type WorkspaceOptions struct {
	// AllowHardlinks lets the tools read regular files that have more
	// than one hard link. A hard link may point outside the workspace
	// (whoever can create files in it can link any file they can read
	// elsewhere on the same file system into it): allow them only if
	// nobody untrusted can create links in the directory. Defaults to
	// false: such files are refused. On a system where the link count
	// cannot be read (other than Unix), OpenWorkspace fails unless it is
	// true.
	AllowHardlinks bool
}

// OpenWorkspace opens dir as a workspace. dir must be an existing
// directory; it is held open (not looked up again by name) until Close.
func OpenWorkspace(dir string, opts *WorkspaceOptions) (*Workspace, error) {
	if opts == nil {
		opts = &WorkspaceOptions{}
	}
	if !opts.AllowHardlinks && !linkCountKnown {
		return nil, errors.New("open workspace: hard links cannot be told apart on this system; allow them explicitly (AllowHardlinks) if nobody untrusted can create links in the directory")
	}
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
	w := &Workspace{root: root, allowLinks: opts.AllowHardlinks, maxFiles: searchMaxFiles, maxBytes: searchMaxBytes, maxWork: searchMaxWork}
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

// errHardlinked is the error of openRegular for a file with more than one
// hard link.
var errHardlinked = errors.New("more than one hard link")

// hardlinked reports whether fi, a regular file's, has more than one hard
// link and the workspace refuses such files.
func (w *Workspace) hardlinked(fi fs.FileInfo) bool {
	if w.allowLinks || !fi.Mode().IsRegular() {
		return false
	}
	n, ok := linkCount(fi)
	return !ok || n > 1 // unknown: refused
}

// openRegular opens p for reading if it is a regular file with one hard
// link (or the workspace allows more). O_NONBLOCK keeps a FIFO (perhaps
// swapped in after a check) from blocking the open.
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
	case w.hardlinked(fi):
		f.Close()
		return nil, nil, fmt.Errorf("path %q is not read: it has %w, and a hard link may lead outside the workspace", shown, errHardlinked)
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
	line := func(format string, args ...any) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, format, args...)
	}
	linked := 0
	for _, e := range entries[:min(len(entries), listMax)] {
		p := join(dir, e.Name())
		isDir := e.IsDir()
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			// A link is shown as what it leads to when that is inside.
			if fi, err := w.root.Stat(p); err == nil {
				isDir = fi.IsDir()
				if w.hardlinked(fi) {
					linked++
					continue
				}
			}
		case e.Type().IsRegular() && !w.allowLinks:
			if fi, err := w.root.Lstat(p); err == nil && w.hardlinked(fi) {
				linked++
				continue
			}
		}
		if isDir {
			p += "/"
		}
		line("%s", p)
	}
	if linked > 0 {
		line("[%s with more than one hard link not shown: a hard link may lead outside the workspace]", plural(linked, "file"))
	}
	switch more := len(entries) - listMax; {
	case !complete:
		line("[… at least %d more entries not shown]", max(more, 1))
	case more > 0:
		line("[… %d more entries not shown]", more)
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
