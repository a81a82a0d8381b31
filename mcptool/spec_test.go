package mcptool

import (
	"slices"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  Spec
		err   string // a part of the error; "" for none
	}{
		{name: "npx", value: "fs=npx -y @modelcontextprotocol/server-filesystem /tmp",
			want: Spec{Name: "fs", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"}}},
		{name: "command only", value: "ev=mcp-server", want: Spec{Name: "ev", Command: "mcp-server", Args: []string{}}},
		{name: "extra whitespace", value: " my-srv_2 =  node\t server.js  ", want: Spec{Name: "my-srv_2", Command: "node", Args: []string{"server.js"}}},
		{name: "single quotes", value: `fs=cmd 'a b' 'it''s'`, want: Spec{Name: "fs", Command: "cmd", Args: []string{"a b", "its"}}},
		{name: "double quotes", value: `fs=cmd "a b" "say \"hi\"" "c:\dir"`, want: Spec{Name: "fs", Command: "cmd", Args: []string{"a b", `say "hi"`, `c:\dir`}}},
		{name: "backslash", value: `fs=cmd a\ b \'`, want: Spec{Name: "fs", Command: "cmd", Args: []string{"a b", "'"}}},
		{name: "empty quoted arguments", value: `fs=cmd '' ""`, want: Spec{Name: "fs", Command: "cmd", Args: []string{"", ""}}},
		{name: "mixed quoting in a word", value: `fs=cmd --dir='/a b'/c"d e"`, want: Spec{Name: "fs", Command: "cmd", Args: []string{"--dir=/a b/cd e"}}},
		{name: "equals in the command", value: "fs=env A=1 cmd", want: Spec{Name: "fs", Command: "env", Args: []string{"A=1", "cmd"}}},
		{name: "no equals", value: "npx server", err: `mcp server "npx server": want NAME=COMMAND`},
		{name: "empty name", value: "=npx", err: "empty NAME"},
		{name: "no command", value: "fs=", err: `mcp server "fs=": no command`},
		{name: "blank command", value: "fs=   ", err: "no command"},
		{name: "empty quoted command", value: "fs=''", err: "no command"},
		{name: "double underscore", value: "my__fs=npx", err: `contains "__"`},
		{name: "trailing underscore", value: "fs_=npx", err: "ends with '_'"},
		{name: "dot in name", value: "my.fs=npx", err: "not '.'"},
		{name: "space in name", value: "my fs=npx", err: "not ' '"},
		{name: "long name", value: strings.Repeat("a", 62) + "=npx", err: "longer than 61 bytes"},
		{name: "unterminated single quote", value: "fs=cmd 'a b", err: "unterminated single quote"},
		{name: "unterminated double quote", value: `fs=cmd "a b\"`, err: "unterminated double quote"},
		{name: "trailing backslash", value: `fs=cmd a\`, err: "trailing backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSpec(tt.value)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseSpec(%q) = %+v, %v; want an error with %q", tt.value, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSpec(%q): %v", tt.value, err)
			}
			if got.Name != tt.want.Name || got.Command != tt.want.Command || !slices.Equal(got.Args, tt.want.Args) {
				t.Fatalf("ParseSpec(%q) = %#v, want %#v", tt.value, got, tt.want)
			}
			// String gives a value that parses back to the same spec.
			again, err := ParseSpec(got.String())
			if err != nil || again.Name != got.Name || again.Command != got.Command || !slices.Equal(again.Args, got.Args) {
				t.Fatalf("ParseSpec(%q) = %#v, %v; want %#v", got.String(), again, err, got)
			}
		})
	}
}
