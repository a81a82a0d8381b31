package mcptool

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/baton-run/baton/tool"
)

func TestResultText(t *testing.T) {
	size := int64(12)
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{name: "empty", res: &mcp.CallToolResult{}, want: ""},
		{name: "texts joined", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "one"}, &mcp.TextContent{Text: "two"},
		}}, want: "one\ntwo"},
		{name: "image", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "here:"}, &mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 1234)},
		}}, want: "here:\n[image: image/png, 1234 bytes]"},
		{name: "audio without type", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.AudioContent{Data: make([]byte, 5)},
		}}, want: "[audio: unknown type, 5 bytes]"},
		{name: "resource link", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.ResourceLink{Name: "readme", URI: "file:///r.md", Size: &size},
		}}, want: "[resource link: readme file:///r.md]"},
		{name: "embedded text resource", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://1", Text: "hello"}},
		}}, want: "[resource: demo://1]\nhello"},
		{name: "embedded blob", res: &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "demo://2", MIMEType: "application/zip", Blob: make([]byte, 7)}},
		}}, want: "[resource: demo://2, application/zip, 7 bytes]"},
		{name: "structured only", res: &mcp.CallToolResult{StructuredContent: map[string]any{"b": 2, "a": 1}}, want: `{"a":1,"b":2}`},
		{name: "content wins over structured", res: &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "text"}},
			StructuredContent: map[string]any{"a": 1},
		}, want: "text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resultText(tt.res); got != tt.want {
				t.Fatalf("resultText = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestBuildTools(t *testing.T) {
	yes, no := true, false
	obj := map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}
	// What a server could list; a unit test's stand-in for a real server.
	listed := []*mcp.Tool{
		{Name: "read", Description: "Reads.", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "write", Description: strings.Repeat("é", 30), InputSchema: obj, Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		{Name: "mkdir", InputSchema: obj, Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}},
		{Name: "touch", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, Title: "Touch"}},
		{Name: "stat", InputSchema: obj, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &yes}},
		{Name: "no.dots", InputSchema: obj},
		{Name: "sp ace", InputSchema: obj},
		{Name: strings.Repeat("x", 61), InputSchema: obj}, // too long with "fs__"
		{Name: "huge", InputSchema: map[string]any{"description": strings.Repeat("y", 300)}},
		{Name: "read", InputSchema: obj}, // listed twice
		{Name: "bare"},
	}
	m := &Manager{opts: Options{MaxDescription: 21, MaxSchema: 200}.withDefaults()}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	tests := []struct {
		name       string
		confirmAll bool
		trusted    bool
		want       map[string]bool // offered name → Confirm
	}{
		// Only readOnlyHint:true runs without asking: not destructive
		// (mkdir) is not read-only, and a tool that says nothing (bare) is
		// destructive by the MCP specification's defaults.
		{name: "annotations", want: map[string]bool{"fs__read": false, "fs__write": true, "fs__mkdir": true,
			"fs__touch": true, "fs__stat": false, "fs__bare": true}},
		{name: "confirm all", confirmAll: true, want: map[string]bool{"fs__read": true, "fs__write": true, "fs__mkdir": true,
			"fs__touch": true, "fs__stat": true, "fs__bare": true}},
		{name: "trusted", trusted: true, want: map[string]bool{"fs__read": false, "fs__write": false, "fs__mkdir": false,
			"fs__touch": false, "fs__stat": false, "fs__bare": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &server{m: m, spec: Spec{Name: "fs", Command: "x"}, confirmAll: tt.confirmAll, trusted: tt.trusted, log: log}
			tools := s.buildTools(listed)
			if len(tools) != len(tt.want) {
				t.Fatalf("got %d tools, want %d", len(tools), len(tt.want))
			}
			for _, tl := range tools {
				spec := tl.Spec()
				confirm, ok := tt.want[spec.Name]
				if !ok {
					t.Fatalf("tool %q offered", spec.Name)
				}
				if spec.Confirm != confirm {
					t.Errorf("%s: Confirm = %v, want %v", spec.Name, spec.Confirm, confirm)
				}
				switch spec.Name {
				case "fs__read":
					if spec.Description != "Reads." || string(spec.InputSchema) != `{"properties":{"path":{"type":"string"}},"type":"object"}` {
						t.Errorf("fs__read: %q %s", spec.Description, spec.InputSchema)
					}
				case "fs__write":
					// 21 bytes: nine two-byte runes and the three-byte mark.
					if want := strings.Repeat("é", 9) + "…"; spec.Description != want {
						t.Errorf("fs__write: description %q, want %q", spec.Description, want)
					}
				case "fs__bare":
					if spec.InputSchema != nil {
						t.Errorf("fs__bare: schema %s, want none", spec.InputSchema)
					}
				}
			}
		})
	}
}

func TestCallRejectsNonObjectArguments(t *testing.T) {
	// No server: the arguments are refused before one is needed.
	tl := &mcpTool{remote: "echo", spec: tool.Spec{Name: "ev__echo"}}
	for _, args := range []string{`[1]`, `"x"`, `{"a":`, `3`} {
		_, err := tl.Call(t.Context(), json.RawMessage(args))
		if err == nil || !strings.Contains(err.Error(), "must be a JSON object") {
			t.Errorf("Call(%s) = %v, want an arguments error", args, err)
		}
	}
}
