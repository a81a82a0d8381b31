package web

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/npmtest"
)

// A TypeScript program that uses the client's types the way the README's
// example does; bad is one that misuses them, which tsc must refuse — had
// it not found the declarations, the error would be TS7016 instead.
const (
	typedUse = `
const client = new BatonClient({ url: "ws://localhost:8080/ws", storage: null });
let tasks = 0;
client.on("state", (state: State) => { if (state.phase === "solving") tasks = state.run?.tasks.length ?? 0; });
client.on("connection", (c: ConnectionState, detail: string) => { if (c === "CONNECTED") tasks += detail.length; });
const ready: Promise<void> = client.connect();
const sent: boolean = client.sendMessage("Plan a weekend trip to Lisbon");
void ready; void sent; void tasks;
`
	typedMisuse = typedUse + "const wrong: number = client.connect();\n"
)

// TestClientTypes checks with a real tsc (pinned in internal/npmtest) that
// TypeScript finds the declarations where the README puts them —
// baton-client.d.mts beside baton-client.mjs, or the two saved under the
// .js and .d.ts names Baton also serves them as — and that they compile
// under --strict with no DOM types, as in a Node project.
func TestClientTypes(t *testing.T) {
	nodeBin(t)
	tsc := filepath.Join(npmtest.Modules(t), "typescript", "bin", "tsc")
	srv := startServer(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := newProject(ctx, t, func(dir string) error {
		if err := copyFromClone(dir); err != nil {
			return err
		}
		return download(srv.URL, "baton-client.js", "baton-client.d.ts")(dir)
	})
	const imports = "import { BatonClient, type State, type ConnectionState } from "
	tests := []struct {
		name, file, source string
		flags              []string
		wantError          string // "" when tsc must pass
	}{
		{"an ES module importing baton-client.mjs (nodenext)", "main.mts",
			imports + `"./baton-client.mjs";` + typedUse, []string{"--module", "nodenext"}, ""},
		{"the same under node16", "main.mts",
			imports + `"./baton-client.mjs";` + typedUse, []string{"--module", "node16"}, ""},
		{"a bundler's project importing baton-client.mjs", "bundled.ts",
			imports + `"./baton-client.mjs";` + typedUse, []string{"--module", "esnext", "--moduleResolution", "bundler"}, ""},
		{"a bundler's project importing the .js name", "bundledjs.ts",
			imports + `"./baton-client.js";` + typedUse, []string{"--module", "esnext", "--moduleResolution", "bundler"}, ""},
		{"the types are applied", "misuse.mts",
			imports + `"./baton-client.mjs";` + typedMisuse, []string{"--module", "nodenext"}, "error TS2322"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, tt.file), []byte(tt.source), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{tsc, "--noEmit", "--strict", "--target", "es2022", "--lib", "es2022"}, tt.flags...)
			cmd := nodeCommand(ctx, t, nil, append(args, tt.file)...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			switch {
			case tt.wantError == "" && err != nil:
				t.Errorf("tsc %s: %v\n%s", tt.file, err, out)
			case tt.wantError != "" && !strings.Contains(string(out), tt.wantError):
				t.Errorf("tsc %s: %v, output %q; want %s", tt.file, err, out, tt.wantError)
			case tt.wantError != "" && strings.Contains(string(out), "TS7016"):
				t.Errorf("tsc %s found no declarations:\n%s", tt.file, out)
			}
		})
	}
}
