package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/npmtest"
	"github.com/baton-run/baton/internal/skipreport"
)

// myagentClients is where myagent's own clients are, copied unchanged
// (their README says from where).
var myagentClients, _ = filepath.Abs("../../myagent/testdata/clients")

var pythonFound struct {
	once sync.Once
	path string
}

// myagentPython is a python3 that has websockets and pydantic, all that
// myagent's scripts need; without one the test is skipped (failed on CI).
func myagentPython(t *testing.T) string {
	t.Helper()
	pythonFound.once.Do(func() {
		for _, p := range []string{"python3", "/usr/bin/python3"} {
			if exec.Command(p, "-c", "import websockets, pydantic").Run() == nil {
				pythonFound.path = p
				return
			}
		}
	})
	if pythonFound.path == "" {
		skipreport.Skip(t, "no python3 with websockets and pydantic (Debian: python3-websockets python3-pydantic), which myagent's clients need")
	}
	return pythonFound.path
}

// runClient runs one of myagent's clients with args and returns what it
// printed; it must exit 0 within a minute.
func runClient(t *testing.T, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, myagentPython(t), args...)
	cmd.Dir = myagentClients
	cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=" + myagentClients, "PYTHONUNBUFFERED=1",
		"PYTHONIOENCODING=utf-8", "PYTHONDONTWRITEBYTECODE=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return string(out)
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tasks.json")
	b, _ := json.Marshal(v)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMyagentPythonClients: myagent's Python scripts, unchanged, against
