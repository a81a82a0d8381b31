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

// RetryMetaKey is the key of a tools/call request's _meta that is true
// when the call is a retry (tool.Retry): the same call was sent before by
// a Baton process that died before its result came back, so it may have
// run. A server that changes the world can check for its effect first.
// The prefix is reverse DNS of Baton's home (github.com/baton-run), as the
// MCP spec asks of keys it does not define itself.
const RetryMetaKey = "io.github.baton-run/retry"

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
		tools = append(tools, &mcpTool{s: s, remote: t.Name, spec: tool.Spec{
			Name:        name,
			Description: cut(t.Description, s.m.opts.MaxDescription),
			InputSchema: schema,
			Confirm:     s.confirmAll || !s.trusted && !readOnly(t),
		}})
	}
	return tools
}

// readOnly reports whether a tool says it does not modify its environment
// (readOnlyHint:true). The MCP specification's defaults are readOnlyHint
// false and destructiveHint true: a tool that says nothing, or only that it
// is not destructive (its changes are additive), may still change the
// world, and asks first.
func readOnly(t *mcp.Tool) bool {
	return t.Annotations != nil && t.Annotations.ReadOnlyHint
}

// Spec describes the tool as its server listed it at startup.
func (t *mcpTool) Spec() tool.Spec {
	spec := t.spec
	spec.InputSchema = bytes.Clone(spec.InputSchema)
	return spec
}

// Call calls the tool on its server, restarting the server first if it has
// died (see server.session and server.lost).
//
// Its result and error are shown to the model and the client. When the
// server is down, cannot be started or dies during the call, the error says
// only that the tool is unavailable (ErrUnavailable): why (an exit status,
// the server's stderr, which may hold secrets such as a database URL) is
// logged, with the ids of tool.LogAttrs(ctx).
func (t *mcpTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' || !json.Valid(args) {
		return "", errors.New("the arguments must be a JSON object")
	}
	k := &call{tool: t.spec.Name, ids: tool.LogAttrs(ctx)}
	c, err := t.s.session(ctx)
	if err != nil {
		return "", t.failed(ctx, k, err)
	}
	res, err := t.send(ctx, c, k, args)
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
			return "", t.failed(ctx, k, err)
		}
		res, err = t.send(ctx, c, k, args)
	}
	if err != nil {
		var wire *jsonrpc.Error
		if errors.As(err, &wire) && ctx.Err() == nil && !t.s.isClosed() {
			// The server's own answer to the call (unknown tool, invalid
			// arguments): the tool's failure, as the server words it.
			return "", fmt.Errorf("mcp server %q refused the call of %s: %w", t.s.spec.Name, t.remote, err)
		}
		return "", t.failed(ctx, k, fmt.Errorf("no result, the connection to the server was lost: %w", err))
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

// send sends the call on c and waits for its answer. Until it has one, the
// call is on c's list of calls: if the connection ends meanwhile, or the
// call was cut by its end, the call is blamed for it (server.lost).
func (t *mcpTool) send(ctx context.Context, c *conn, k *call, args json.RawMessage) (*mcp.CallToolResult, error) {
	select {
	case <-c.proc.stdout.ended:
		// The server's output has ended (it died, or is dying): the call
		// would not reach it, and is not to be blamed for its end. Such a
		// call is not always refused by the SDK as unsent (a write can
		// still go into the pipe), hence this check.
		return nil, fmt.Errorf("%w: the server's output has ended", mcp.ErrConnectionClosed)
	default:
	}
	s := t.s
	s.mu.Lock()
	c.calls[k] = struct{}{}
	s.mu.Unlock()
	params := &mcp.CallToolParams{Name: t.remote, Arguments: args}
	if tool.Retry(ctx) {
		// The request's _meta is where MCP lets a client say more about
		// a call than its arguments (a server sees it in
		// CallToolRequest.Params.Meta); the key's prefix is ours, as the
		// spec asks of keys it does not define.
		params.Meta = mcp.Meta{RetryMetaKey: true}
	}
	res, err := c.cs.CallTool(ctx, params)
	var wire *jsonrpc.Error
	if err == nil || ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) || errors.As(err, &wire) {
		// Answered, abandoned by the caller, or never sent.
		s.mu.Lock()
		delete(c.calls, k)
		s.mu.Unlock()
	}
	return res, err
}

// ErrUnavailable is the error of a call whose MCP server is down, could not
// be started, or stopped during the call (errors.Is); its message names
// the tool and nothing else.
var ErrUnavailable = errors.New("unavailable: its server stopped; try again later")

// failed returns the error a caller sees for a call that got no answer
// because of err, and logs err, which may quote the server's stderr, with
// the call's ids.
func (t *mcpTool) failed(ctx context.Context, k *call, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case t.s.isClosed():
		return fmt.Errorf("mcp server %q: %w", t.s.spec.Name, errClosed)
	}
	t.s.log.Warn("mcp tool unavailable", append(k.ids, "tool", k.tool, "error", err.Error())...)
	return fmt.Errorf("tool %q is %w", t.spec.Name, ErrUnavailable)
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
