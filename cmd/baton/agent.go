package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/baton-run/baton/mcptool"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/tool"
)

// agentConfig is what the flags say about each task's agent loop (§10).
type agentConfig struct {
	workspace  string
	hardlinks  bool // --workspace-allow-hardlinks
	mcp        []mcptool.Spec
	mcpConfirm string
	mcpTrust   []string
}

// agentFlags declares the agent loop's flags on fs, filling l and a.
func agentFlags(fs *flag.FlagSet, l *solver.Loop, a *agentConfig) {
	fs.IntVar(&l.MaxRounds, "max-rounds", 8, "most model calls in one execution of a task (the last offers no tools)")
	fs.IntVar(&l.ToolResultLimit, "tool-result-limit", 16<<10, "longest tool result in bytes; longer is cut with a marker")
	fs.IntVar(&l.MaxContextBytes, "max-context-bytes", 128<<10, "budget of the conversation sent to the model; past it the oldest tool results are elided")
	fs.DurationVar(&l.ToolTimeout, "tool-timeout", time.Minute, "longest one tool call may take (not counting the user's answer)")
	fs.IntVar(&l.TodoCompleteAfter, "todo-complete-after", 3, "successful tool calls that complete the active todo item")
	fs.IntVar(&l.TodoBlockAfter, "todo-block-after", 2, "consecutive failed tool calls that block the active todo item")
	fs.StringVar(&a.workspace, "workspace", "", "directory the read-only workspace tools (list_files, read_file, search_files) may read")
	fs.BoolVar(&a.hardlinks, "workspace-allow-hardlinks", false, "let the workspace tools read files with more than one hard link: a hardlink may point outside the workspace; allow only if nobody untrusted can create links in it")
	fs.Func("mcp", "an MCP server whose tools every task is offered, as NAME=COMMAND [ARGS…] (stdio; repeatable; tools named NAME__TOOL)", func(v string) error {
		spec, err := mcptool.ParseSpec(v)
		if err != nil {
			return err
		}
		a.mcp = append(a.mcp, spec)
		return nil
	})
	fs.StringVar(&a.mcpConfirm, "mcp-confirm", "", "comma-separated --mcp server NAMEs whose every tool call the user approves first, read-only tools too")
	fs.Func("mcp-trust", "an --mcp server NAME that runs this server's tools without asking (comma-separated or repeatable); without it only tools annotated readOnlyHint run without asking", func(v string) error {
		a.mcpTrust = append(a.mcpTrust, names(v)...)
		return nil
	})
}

// names splits a comma-separated list of names, dropping empty ones.
func names(v string) []string {
	var out []string
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

// tools opens what the flags offer to every task besides the built-in
// tools: the workspace, and the MCP servers, started under ctx and logged
// to log. The returned closer releases them.
func tools(ctx context.Context, a agentConfig, log *slog.Logger) (*tool.Set, io.Closer, error) {
	set := &tool.Set{}
	var closers multiCloser
	if len(a.mcp) > 0 {
		opts := mcptool.Options{Confirm: names(a.mcpConfirm), Trust: a.mcpTrust, Logger: log}
		m, err := mcptool.Start(ctx, a.mcp, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("--mcp: %w", err)
		}
		closers = append(closers, m)
		if err := set.Add(m.Tools()...); err != nil {
			closers.Close()
			return nil, nil, fmt.Errorf("--mcp: %w", err)
		}
		log.Info("mcp tools", "servers", len(a.mcp), "tools", len(m.Tools()))
	} else if a.mcpConfirm != "" {
		return nil, nil, errors.New("--mcp-confirm: names no --mcp server")
	} else if len(a.mcpTrust) > 0 {
		return nil, nil, errors.New("--mcp-trust: names no --mcp server")
	}
	if a.workspace != "" {
		ws, err := tool.OpenWorkspace(a.workspace, &tool.WorkspaceOptions{AllowHardlinks: a.hardlinks})
		if err != nil {
			return nil, nil, fmt.Errorf("--workspace: %w", err)
		}
		closers = append(closers, ws)
		if err := set.Add(ws.Tools()...); err != nil {
			closers.Close() // the names clash with an MCP server's
			return nil, nil, fmt.Errorf("--workspace: %w", err)
		}
	}
	return set, closers, nil
}

// waitCalls waits, for closeGrace at most or until by when it is set,
// for the tool calls the agent loop abandoned at their timeout or cancel
// (a tool that did not obey it) to end, before the tools are closed.
func waitCalls(log *slog.Logger, calls *tool.Group, by *time.Time) {
	end := time.Now().Add(closeGrace)
	if !by.IsZero() {
		end = *by
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	if n := calls.Abandoned(); n > 0 {
		log.Info("waiting for abandoned tool calls", "calls", n)
	}
	if err := calls.Wait(ctx); err != nil {
		log.Warn("tool calls still running at exit", "err", err)
	}
}

// multiCloser closes each of its closers, last first.
type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var errs []error
	for i := len(m) - 1; i >= 0; i-- {
		errs = append(errs, m[i].Close())
	}
	return errors.Join(errs...)
}
