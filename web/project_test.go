package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/skipreport"
)

// The README's instruction, as a user carries it out: the client's files
// copied from a clone, or downloaded from a running Baton.
var clientFiles = []string{"baton-client.mjs", "baton-client.d.mts"}

// useClient is the body of the scripts below: it connects to the URL in
// argv and prints what happened as one JSON line. A connect() not
// settled within 30 s is reported, not waited for: the old client looped
// in RECONNECTING forever when Node had no WebSocket.
const useClient = `
  const hasWebSocket = typeof globalThis.WebSocket === "function";
  const client = new BatonClient({ url: process.argv[2] });
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve("pending"), 30000); });
  const outcome = await Promise.race([client.connect().then(() => "connected", (err) => err), late]);
  clearTimeout(timer);
  const report = { hasWebSocket, connection: client.connection, sessionId: client.sessionId };
  if (outcome instanceof Error) report.error = outcome.message;
  else report.outcome = outcome;
  client.close();
  console.log(JSON.stringify(report));
`

// projectScripts are the two ways a Node project loads the client: an ES
// module's import, and CommonJS's import() — npm init's project is
// CommonJS, so index.js is one.
var projectScripts = map[string]string{
	"main.mjs": `import { BatonClient } from "./baton-client.mjs";` + "\n" + useClient,
	"index.js": `(async () => {
  const { BatonClient } = await import("./baton-client.mjs");` + useClient + `})().catch((err) => { console.error(err); process.exit(1); });
`,
}

// npmBin returns npm; without it the test skips, or fails when CI is set,
// as nodeBin does for node.
func npmBin(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		skipreport.Skip(t, "npm not found: install npm (Debian's npm) to test baton-client.mjs in an npm project")
	}
	return npm
}

// newProject makes what `npm init -y` makes in an empty directory (a
// CommonJS project: no "type": "module") and puts the client's files in
// it as fetch says.
func newProject(ctx context.Context, t *testing.T, fetch func(dir string) error) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, npmBin(t), "init", "-y")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm init -y: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct{ Type string }
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatalf("npm init's package.json: %v", err)
	}
	if pkg.Type != "" && pkg.Type != "commonjs" {
		t.Fatalf(`npm init -y made a project of "type": %q; the test is of a CommonJS one`, pkg.Type)
	}
	if err := fetch(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyFromClone is `cp web/static/baton-client.mjs web/static/baton-client.d.mts DIR`.
func copyFromClone(dir string) error {
	for _, name := range clientFiles {
		b, err := os.ReadFile(filepath.Join("static", name))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// download is `curl -O BASE/NAME` for each name.
func download(base string, names ...string) func(dir string) error {
	return func(dir string) error {
		for _, name := range names {
			res, err := http.Get(base + "/" + name)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				return err
			}
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s/%s: %s", base, name, res.Status)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestClientInNodeProject does what the README's "baton-client.mjs"
// section says, for real: a fresh `npm init -y` project, the client's
// files copied in (from the clone, or from the server), and a script that
// imports it — an ES module's import and CommonJS's import() — connecting
// to a real Baton. With a WebSocket in Node it reaches CONNECTED; without
// one (Node 20 without the flag, or any Node with
// --no-experimental-websocket) connect() rejects at once and says why.
func TestClientInNodeProject(t *testing.T) {
	nodeBin(t)
	srv := startServer(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const noWebSocket = "baton: no WebSocket implementation: run Node ≥ 22, Node 20 with --experimental-websocket, or pass { WebSocket }"

	sources := []struct {
		name  string
		fetch func(dir string) error
	}{
		{"copied from the clone", copyFromClone},
		{"downloaded from Baton", download(srv.URL, clientFiles...)},
	}
	runs := []struct {
		name        string
		flags       []string
		wantConnect bool // false: the WebSocket is off, connect() must reject; true: on, it must connect
		either      bool // whichever this Node has without flags
	}{
		{"node", nil, false, true},
		{"node --experimental-websocket", []string{"--experimental-websocket"}, true, false},
		{"node --no-experimental-websocket", []string{"--no-experimental-websocket"}, false, false},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			dir := newProject(ctx, t, src.fetch)
			for name, script := range projectScripts {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, run := range runs {
				for _, script := range []string{"main.mjs", "index.js"} {
					t.Run(run.name+" "+script, func(t *testing.T) {
						args := append(append([]string{}, run.flags...), script, srv.WS())
						cmd := nodeCommand(ctx, t, nil, args...)
						cmd.Dir = dir
						cmd.Stderr = t.Output()
						out, err := cmd.Output()
						if err != nil {
							t.Fatalf("node %s: %v (ctx: %v)\n%s", strings.Join(args, " "), err, ctx.Err(), out)
						}
						var got struct {
							HasWebSocket bool
							Connection   string
							SessionID    string
							Outcome      string
							Error        string
						}
						if err := json.Unmarshal(out, &got); err != nil {
							t.Fatalf("node %s printed %q: %v", script, out, err)
						}
						t.Logf("%+v", got)
						if !run.either && got.HasWebSocket != run.wantConnect {
							t.Fatalf("globalThis.WebSocket present: %v, want %v", got.HasWebSocket, run.wantConnect)
						}
						if got.HasWebSocket {
							if got.Outcome != "connected" || got.Connection != "CONNECTED" || !strings.HasPrefix(got.SessionID, "sess_") {
								t.Errorf("connect(): %+v, want connected to a session", got)
							}
							return
						}
						if got.Error != noWebSocket || got.Connection != "DISCONNECTED" {
							t.Errorf("connect() without WebSocket: %+v, want rejected with %q", got, noWebSocket)
						}
					})
				}
			}
		})
	}
}
