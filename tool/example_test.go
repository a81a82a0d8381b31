package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/baton-run/baton/tool"
)

func ExampleOpenWorkspace() {
	dir, err := os.MkdirTemp("", "workspace")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello, workspace\n"), 0o644); err != nil {
		log.Fatal(err)
	}

	ws, err := tool.OpenWorkspace(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ws.Close()
	var tools tool.Set
	if err := tools.Add(ws.Tools()...); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	read, _ := tools.Get("read_file")
	text, err := read.Call(ctx, json.RawMessage(`{"path":"notes.txt"}`))
	fmt.Printf("%q %v\n", text, err)
	_, err = read.Call(ctx, json.RawMessage(`{"path":"../notes.txt"}`))
	fmt.Println(err)
	search, _ := tools.Get("search_files")
	text, err = search.Call(ctx, json.RawMessage(`{"pattern":"w\\w+"}`))
	fmt.Println(text, err)
	// Output:
	// "hello, workspace\n" <nil>
	// path "../notes.txt" is outside the workspace
	// notes.txt:1: hello, workspace <nil>
}
