package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/baton-run/baton/mcptool"
)

// The counting tool: every node runs this command as an MCP server
// (baton-chaos mcp-count -ledger FILE -node NAME), whose one tool, record,
// appends "start KEY NODE TIME" to the ledger when called — "start KEY
// NODE TIME retry" when Baton says the call is a retry (mcptool.RetryMetaKey:
// the node that made it before died, or was cut off, before its result was
// stored) — and "end KEY NODE TIME" just before it returns (TIME in Unix
// milliseconds; the node and the time are for whoever reads a failure).
// The clients give each task's call a key of its own, so a key started
// again without the retry mark is a tool call done twice: Baton made a call
// it had already made, not knowing it. One started again with the mark is
// the call a fault cut short, made once more as the contract allows.

// mcpCommand is the first argument that runs the command as the server.
const mcpCommand = "mcp-count"

// toolName is the tool as a task's agent loop is offered it (NAME__TOOL).
const toolName = "count__record"

// serveCounter runs the MCP server on stdin and stdout until they close.
func serveCounter(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(mcpCommand, flag.ContinueOnError)
	ledger := fs.String("ledger", "", "file each call's start and end are appended to")
	node := fs.String("node", "-", "the node the server runs on, written on each line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ledger == "" {
		return errors.New("mcp-count: -ledger is required")
	}
	f, err := os.OpenFile(*ledger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("mcp-count: %w", err)
	}
	defer f.Close()
	var mu sync.Mutex // one line at a time
	write := func(what, key, mark string) error {
		mu.Lock()
		defer mu.Unlock()
		// One write of one line to an O_APPEND file: the nodes' servers
		// share the ledger without interleaving.
		_, err := fmt.Fprintf(f, "%s %s %s %d%s\n", what, key, *node, time.Now().UnixMilli(), mark)
		return err
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "baton-chaos-count", Version: "1"}, nil)
	schema := map[string]any{"type": "object", "properties": map[string]any{"key": map[string]any{"type": "string"}}, "required": []string{"key"}}
	s.AddTool(&mcp.Tool{Name: "record", Description: "Records that it ran, under the key given.", InputSchema: schema},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &a); err != nil || a.Key == "" || strings.ContainsAny(a.Key, " \n") {
				return nil, fmt.Errorf("record: want {\"key\": a word}")
			}
			mark := ""
			if retry, _ := req.Params.Meta[mcptool.RetryMetaKey].(bool); retry {
				mark = " retry"
			}
			if err := write("start", a.Key, mark); err != nil {
				return nil, err
			}
			if err := write("end", a.Key, ""); err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "recorded " + a.Key}}}, nil
		})
	return s.Run(ctx, &mcp.StdioTransport{})
}

// toolCounts is what the ledger says.
type toolCounts struct {
	Calls int `json:"calls"` // executions started
	Keys  int `json:"keys"`  // distinct calls
	// Repeated counts the executions of a call started again without the
	// retry mark: a call Baton had made already, made again not knowing
	// it — a tool call that returned, done twice.
	Repeated int `json:"repeated"`
	// Interrupted counts the executions started again with the retry
	// mark: the node that made the call died or was cut off before its
	// result was stored (the tool may have finished, but Baton never got
	// its result), and the node that took the run over made it once more,
	// telling the tool so. Allowed.
	Interrupted int `json:"interrupted"`
}

// countLedger reads a ledger.
func countLedger(r io.Reader) (toolCounts, error) {
	var c toolCounts
	type state struct{ running, ended bool }
	keys := map[string]*state{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			return c, fmt.Errorf("ledger: bad line %q", sc.Text())
		}
		what, key := fields[0], fields[1]
		k := keys[key]
		if k == nil {
			k = &state{}
			keys[key] = k
		}
		switch what {
		case "start":
			c.Calls++
			switch retry := len(fields) > 4 && fields[4] == "retry"; {
			case (k.ended || k.running) && retry:
				c.Interrupted++
			case k.ended || k.running:
				c.Repeated++
			}
			k.running = true
		case "end":
			k.running, k.ended = false, true
		default:
			return c, fmt.Errorf("ledger: bad line %q", sc.Text())
		}
	}
	c.Keys = len(keys)
	return c, sc.Err()
}