// Baton's dialect at / — each with its documented arguments.
func TestMyagentPythonClients(t *testing.T) {
	t.Parallel()
	myagentPython(t)
	base := startServer(t)
	port := base[strings.LastIndexByte(base, ':')+1:]
	edited := writeJSON(t, []any{map[string]any{"id": 1, "title": "Gather facts"},
		map[string]any{"id": 2, "title": "Compare them", "dependencies": []any{1}}})
	two := writeJSON(t, []any{map[string]any{"id": 1, "title": "Page one", "objective": "sales overview"},
		map[string]any{"id": 2, "title": "Page two"}})
	one := writeJSON(t, map[string]any{"id": 1, "name": "One page", "objective": "a summary"})
	printer := "scripts/ws_print_messages.py"
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"plan confirmed", []string{printer, "--port", port, "--question", "Compare Go and Rust", "--auto-confirm-plan", "--no-interactive-confirm"},
			[]string{"📌 Session established: sess_", "--> Sent question: Compare Go and Rust", `"scope": "plan"`,
				"--> Sent user.response to confirm plan (override_tasks=no)", `"event": "aggregate.completed"`,
				`"event": "agent.final_answer"`, "🛑 Terminal event received. Closing connection."}},
		{"plan edited", []string{printer, "--port", port, "--question", "Compare Go and Rust", "--auto-confirm-plan",
			"--confirm-plan-tasks-file", edited, "--no-interactive-confirm"},
			[]string{"override_tasks=yes", `"title": "Compare them"`, "Gather facts: done", "🛑 Terminal event received."}},
		{"plan declined at a non-interactive prompt", []string{printer, "--port", port, "--question", "Compare Go and Rust"},
			[]string{"=== Confirmation requested ===", "scope      : plan", "Stdin is not interactive; skipping prompt.",
				"--> Sent user.response (confirmed=no; scope=plan)", `"content": "Plan was declined by user."`, "🛑 Terminal event received."}},
		{"tasks solved directly", []string{printer, "--port", port, "--solve-tasks-file", two, "--solve-question", "Sales deck",
			"--solve-plan-summary", "two pages", "--no-interactive-confirm"},
			[]string{"--> Sent user.solve_tasks", `"title": "Page two"`, "🛑 All solver.completed received. Closing connection."}},
		{"one task solved directly", []string{printer, "--port", port, "--solve-tasks-file", one, "--no-interactive-confirm"},
			[]string{`"name": "One page"`, "🛑 All solver.completed received. Closing connection."}},
		{"cancelled", []string{printer, "--port", port, "--question", "Compare Go and Rust", "--cancel-after", "0.2", "--no-interactive-confirm"},
			[]string{"--> Sent user.cancel after 0.2s", `"event": "pipeline.cancelled"`, `"event": "agent.interrupted"`,
				"🛑 Terminal event received. Closing connection."}},
		{"template agent's test client", []string{"scripts/ws_test_template_agent.py", "--port", port, "--question", "Write the weekly report"},
			[]string{"--> Sent question for planning & solving", "--> Auto-confirmed plan", `"event": "agent.final_answer"`,
				"🛑 Terminal event received. Exiting."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := runClient(t, nil, tt.args...)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestMyagentE2ECheck: template_agent's end-to-end self-check, unchanged,
// with a stand-in for its template backend (the HTTP API it provisions a
// template and a knowledge base from) and Baton's dialect as its WS server.
func TestMyagentE2ECheck(t *testing.T) {
	t.Parallel()
	myagentPython(t)
	base := startServer(t)
	var mu sync.Mutex
	var calls []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		var in map[string]any
		json.NewDecoder(r.Body).Decode(&in)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /api/health":
			json.NewEncoder(w).Encode(map[string]any{"ok": true, "service": "stand-in"})
		case "GET /api/templates", "GET /api/databases":
			w.Write([]byte("[]"))
		case "POST /api/templates":
			json.NewEncoder(w).Encode(map[string]any{"id": "tpl1", "name": in["name"]})
		case "POST /api/databases":
			json.NewEncoder(w).Encode(map[string]any{"id": "kb1", "name": in["name"], "files": in["files"]})
		default:
			http.NotFound(w, r)
		}
	}))
	defer backend.Close()
	out := runClient(t, nil, "template_agent/scripts/ws_e2e_check.py", "--backend", backend.URL,
		"--ws", "ws"+strings.TrimPrefix(base, "http"))
	for _, w := range []string{"[✓] Backend health: ok (stand-in)", "[+] Created template: 自检模板 (tpl1)",
		"[✓] Session created: sess_", "[·] Planning started", "[✓] Plan completed: ", "[?] User confirm requested (scope=plan) → auto-confirm",
		"[✓] Solver completed: ", "[✓] Aggregate completed", "[✓] Pipeline completed", "[✓] Final answer received",
		"[✓] E2E self-check completed successfully"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "Plan completed: 0 tasks") {
		t.Errorf("a plan without tasks:\n%s", out)
	}
}

// docsShim runs a documented example that hard-codes ws://localhost:8080
// against MYAGENT_URL instead: the example's own file, run as __main__,
// with websockets.connect pointed elsewhere.
const docsShim = `import os, runpy, websockets
_connect = websockets.connect
def connect(url, *args, **kwargs):
    return _connect(url.replace("ws://localhost:8080", os.environ["MYAGENT_URL"]), *args, **kwargs)
websockets.connect = connect
runpy.run_path("docs/client.py", run_name="__main__")
`

// TestMyagentDocsPythonClient: the Python client of myagent's quick start
// (docs/ws-server/quick-start.md §3), unchanged: it creates its session on
// system.connected, sends its question a second later and prints the
// answer within ten (Baton answers in chat mode, as myagent's plain agent
// does: the example confirms nothing).
func TestMyagentDocsPythonClient(t *testing.T) {
	t.Parallel()
	myagentPython(t)
	base := startServer(t, "--default-mode", "chat")
	out := runClient(t, []string{"MYAGENT_URL=ws" + strings.TrimPrefix(base, "http")}, "-c", docsShim)
	for _, w := range []string{"✅ 连接成功", "🚀 会话创建成功: sess_", "🎯 Agent回答: "} {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "❌ 错误") {
		t.Errorf("an error:\n%s", out)
	}
}

