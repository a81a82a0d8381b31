package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/baton-run/baton/tool"
)

// separator joins a server's name and its tool's name.
const separator = "__"

// mcpTool is one tool of an MCP server, offered as NAME__TOOL.
type mcpTool struct {
	s      *server
	remote string // the tool's name on its server
	spec   tool.Spec
}

var _ tool.Tool = (*mcpTool)(nil)

// buildTools turns a server's tool list into the tools offered, skipping
// (with a warning) those a model could not call or whose schema is too
// large.
func (s *server) buildTools(listed []*mcp.Tool) []tool.Tool {
	var tools []tool.Tool
	seen := make(map[string]bool, len(listed))
	for _, t := range listed {
		name := s.spec.Name + separator + t.Name
		if !tool.ValidName(name) {
			s.log.Warn("mcp tool skipped: its name is not a valid function name (1–64 letters, digits, '_' or '-')",
				"tool", t.Name, "name", name)
			continue
		}
		if seen[name] {
			s.log.Warn("mcp tool skipped: listed twice", "tool", t.Name)
			continue
		}
		var schema json.RawMessage
		if t.InputSchema != nil {
			b, err := json.Marshal(t.InputSchema)
			if err != nil {
				s.log.Warn("mcp tool skipped: its input schema does not encode", "tool", t.Name, "error", err.Error())
				continue
			}
			if len(b) > s.m.opts.MaxSchema {
				s.log.Warn("mcp tool skipped: its input schema is too large", "tool", t.Name,
					"bytes", len(b), "limit", s.m.opts.MaxSchema)
				continue
			}
			schema = b
		}
		seen[name] = true
		destructive := t.Annotations != nil && t.Annotations.DestructiveHint != nil && *t.Annotations.DestructiveHint
		tools = append(tools, &mcpTool{s: s, remote: t.Name, spec: tool.Spec{
			Name:        name,
			Description: cut(t.Description, s.m.opts.MaxDescription),
			InputSchema: schema,
			Confirm:     s.confirmAll || destructive,
		}})
	}
	return tools
}

// Spec describes the tool as its server listed it at startup.
func (t *mcpTool) Spec() tool.Spec {
	spec := t.spec
	spec.InputSchema = bytes.Clone(spec.InputSchema)
	return spec
}

// Call calls the tool on its server, restarting the server first if it has
// died (see server.session).
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return "", errors.New("the arguments must be a JSON object")
	}
	c, err := t.s.session(ctx)
	if err != nil {
		return "", err
	}
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: t.remote, Arguments: args})
	if errors.Is(err, mcp.ErrConnectionClosed) && ctx.Err() == nil && !t.s.isClosed() {
		// The connection had ended before the call was sent (the SDK sends
		// nothing on a closing connection), and the server is not marked
		// down yet: once it is, the call goes again, which restarts it.
		select {
		case <-c.gone:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if c, err = t.s.session(ctx); err != nil {
			return "", err
		}
		res, err = c.cs.CallTool(ctx, &mcp.CallToolParams{Name: t.remote, Arguments: args})
	}
	if err != nil {
		var wire *jsonrpc.Error
		switch {
		case ctx.Err() != nil:
			return "", ctx.Err()
		case t.s.isClosed():
			return "", fmt.Errorf("mcp server %q: %w", t.s.spec.Name, errClosed)
		case errors.As(err, &wire):
			return "", fmt.Errorf("mcp server %q refused the call of %s: %w", t.s.spec.Name, t.remote, err)
		default:
			return "", fmt.Errorf("mcp server %q: no result from %s, the connection to the server was lost (the next call restarts it): %w",
				t.s.spec.Name, t.remote, err)
		}
	}
	text := resultText(res)
	if res.IsError {
		if text == "" {
			text = "the tool failed without saying why"
		}
		return "", errors.New(text)
	}
	return text, nil
}

// resultText joins the text of a result's content, describing briefly what
// is not text. A result with only structured content gives its JSON.
func resultText(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes]", orUnknown(c.MIMEType), len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link: %s %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			parts = append(parts, embeddedText(c.Resource))
		default:
			parts = append(parts, fmt.Sprintf("[%T content]", c))
		}
	}
	return strings.Join(parts, "\n")
}

func embeddedText(r *mcp.ResourceContents) string {
	switch {
	case r == nil:
		return "[resource]"
	case r.Blob != nil:
		return fmt.Sprintf("[resource: %s, %s, %d bytes]", r.URI, orUnknown(r.MIMEType), len(r.Blob))
	default:
		return fmt.Sprintf("[resource: %s]\n%s", r.URI, r.Text)
	}
}

func orUnknown(mime string) string {
	if mime == "" {
		return "unknown type"
	}
	return mime
}

// cut returns s cut to at most n bytes on a rune boundary, marked with "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	end := max(n-len(mark), 0)
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + mark
}
