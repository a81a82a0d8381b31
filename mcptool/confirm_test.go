//go:build unix

package mcptool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// everythingReadOnly are the tools of the pinned server-everything
// annotated readOnlyHint:true.
var everythingReadOnly = map[string]bool{"echo": true, "get-annotated-message": true, "get-env": true,
	"get-resource-links": true, "get-resource-reference": true, "get-roots-list": true,
	"get-structured-content": true, "get-sum": true, "get-tiny-image": true, "trigger-long-running-operation": true}

func TestConfirm(t *testing.T) {
	dir := t.TempDir()
	m := startManager(t, []Spec{filesystemSpec(t, dir), everythingSpec(t)}, Options{Confirm: []string{"ev"}})
	// server-filesystem's tools that change files: destructiveHint:true
	// (write, edit, move) or false (create_directory: not destructive, but
	// not read-only either).
	changes := map[string]bool{"fs__write_file": true, "fs__edit_file": true, "fs__move_file": true, "fs__create_directory": true}
	var fs, ev int
	for _, tl := range m.Tools() {
		spec := tl.Spec()
		switch {
		case strings.HasPrefix(spec.Name, "fs__"):
			fs++
			if spec.Confirm != changes[spec.Name] {
				t.Errorf("%s: Confirm = %v, want %v (not readOnlyHint)", spec.Name, spec.Confirm, changes[spec.Name])
			}
		case strings.HasPrefix(spec.Name, "ev__"):
			ev++
			if !spec.Confirm {
				t.Errorf("%s: Confirm = false, but its server is in Options.Confirm", spec.Name)
			}
		}
	}
	if fs < 10 || ev < 10 {
		t.Fatalf("%d fs tools and %d ev tools", fs, ev)
	}
	// The servers' tools come server by server, in the order of the specs.
	if first := m.Tools()[0].Spec().Name; !strings.HasPrefix(first, "fs__") {
		t.Errorf("first tool %q, want one of fs", first)
	}
	// A confirmed tool is called like any other (asking is the loop's job).
	file := filepath.Join(dir, "note.txt")
	if _, err := callTool(t, findTool(t, m, "fs__write_file"), `{"path":"`+file+`","content":"written"}`); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "written" {
		t.Fatalf("file: %q, %v", b, err)
	}
}