// nodeShim points the documented Node example's ws://localhost:8080 at
// MYAGENT_URL: preloaded (node -r), it replaces the real ws package's
// export with a subclass that rewrites the URL; the example is unchanged.
const nodeShim = `const WebSocket = require('ws');
class Redirected extends WebSocket {
  constructor(url, ...rest) { super(String(url).replace('ws://localhost:8080', process.env.MYAGENT_URL), ...rest); }
}
require.cache[require.resolve('ws')].exports = Redirected;
`

// TestMyagentDocsNodeClient: the Node client of myagent's quick start
// (docs/ws-server/quick-start.md §2), unchanged, with the real ws package:
// it creates its session on system.connected and prints the answer to the
// question it sends a second later. It never exits by itself: the test
// ends it once the answer is printed.
func TestMyagentDocsNodeClient(t *testing.T) {
	t.Parallel()
	modules := npmtest.Modules(t)
	base := startServer(t, "--default-mode", "chat")
	shim := filepath.Join(t.TempDir(), "shim.js")
	if err := os.WriteFile(shim, []byte(nodeShim), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "-r", shim, "docs/client.js")
	cmd.Dir = myagentClients
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "MYAGENT_URL=ws"+strings.TrimPrefix(base, "http"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "🎯 Agent回答:") {
			break
		}
	}
	cancel() // the example keeps its connection open
	io.Copy(io.Discard, stdout)
	cmd.Wait()
	for _, w := range []string{"✅ 连接成功", "🚀 会话创建成功: sess_", "🎯 Agent回答: "} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the output lacks %q:\n%s\nstderr:\n%s", w, out.String(), stderr.String())
		}
	}
	if strings.Contains(out.String(), "❌ 错误") {
		t.Errorf("an error:\n%s", out.String())
	}
}

// stateDriver runs the state export/restore example of myagent's docs
// (docs/ws-server/client-state-management.md, "Python（简要）"): its
// export_and_restore, unchanged, once to export a state and once to
// restore it. The restoring call never returns by itself (it reads on
// after the restore), so the driver watches the frames it decodes and
// stops it at the replay's system.notice.
const stateDriver = `import asyncio, json, os, runpy
ns = runpy.run_path("docs/state.py")
url = os.environ["MYAGENT_URL"]
state = asyncio.run(ns["export_and_restore"](url))
print("exported", state["version"], state["state"]["session_id"])
seen = []
_loads = json.loads
class Done(Exception):
    pass
def loads(s, *args, **kwargs):
    m = _loads(s, *args, **kwargs)
    seen.append(m)
    if m.get("event") == "system.notice":
        raise Done()
    return m
json.loads = loads
try:
    asyncio.run(ns["export_and_restore"](url, state))
except Done:
    pass
for m in seen:
    print("<--", m.get("event"), m.get("session_id"), m.get("content"))
`

// TestMyagentDocsStateExample: the state export/restore example of
// myagent's docs, unchanged: the state one connection exports restores
// the session on another.
func TestMyagentDocsStateExample(t *testing.T) {
	t.Parallel()
	myagentPython(t)
	base := startServer(t)
	out := runClient(t, []string{"MYAGENT_URL=ws" + strings.TrimPrefix(base, "http")}, "-c", stateDriver)
	_, rest, ok := strings.Cut(out, "exported baton-myagent/1 ")
	sid, _, _ := strings.Cut(rest, "\n")
	if !ok || !strings.HasPrefix(sid, "sess_") {
		t.Fatalf("no state exported:\n%s", out)
	}
	for _, w := range []string{"<-- agent.session_created sess_", "<-- agent.state_restored " + sid + " Session state restored successfully",
		"<-- system.notice " + sid + " No buffered events available for replay"} {
		if !strings.Contains(out, w) {
			t.Errorf("the output lacks %q:\n%s", w, out)
		}
	}
}
