package mcptool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/baton-run/baton/mcptool"
)

func ExampleParseSpec() {
	spec, err := mcptool.ParseSpec(`fs=npx -y @modelcontextprotocol/server-filesystem "/srv/my files"`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s %q\n", spec.Command, spec.Args)
	// Output: npx ["-y" "@modelcontextprotocol/server-filesystem" "/srv/my files"]
}

// Start the servers of --mcp and --mcp-confirm, and offer their tools. (Not
// run as a test: it needs npx and the network.)
func ExampleStart() {
	spec, err := mcptool.ParseSpec("fs=npx -y @modelcontextprotocol/server-filesystem /tmp")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := mcptool.Start(ctx, []mcptool.Spec{spec}, mcptool.Options{
		Confirm: []string{"fs"},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	for _, t := range m.Tools() {
		if t.Spec().Name != "fs__list_allowed_directories" {
			continue
		}
		out, err := t.Call(ctx, json.RawMessage(`{}`))
		fmt.Println(out, err)
	}
}
