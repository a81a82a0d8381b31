// Package mcptest is a small MCP server (stdio) for tests that need a
// server to behave in a way no npm server does: tools with exactly chosen
// annotations, or a server that writes a secret to its stderr and crashes.
// It runs as the test binary itself: a package's TestMain calls Main
// first, and Command gives the command line that starts the binary as the
// server.
package mcptest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// marker is the first argument of a test binary started as the server.
const marker = "baton-mcptest-server"

// Secret is what the server writes to its stderr when it crashes, as a
// server would print its database URL: no client may ever see it.
const Secret = "postgres://u:SECRET-7f3a@db/x"

// Main runs the server and exits if the binary was started by Command's
// command line; otherwise it returns at once. Call it first in TestMain.
func Main() {
	if len(os.Args) < 2 || os.Args[1] != marker {
		return
	}
	if err := serve(os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Command returns the program and arguments that start this test binary as
// the server, with its flags:
//
//	-tools consent   the tools unannotated, not_read_only (readOnlyHint
//	                 false), not_destructive (destructiveHint false) and
//	                 read_only (readOnlyHint true); each appends its name
//	                 and a newline to the -ran file and returns "ran NAME"
//	-tools db        query {sql}, annotated read-only: returns "rows for
//	                 SQL"; the sql "crash" makes the server write Secret to
//	                 its stderr and exit with status 3
//	-tools count     count {n}, annotated read-only: each execution
//	                 appends "N RETRY" to the -ran file (RETRY is true when
//	                 the request's _meta says the call is a retry,
//	                 mcptool.RetryMetaKey), then returns "counted N"; with
//	                 -gate DIR, a file DIR/hold-before-N or DIR/hold-after-N
//	                 makes the call hold before or after it appends its
//	                 line: it removes the file (the next call goes
//	                 through), creates DIR/held-N and waits until the call
//	                 is cancelled or the server's client is gone
//	-crash-file F    (db) the crash creates F first, and a server that
//	                 finds F at its start writes Secret to its stderr and
//	                 exits with status 1 before the MCP handshake: a server
//	                 that keeps crashing
func Command(t testing.TB, flags ...string) (string, []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe, append([]string{marker}, flags...)
}

func serve(args []string) error {
	fs := flag.NewFlagSet(marker, flag.ContinueOnError)
	tools := fs.String("tools", "", "consent or db")
	ran := fs.String("ran", "", "file each consent tool appends its name to")
	crashFile := fs.String("crash-file", "", "file the crash creates; found at start, the server crashes again")
	gate := fs.String("gate", "", "directory of hold-before-N and hold-after-N files (count)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *crashFile != "" {
		if _, err := os.Stat(*crashFile); err == nil {
			crash(1)
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	obj := map[string]any{"type": "object"}
	no := false
	switch *tools {
	case "consent":
		for _, t := range []*mcp.Tool{
			{Name: "unannotated", Description: "Says nothing of what it does."},
			{Name: "not_read_only", Description: "Not read-only.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false}},
			{Name: "not_destructive", Description: "Changes things, additively.", Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
			{Name: "read_only", Description: "Only reads.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		} {
			t.InputSchema = obj
			name := t.Name
			s.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				if err := appendLine(*ran, name); err != nil {
					return nil, err
				}
				return text("ran " + name), nil
			})
		}
	case "db":
		s.AddTool(&mcp.Tool{Name: "query", Description: "Runs a query.", InputSchema: obj,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var a struct {
					SQL string `json:"sql"`
				}
				if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
					return nil, err
				}
				if a.SQL == "crash" {
					if *crashFile != "" {
						if err := os.WriteFile(*crashFile, nil, 0o644); err != nil {
							return nil, err
						}
					}
					crash(3)
				}
				return text("rows for " + a.SQL), nil
			})
	case "count":
		s.AddTool(&mcp.Tool{Name: "count", Description: "Counts.", InputSchema: obj,
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var a struct {
					N int `json:"n"`
				}
				if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
					return nil, err
				}
				// The key is mcptool.RetryMetaKey, spelt out: mcptool's
				// tests import this package.
				retry, _ := req.Params.Meta["io.github.baton-run/retry"].(bool)
				if hold(ctx, *gate, "before", a.N) {
					return nil, ctx.Err() // cancelled before it counted: it did not run
				}
				if err := appendLine(*ran, fmt.Sprintf("%d %t", a.N, retry)); err != nil {
					return nil, err
				}
				hold(ctx, *gate, "after", a.N)
				return text(fmt.Sprintf("counted %d", a.N)), nil
			})
	default:
		return errors.New("-tools: want consent, db or count")
	}
	return s.Run(context.Background(), &mcp.StdioTransport{})
}

// crash writes Secret to stderr, as a server that cannot reach its
// database would, and exits.
func crash(status int) {
	fmt.Fprintf(os.Stderr, "fatal: lost connection to %s (DATABASE_URL)\n", Secret)
	os.Exit(status)
}

// hold holds a count call while ctx lasts if the test asked for it
// (DIR/hold-WHEN-N), once, and says so (DIR/held-N). It reports whether it
// held the call.
func hold(ctx context.Context, dir, when string, n int) bool {
	if dir == "" {
		return false
	}
	if err := os.Remove(filepath.Join(dir, fmt.Sprintf("hold-%s-%d", when, n))); err != nil {
		return false // not asked for
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("held-%d", n)), nil, 0o644); err != nil {
		return true
	}
	<-ctx.Done() // cancelled, or the client is gone: the connection's end cancels its calls
	return true
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func appendLine(path, line string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
