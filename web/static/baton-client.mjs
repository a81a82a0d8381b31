// baton-client.mjs — Baton's dependency-free JavaScript client
// (docs/protocol.md). One ES module, no imports: copy this file (and
// baton-client.d.mts for TypeScript) into any browser, Node ≥ 20 or React
// Native project. The .mjs name makes it an ES module in every Node
// project, CommonJS ones too; Baton also serves the same bytes as
// /baton-client.js (and the types as /baton-client.d.ts) for tools that
// only know .js.
//
//   import { BatonClient } from "./baton-client.mjs";
//   const client = new BatonClient();           // in a page: this origin's /ws
//   client.on("state", (state) => render(state));
//   await client.connect();
//   client.sendMessage("Compare three databases");
//
// What it does for the application: it keeps the session (session_id,
// resume_token, the last applied seq, the §3.4 checksum and the state) in
// storage, reconnects with backoff and resumes (replay or resync), applies
// every sequenced event once and in order, checks the checksum chain, acks,
// sends an answer again when a connection dropped with it, and folds the
// events into one state with the reducer below — the same rules as the
// server's wsproto.State.
//
// Sections: types · SHA-256 and the checksum chain · the reducer · the
// client.

// ---------------------------------------------------------------------------
// Types (the same as baton-client.d.mts)
// ---------------------------------------------------------------------------

/**
 * @typedef {{id: string, title: string, description?: string, depends_on?: string[]}} Task
 * @typedef {"idle"|"planning"|"awaiting_confirm"|"solving"|"aggregating"} Phase
 * @typedef {"pending"|"running"|"retrying"|"completed"|"failed"|"skipped"|"cancelled"} TaskStatus
 * @typedef {{id: string, content: string, status: string, tool_calls: number, note?: string}} TodoItem
 * @typedef {{version: number, items: TodoItem[]}} TodoList
 * @typedef {{step_id: string, tool: string, arguments: Record<string, unknown>, attempt: number,
 *   round: number, done: boolean, ok?: boolean, result?: string, truncated?: boolean,
 *   duration_ms?: number}} ToolCallState
 * @typedef {{run_id: string, step_id: string, kind: string, expires_at: string,
 *   [field: string]: any}} Confirm  the metadata of an open agent.user_confirm
 * @typedef {Task & {depends_on: string[], status: TaskStatus, attempt: number, result?: string,
 *   error?: string, skip_reason?: string, skip_dependency?: string, todo: TodoList|null, progress: number, progress_message: string,
 *   retry_at: number|null, tool_calls: ToolCallState[]}} TaskState
 * @typedef {{step_id: string, task_id?: string, question: string, text: string}} AnswerState
 * @typedef {{run_id: string, after_task: string, action: string, reason: string, details?: unknown[]}} Decision
 * @typedef {{run_id: string, request: string, plan_summary: string, plan_version: number,
 *   tasks: TaskState[], pending_confirm: Confirm[], answers: AnswerState[],
 *   last_decision: Decision|null, final_answer: string|null,
 *   status: "succeeded"|"partial"|"failed"|"cancelled"|null, cancel_reason: string|null,
 *   summary: string|null}} RunState
 * @typedef {{run_id: string, request: string, answer: string,
 *   status: "succeeded"|"partial"|"failed"|"cancelled"|string, ended_at: string}} HistoryEntry
 *   a finished run of the session's conversation (§6)
 * @typedef {{phase: Phase, run: RunState|null, history: HistoryEntry[], history_limit: number}} State
 *   history: the session's finished runs, oldest first, at most history_limit of them
 *   (system.connected's; 0: no limit)
 * @typedef {{event: string, event_id?: string, seq?: number, session_id?: string, step_id?: string,
 *   timestamp?: string, content?: string, metadata: Record<string, any>}} Frame
 * @typedef {"DISCONNECTED"|"CONNECTING"|"CONNECTED"|"RECONNECTING"} ConnectionState
 * @typedef {{getItem(key: string): string|null|Promise<string|null>,
 *   setItem(key: string, value: string): void|Promise<void>,
 *   removeItem(key: string): void|Promise<void>}} StorageLike
 * @typedef {{url?: string, storage?: StorageLike|null, storageKey?: string, WebSocket?: any,
 *   protocols?: string[], token?: string|(() => string|null|undefined), reconnect?: boolean, backoffInitial?: number, backoffMax?: number,
 *   ackEvery?: number, ackInterval?: number}} ClientOptions
 * @typedef {{events: number, duplicates: number, resumes: number, resyncs: number,
 *   rejected: number, reconnects: number}} ClientStats
 */

// ---------------------------------------------------------------------------
// SHA-256 and the §3.4 checksum chain
// ---------------------------------------------------------------------------

const K256 = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/**
 * The UTF-8 bytes of a string; a lone surrogate becomes U+FFFD, as
 * TextEncoder (and Go's []byte of a string converted from UTF-16) does.
 * @param {string} text
 * @returns {Uint8Array}
 */
function utf8(text) {
  if (typeof TextEncoder === "function") return new TextEncoder().encode(text);
  const out = [];
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // a lone surrogate
    if (c < 0x80) out.push(c);
    else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return new Uint8Array(out);
}

/** @param {Uint8Array} bytes */
function hex(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += (bytes[i] < 16 ? "0" : "") + bytes[i].toString(16);
  return s;
}

const ror = (/** @type {number} */ x, /** @type {number} */ n) => (x >>> n) | (x << (32 - n));

/**
 * SHA-256 of bytes (FIPS 180-4), for where SubtleCrypto is missing.
 * @param {Uint8Array} bytes
 * @returns {Uint8Array}
 */
function sha256(bytes) {
  const n = bytes.length;
  const total = (((n + 9 + 63) / 64) | 0) * 64; // message, 0x80, the 64-bit length, padded to blocks
  const buf = new Uint8Array(total);
  buf.set(bytes);
  buf[n] = 0x80;
  const view = new DataView(buf.buffer);
  view.setUint32(total - 8, Math.floor(n / 0x20000000)); // the length in bits, high word
  view.setUint32(total - 4, (n << 3) >>> 0);
  const h = new Int32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Int32Array(64);
  for (let off = 0; off < total; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getInt32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const x = w[i - 15], y = w[i - 2];
      const s0 = ror(x, 7) ^ ror(x, 18) ^ (x >>> 3);
      const s1 = ror(y, 17) ^ ror(y, 19) ^ (y >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
    }
    let a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i]) | 0;
      const t2 = ((ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g; g = f; f = e; e = (d + t1) | 0;
      d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) outView.setInt32(i * 4, h[i]);
  return out;
}

/**
 * Lowercase hex SHA-256 of a string's UTF-8 bytes, in pure JavaScript (no
 * SubtleCrypto, which plain-http origins other than localhost lack).
 * @param {string} text
 * @returns {string}
 */
export function sha256Hex(text) {
  return hex(sha256(utf8(String(text))));
}

/**
 * The next link of the §3.4 chain: c(n) = hex(sha256(c(n−1) + event_id(n))),
 * with SubtleCrypto when present, else sha256Hex.
 * @param {string} previous
 * @param {string} eventId
 * @returns {Promise<string>}
 */
export async function nextChecksum(previous, eventId) {
  const text = previous + eventId;
  const subtle = globalThis.crypto && globalThis.crypto.subtle;
  if (subtle && typeof subtle.digest === "function") {
    try {
      return hex(new Uint8Array(await subtle.digest("SHA-256", utf8(text))));
    } catch {
      // An insecure context may expose subtle but refuse to use it.
    }
  }
  return sha256Hex(text);
}

// ---------------------------------------------------------------------------
// The reducer: pure functions, rule for rule wsproto.State (wsproto/state.go)
// plus the UI extras of the .d.ts. They return a new state and never modify
// their arguments; what they do not change is shared.
// ---------------------------------------------------------------------------

const str = (/** @type {any} */ v) => (typeof v === "string" ? v : "");
const num = (/** @type {any} */ v) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const arr = (/** @type {any} */ v) => (Array.isArray(v) ? v : []);

/** The most tool calls a task keeps in its state. */
const MAX_TOOL_CALLS = 50;

/** The events that end a run (§5.5). */
const RUN_END = new Set(["agent.final_answer", "plan.cancelled", "pipeline.cancelled"]);

/** @returns {State} */
export function initialState() {
  return { phase: "idle", run: null, history: [], history_limit: 0 };
}

/**
 * The history entry a run's last event makes (§6): agent.final_answer,
 * plan.cancelled or pipeline.cancelled carry its request, status and end.
 * @param {string} event
 * @param {Record<string, any>} m
 * @returns {HistoryEntry}
 */
function historyEntry(event, m) {
  const answer = event === "agent.final_answer";
  return { run_id: str(m.run_id), request: str(m.request), answer: answer ? str(m.content) : "",
    status: answer ? str(m.status) : "cancelled", ended_at: str(m.ended_at) || "0001-01-01T00:00:00Z" };
}

/**
 * history within limit: the oldest entries go first.
 * @param {HistoryEntry[]} history
 * @param {number} limit 0: no limit
 */
function trimHistory(history, limit) {
  return limit > 0 && history.length > limit ? history.slice(history.length - limit) : history;
}

/**
 * The state with system.connected's history_limit applied, as the server
 * keeps its history.
 * @param {State} state
 * @param {number} limit
 * @returns {State}
 */
export function withHistoryLimit(state, limit) {
  const history = trimHistory(arr(state.history), limit);
  if (limit === state.history_limit && history === state.history) return state;
  return { ...state, history, history_limit: limit };
}

/**
 * @param {string} runId
 * @param {string} request
 * @returns {RunState}
 */
function newRun(runId, request) {
  return {
    run_id: runId, request, mode: null, plan_summary: "", plan_version: 0, tasks: [], pending_confirm: [],
    answers: [], last_decision: null, final_answer: null, status: null, cancel_reason: null, summary: null,
  };
}

/**
 * A task of a list, pending, with fresh UI extras.
 * @param {any} t
 * @returns {TaskState}
 */
function pendingTask(t) {
  return {
    id: str(t && t.id), title: str(t && t.title), description: str(t && t.description),
    depends_on: arr(t && t.depends_on).slice(), status: "pending", attempt: 0, todo: null,
    progress: 0, progress_message: "", streamed: "", retry_at: null, tool_calls: [],
  };
}

/**
 * Applies change to a copy of the current run when it is runId's; events
 * of another run change nothing. change may return the new phase.
 * @param {State} state
 * @param {string} runId
 * @param {(run: RunState, phase: Phase) => (Phase|void)} change
 * @returns {State}
 */
function withRun(state, runId, change) {
  if (!state.run || state.run.run_id !== runId) return state;
  const run = { ...state.run };
  const phase = change(run, state.phase);
  return { ...state, phase: phase || state.phase, run };
}

/**
 * Applies change to a copy of the run's task taskId, if it has one.
 * @param {RunState} run
 * @param {string} taskId
 * @param {(task: TaskState) => void} change
 */
function withTask(run, taskId, change) {
  const i = run.tasks.findIndex((t) => t.id === taskId);
  if (i < 0) return;
  const task = { ...run.tasks[i] };
  change(task);
  run.tasks = run.tasks.slice();
  run.tasks[i] = task;
}

/**
 * A task event of the current run: the task's copy is changed.
 * @param {State} state
 * @param {Record<string, any>} m
 * @param {(task: TaskState, run: RunState) => void} change
 */
function taskEvent(state, m, change) {
  if (!state.run || state.run.run_id !== m.run_id || !state.run.tasks.some((t) => t.id === m.task_id)) {
    return state;
  }
  return withRun(state, m.run_id, (run) => withTask(run, m.task_id, (t) => change(t, run)));
}

/**
 * @param {RunState} run
 * @param {(c: Confirm) => boolean} drop
 */
function dropConfirms(run, drop) {
  run.pending_confirm = run.pending_confirm.filter((c) => !drop(c));
}

/**
 * Ends the run: idle, no open confirmations, unfinished tasks cancelled.
 * @param {State} state
 * @param {string} runId
 * @param {(run: RunState) => void} [extra]
 * @returns {State}
 */
function end(state, runId, extra) {
  return withRun(state, runId, (run) => {
    run.pending_confirm = [];
    run.tasks = run.tasks.map((t) =>
      t.status === "pending" || t.status === "running" || t.status === "retrying"
        ? { ...t, status: "cancelled", retry_at: null }
        : t);
    if (extra) extra(run);
    return "idle";
  });
}

/**
 * Folds a todo event into the task's list: one whose version is not above
 * the one held is dropped (§10).
 * @param {TaskState} task
 * @param {any} version
 * @param {(items: TodoItem[]) => TodoItem[]} change
 */
function applyTodo(task, version, change) {
  const v = num(version);
  if (task.todo && v <= task.todo.version) return;
  task.todo = { version: v, items: change(task.todo ? task.todo.items : []) };
}

/** @param {any} item @returns {TodoItem} */
function todoItem(item) {
  const out = { id: str(item && item.id), content: str(item && item.content),
    status: str(item && item.status), tool_calls: num(item && item.tool_calls) };
  if (item && str(item.note)) out.note = item.note;
  return out;
}

/**
 * Folds one sequenced event into the state. Events that change nothing
 * return the state as is, and so do events of a run other than the current
 * one.
 * @param {State} state
 * @param {Frame} frame
 * @returns {State}
 */
export function reduce(state, frame) {
  let s = reduceRun(state, frame);
  // The run's reducer builds states of phase and run: the history goes on.
  if (s !== state) s = { ...s, history: arr(state.history), history_limit: num(state.history_limit) };
  const m = (frame && frame.metadata) || {};
  if (frame && RUN_END.has(frame.event) && !s.history.some((h) => h.run_id === m.run_id)) {
    s = { ...s, history: trimHistory([...s.history, historyEntry(frame.event, m)], s.history_limit) };
  }
  return s;
}

/**
 * reduce for the current run: phase and run.
 * @param {State} state
 * @param {Frame} frame
 * @returns {State}
 */
function reduceRun(state, frame) {
  const m = (frame && frame.metadata) || {};
  switch (frame && frame.event) {
    case "plan.start":
      return { ...state, phase: "planning", run: newRun(str(m.run_id), str(m.request)) };
    case "plan.completed":
      return withRun(state, m.run_id, (run) => {
        run.plan_summary = str(m.plan_summary);
        run.tasks = arr(m.tasks).map(pendingTask);
        run.plan_version = 1;
      });
    case "plan.decision":
      return withRun(state, m.run_id, (run) => { run.last_decision = { ...m }; });
    case "plan.updated":
      // The whole list after the adjustment: tasks the run had keep where
      // they stand, new ones are pending; the adjustment's confirmation is
      // settled.
      return withRun(state, m.run_id, (run) => {
        const had = new Map(run.tasks.map((t) => [t.id, t]));
        run.tasks = arr(m.tasks).map((t) => had.get(t && t.id) || pendingTask(t));
        run.plan_version = num(m.version);
        dropConfirms(run, (c) => c.kind === "plan_adjust");
      });
    case "agent.user_confirm":
      return withRun(state, m.run_id, (run) => {
        run.pending_confirm = [...run.pending_confirm, { ...m }];
        if (m.kind === "plan_confirm") return "awaiting_confirm";
      });
    case "agent.confirm_settled": {
      // An answer, maybe another device's (§3.6): a plan confirmed with
      // edits is the edited plan; an input_request's text is recorded.
      if (!state.run || state.run.run_id !== m.run_id) return state;
      let s = state;
      if (m.kind === "plan_confirm" && m.confirmed === true && Array.isArray(m.tasks)) {
        s = withRun(s, m.run_id, (run) => { run.tasks = m.tasks.map(pendingTask); });
      }
      return answered(s, str(m.step_id), typeof m.text === "string" ? { text: m.text } : {});
    }
    case "plan.cancelled":
      return end(state, m.run_id, (run) => { run.status = "cancelled"; run.cancel_reason = str(m.reason); });
    case "solver.start": {
      let s = state;
      if (!s.run || s.run.run_id !== m.run_id) {
        // A user.solve_tasks or chat run: its first event is a solver.start.
        s = { ...s, phase: s.phase, run: { ...newRun(str(m.run_id), ""), plan_version: 1 } };
      }
      return withRun(s, m.run_id, (run, phase) => {
        if (m.task && !run.tasks.some((t) => t.id === str(m.task_id))) {
          // A chat run's solver.start names its one task (§5.6).
          run.mode = str(m.mode) || null;
          run.request = str(m.task.description);
          run.tasks = [...run.tasks, pendingTask(m.task)];
        }
        let next;
        if (phase !== "solving") {
          next = "solving";
          dropConfirms(run, (c) => c.kind === "plan_confirm");
        }
        dropConfirms(run, (c) => str(c.task_id) === str(m.task_id));
        withTask(run, m.task_id, (t) => {
          t.status = "running";
          t.attempt = num(m.attempt);
          delete t.error;
          t.progress = 0;
          t.progress_message = "";
          t.streamed = "";
          t.retry_at = null;
        });
        return next;
      });
    }
    case "solver.progress":
      return taskEvent(state, m, (t) => {
        if (num(m.attempt) < t.attempt) return;
        t.progress = num(m.progress);
        t.progress_message = str(m.message);
        // In a chat run every message is the model's text as it writes it.
        if (state.run && state.run.mode === "chat") t.streamed += str(m.message);
      });
    case "solver.completed":
      return taskEvent(state, m, (t) => {
        t.status = "completed";
        t.attempt = num(m.attempt);
        t.result = str(m.result);
        delete t.error;
        t.retry_at = null;
      });
    case "solver.cancelled":
      return withRun(state, m.run_id, (run) => {
        dropConfirms(run, (c) => str(c.task_id) === str(m.task_id));
        withTask(run, m.task_id, (t) => { t.status = "cancelled"; t.retry_at = null; });
      });
    case "solver.skipped":
      return taskEvent(state, m, (t) => {
        t.status = "skipped";
        t.skip_reason = str(m.reason);
        if (str(m.dependency)) t.skip_dependency = m.dependency;
        else delete t.skip_dependency;
      });
    case "solver.restarted":
      // The task waits to run again: its result and error are gone, its
      // attempt count and todo list carry on, a question it had is withdrawn.
      return withRun(state, m.run_id, (run) => {
        dropConfirms(run, (c) => str(c.task_id) === str(m.task_id));
        withTask(run, m.task_id, (t) => {
          t.status = "pending";
          delete t.result;
          delete t.error;
          delete t.skip_reason;
          delete t.skip_dependency;
          t.progress = 0;
          t.progress_message = "";
          t.retry_at = null;
        });
      });
    case "agent.tool_call":
      return taskEvent(state, m, (t) => {
        const call = { step_id: str(m.step_id), tool: str(m.tool), arguments: m.arguments || {},
          attempt: num(m.attempt), round: num(m.round), done: false };
        t.tool_calls = [...t.tool_calls, call].slice(-MAX_TOOL_CALLS);
      });
    case "agent.tool_result":
      // A task asks one thing at a time: once a tool has answered, the
      // task's tool_confirm or input_request is settled.
      return withRun(state, m.run_id, (run) => {
        dropConfirms(run, (c) => str(c.task_id) === str(m.task_id) &&
          (c.kind === "tool_confirm" || c.kind === "input_request"));
        withTask(run, m.task_id, (t) => {
          const result = { done: true, ok: m.ok === true, result: str(m.result),
            truncated: m.truncated === true, duration_ms: num(m.duration_ms) };
          const i = t.tool_calls.findIndex((c) => c.step_id === m.step_id);
          t.tool_calls = i < 0
            ? [...t.tool_calls, { step_id: str(m.step_id), tool: str(m.tool), arguments: {},
              attempt: num(m.attempt), round: num(m.round), ...result }].slice(-MAX_TOOL_CALLS)
            : t.tool_calls.map((c, j) => (j === i ? { ...c, ...result } : c));
          t.streamed = ""; // what the model writes next is a new reply
        });
      });
    case "error.execution":
      return taskEvent(state, m, (t) => {
        t.status = "failed";
        t.attempt = num(m.attempt);
        t.error = str(m.message);
      });
    case "error.recovery_started":
      return taskEvent(state, m, (t) => {
        t.status = "retrying";
        const at = Date.parse(str(frame.timestamp));
        t.retry_at = (Number.isNaN(at) ? Date.now() : at) + num(m.delay_ms);
      });
    case "error.recovery_failed":
      return taskEvent(state, m, (t) => {
        t.status = "failed";
        t.error = str(m.last_error);
        t.retry_at = null;
      });
    case "aggregate.start":
      return withRun(state, m.run_id, () => "aggregating");
    case "aggregate.completed":
      return withRun(state, m.run_id, (run) => { run.summary = str(m.summary); });
    case "pipeline.completed":
      return withRun(state, m.run_id, (run) => { run.status = m.status || null; });
    case "agent.final_answer":
      return end(state, m.run_id, (run) => { run.final_answer = str(m.content); });
    case "pipeline.cancelled":
      return end(state, m.run_id, (run) => { run.status = "cancelled"; run.cancel_reason = str(m.reason); });
    case "todo.updated":
      return taskEvent(state, m, (t) => applyTodo(t, m.version, () => arr(m.items).map(todoItem)));
    case "todo.item_progress":
      return taskEvent(state, m, (t) => applyTodo(t, m.version, (items) => {
        const item = todoItem(m.item);
        const i = items.findIndex((it) => it.id === item.id);
        return i < 0 ? [...items, item] : items.map((it, j) => (j === i ? item : it));
      }));
    case "todo.completed":
      return taskEvent(state, m, (t) => applyTodo(t, m.version,
        (items) => items.map((it) => ({ ...it, status: "completed" }))));
  }
  return state;
}

/**
 * The user's own answer folded in, as the server folds it: the
 * confirmation closes, and an input_request's text is recorded in answers.
 * @param {State} state
 * @param {string} stepId
 * @param {Record<string, any>} metadata the user.response's metadata
 * @returns {State}
 */
export function answered(state, stepId, metadata) {
  if (!state.run) return state;
  const run = { ...state.run };
  const text = metadata && metadata.text;
  if (typeof text === "string") {
    for (const c of run.pending_confirm) {
      if (c.step_id !== stepId || c.kind !== "input_request") continue;
      /** @type {AnswerState} */
      const a = { step_id: stepId, question: str(c.question), text };
      if (str(c.task_id)) a.task_id = c.task_id;
      run.answers = [...run.answers, a];
    }
  }
  dropConfirms(run, (c) => c.step_id === stepId);
  return { ...state, phase: state.phase, run };
}

/**
 * Seeds a run's task list with a list the client sent (an edited plan
 * confirmation, user.solve_tasks), as the server does when the run starts
 * solving; a client calls it at the run's first solver.start (§6).
 * @param {State} state
 * @param {string} runId
 * @param {Task[]} tasks
 * @returns {State}
 */
export function beginSolving(state, runId, tasks) {
  const run = state.run && state.run.run_id === runId ? { ...state.run } : newRun(runId, "");
  run.tasks = arr(tasks).map(pendingTask);
  run.plan_version = 1;
  dropConfirms(run, (c) => c.kind === "plan_confirm");
  return { ...state, phase: "solving", run };
}

/**
 * The state a system.state_snapshot's metadata describes, with fresh UI
 * extras.
 * @param {{phase: Phase, run: any, history?: any[]}} snapshot
 * @param {number} [historyLimit] system.connected's history_limit (0: no limit)
 * @returns {State}
 */
export function fromSnapshot(snapshot, historyLimit = 0) {
  const r = snapshot && snapshot.run;
  const phase = (snapshot && snapshot.phase) || "idle";
  const history = trimHistory(arr(snapshot && snapshot.history).map((h) => ({
    run_id: str(h && h.run_id), request: str(h && h.request), answer: str(h && h.answer),
    status: str(h && h.status), ended_at: str(h && h.ended_at) })), historyLimit);
  if (!r) return { phase, run: null, history, history_limit: historyLimit };
  const run = newRun(str(r.run_id), str(r.request));
  run.mode = str(r.mode) || null;
  run.plan_summary = str(r.plan_summary);
  run.plan_version = num(r.plan_version);
  run.tasks = arr(r.tasks).map((t) => {
    const task = pendingTask(t);
    task.status = t.status;
    task.attempt = num(t.attempt);
    if (str(t.result)) task.result = t.result;
    if (str(t.error)) task.error = t.error;
    if (str(t.skip_reason)) task.skip_reason = t.skip_reason;
    if (str(t.skip_dependency)) task.skip_dependency = t.skip_dependency;
    task.todo = t.todo ? { version: num(t.todo.version), items: arr(t.todo.items).map(todoItem) } : null;
    return task;
  });
  run.pending_confirm = arr(r.pending_confirm).map((c) => ({ ...c }));
  run.answers = arr(r.answers).map((a) => ({ ...a }));
  run.last_decision = r.last_decision ? { ...r.last_decision } : null;
  run.final_answer = typeof r.final_answer === "string" ? r.final_answer : null;
  return { phase, run, history, history_limit: historyLimit };
}

/** @param {any} t a Task as wsproto.Task encodes it */
function taskJSON(t) {
  return { id: str(t && t.id), title: str(t && t.title), description: str(t && t.description),
    depends_on: Array.isArray(t && t.depends_on) ? t.depends_on.slice() : null };
}

/**
 * A confirmation as wsproto.UserConfirm encodes it (its omitempty and
 * omitzero fields).
 * @param {Confirm} c
 */
function confirmJSON(c) {
  /** @type {Record<string, any>} */
  const out = { run_id: str(c.run_id), step_id: str(c.step_id), kind: str(c.kind) };
  if (str(c.plan_summary)) out.plan_summary = c.plan_summary;
  if (Array.isArray(c.added)) out.added = c.added.map(taskJSON);
  if (Array.isArray(c.removed)) out.removed = c.removed.slice();
  if (arr(c.tasks).length) out.tasks = c.tasks.map(taskJSON);
  if (str(c.task_id)) out.task_id = c.task_id;
  if (arr(c.options).length) out.options = c.options.slice();
  if (str(c.tool)) out.tool = c.tool;
  if (c.arguments !== undefined) out.arguments = c.arguments;
  if (str(c.question)) out.question = c.question;
  if (str(c.context)) out.context = c.context;
  out.expires_at = str(c.expires_at) || "0001-01-01T00:00:00Z";
  return out;
}

/**
 * The state in §6's snapshot shape, without the UI extras: what
 * wsproto.State would hold, field for field as Go encodes it.
 * @param {State} state
 * @returns {{phase: Phase, run: any, history: HistoryEntry[]}}
 */
export function toSnapshot(state) {
  const r = state.run;
  const history = arr(state.history).map((h) => ({ run_id: h.run_id, request: h.request, answer: h.answer,
    status: h.status, ended_at: h.ended_at }));
  if (!r) return { phase: state.phase || "idle", run: null, history };
  const d = r.last_decision;
  /** @type {Record<string, any>|null} */
  let decision = null;
  if (d) {
    decision = { run_id: str(d.run_id), after_task: str(d.after_task), action: str(d.action), reason: str(d.reason) };
    if (arr(d.details).length) decision.details = d.details;
  }
  return {
    phase: state.phase || "idle",
    run: {
      run_id: r.run_id, request: r.request, ...(r.mode ? { mode: r.mode } : {}),
      plan_summary: r.plan_summary, plan_version: r.plan_version,
      tasks: r.tasks.map((t) => {
        /** @type {Record<string, any>} */
        const out = { ...taskJSON(t), status: t.status, attempt: t.attempt };
        if (str(t.result)) out.result = t.result;
        if (str(t.error)) out.error = t.error;
        if (str(t.skip_reason)) out.skip_reason = t.skip_reason;
        if (str(t.skip_dependency)) out.skip_dependency = t.skip_dependency;
        out.todo = t.todo ? { version: t.todo.version, items: t.todo.items.map(todoItem) } : null;
        return out;
      }),
      pending_confirm: r.pending_confirm.map(confirmJSON),
      answers: r.answers.map((a) => {
        /** @type {Record<string, any>} */
        const out = { step_id: str(a.step_id) };
        if (str(a.task_id)) out.task_id = a.task_id;
        out.question = str(a.question);
        out.text = str(a.text);
        return out;
      }),
      last_decision: decision,
      final_answer: r.final_answer,
    },
    history,
  };
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

const STORE_VERSION = 1;
const OPEN = 1; // WebSocket.OPEN, which not every implementation defines as a static

/** @param {any} v @param {number} d */
const positive = (v, d) => (typeof v === "number" && v > 0 ? v : d);

/** @param {any} s @returns {s is State} */
function isState(s) {
  return !!s && typeof s.phase === "string" && (s.run === null || (typeof s.run === "object" &&
    Array.isArray(s.run.tasks) && Array.isArray(s.run.pending_confirm) && Array.isArray(s.run.answers)));
}

/** Reports an application listener's exception without breaking the client. */
function rethrowLater(/** @type {unknown} */ err) {
  setTimeout(() => { throw err; }, 0);
}

/**
 * One session of Baton, seen from the client: connects, resumes, applies
 * every sequenced event once and in order, and keeps the state.
 *
 * Frames are handled one at a time through a promise chain (hashing with
 * SubtleCrypto is asynchronous), so the state, lastSeq and checksum always
 * agree with each other; the methods may be called at any time.
 */
export class BatonClient {
  /** @type {Required<Omit<ClientOptions, "url"|"storage"|"WebSocket"|"protocols"|"token">>} */
  #opts;
  /** @type {string|undefined} */
  #url;
  /** @type {StorageLike|null} */
  #storage;
  /** @type {any} */
  #WebSocket;
  /** @type {string[]|undefined} */
  #protocols;
  /** @type {string|(() => string|null|undefined)|undefined} */
  #bearer;
  /** @type {Map<string, Set<Function>>} */
  #listeners = new Map();

  // The connection. phase: "hello" (waiting for its system.connected),
  // "resume" (reconnect_with_state sent), "snapshot" (a resync's snapshot
  // is next), "live".
  /** @type {{ws: any, phase: string, fresh: any, resumed: any}|null} */
  #conn = null;
  /** @type {ConnectionState} */
  #connection = "DISCONNECTED";
  #detail = "";
  #closed = true;
  /** @type {Promise<void>} */
  #queue = Promise.resolve();
  /** @type {{promise: Promise<void>, resolve: () => void, reject: (e: Error) => void, done: boolean}|null} */
  #ready = null;
  /** @type {Promise<void>|null} */
  #loaded = null;
  #attempt = 0;
  /** @type {any} */
  #retryTimer = null;
  #opened = 0;

  // The session. gen changes whenever the client takes another session,
  // so that work started for the old one is dropped.
  #gen = 0;
  #sessionId = "";
  #token = "";
  // The session's follow token (§3.6): from a fresh session's
  // system.connected, or the one this client follows with.
  #followToken = "";
  // Set when this client follows another device's session (follow()): its
  // resume token is the follow token, good only for a follow, so every
  // resume follows, also after a reload from storage.
  #following = false;
  #lastSeq = 0;
  #checksum = "";
  /** @type {State} */
  #state = initialState();
  /** @type {Map<number, string>} server checksums to verify once the client reaches the seq */
  #expect = new Map();
  #replayTo = 0;
  /** @type {Map<string, string>} the current run's user.response frames, by step_id */
  #answers = new Map();
  /** @type {{run_id: string|null, tasks: Task[]}[]} task lists sent, for beginSolving */
  #seeds = [];
  #resent = 0;
  /**
   * The latest answer and the confirmation it closed, where it was: an
   * answer the server refuses (invalid_tasks, invalid_message) leaves the
   * question open there, so it opens again here.
   * @type {{stepId: string, confirm: Confirm, index: number}|null}
   */
  #refusable = null;

  #sinceAck = 0;
  #acked = 0;
  /** @type {any} */
  #ackTimer = null;
  /** @type {Promise<void>} */
  #saving = Promise.resolve();
  /** @type {(() => void)|null} */
  #pagehide = null;
  /** @type {ClientStats} */
  #stats = { events: 0, duplicates: 0, resumes: 0, resyncs: 0, rejected: 0, reconnects: 0 };

  /** @param {ClientOptions} [options] */
  constructor(options = {}) {
    const o = options || {};
    this.#opts = {
      storageKey: o.storageKey || "baton-session",
      reconnect: o.reconnect !== false,
      backoffInitial: positive(o.backoffInitial, 250),
      backoffMax: positive(o.backoffMax, 30000),
      ackEvery: positive(o.ackEvery, 50),
      ackInterval: positive(o.ackInterval, 1000),
      follow: o.follow === true,
    };
    this.#url = o.url || defaultURL();
    this.#WebSocket = o.WebSocket;
    this.#protocols = o.protocols ? o.protocols.slice() : undefined;
    this.#bearer = o.token;
    this.#storage = "storage" in o && o.storage !== undefined ? o.storage : defaultStorage();
  }

  // ---- Public API ----

  /**
   * Opens the connection (resuming a stored session if there is one) and
   * resolves once system.connected, and any replay or snapshot, arrived.
   * While the server cannot be reached it keeps trying (with reconnect on);
   * it rejects when the client gives up: close(), another connection took
   * the session (4000), or a drop with reconnect off. It rejects at once,
   * without trying, when it could never connect: no url outside a page, or
   * no WebSocket implementation (Node 20 without --experimental-websocket).
   * @returns {Promise<void>}
   */
  connect() {
    if (this.#ready) return this.#ready.promise;
    const unusable = this.#unusable();
    if (unusable) return Promise.reject(unusable);
    /** @type {any} */
    const ready = { done: false };
    ready.promise = new Promise((resolve, reject) => { ready.resolve = resolve; ready.reject = reject; });
    ready.promise.catch(() => {}); // a caller that does not wait for it must not get an unhandled rejection
    this.#ready = ready;
    this.#closed = false;
    this.#attempt = 0;
    this.#setConnection("CONNECTING", "connecting");
    this.#watchPagehide();
    this.#loaded ??= this.#load();
    this.#loaded.then(() => { if (!this.#closed && !this.#conn && !this.#retryTimer) this.#open(); });
    return ready.promise;
  }

  /**
   * Closes the connection and stops reconnecting. The session stays stored
   * (a later connect resumes it) unless forget is true.
   * @param {{forget?: boolean}} [options]
   */
  close(options = {}) {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    this.#stopAckTimer();
    const conn = this.#conn;
    this.#conn = null;
    if (conn) {
      try { conn.ws.close(1000); } catch { /* already closing */ }
    }
    if (options && options.forget) this.#forget();
    else this.#persist();
    if (this.#pagehide) {
      globalThis.removeEventListener("pagehide", this.#pagehide);
      this.#pagehide = null;
    }
    this.#settle(new Error("baton: client closed"));
    this.#setConnection("DISCONNECTED", "closed");
  }

  /**
   * Subscribes to one of the client's events; returns the unsubscribe
   * function.
   * @param {string} name
   * @param {Function} fn
   * @returns {() => void}
   */
  on(name, fn) {
    let set = this.#listeners.get(name);
    if (!set) this.#listeners.set(name, (set = new Set()));
    set.add(fn);
    return () => { set.delete(fn); };
  }

  /** @returns {State} */
  get state() { return this.#state; }
  /** @returns {ConnectionState} */
  get connection() { return this.#connection; }
  get sessionId() { return this.#sessionId; }
  /** The session's follow token, which lets another device follow it (§3.6); "" when unknown. */
  get followToken() { return this.#followToken; }

  /**
   * Follows another device's session (§3.6): drops the session this client
   * holds (and its stored copy) and takes sessionId with its follow token,
   * with an empty state; the next connect() resumes it with follow (a
   * replay from the first event, or a snapshot). Every later resume
   * follows too. Call it before connect(), or after close().
   * @param {string} sessionId @param {string} followToken
   */
  follow(sessionId, followToken) {
    if (!str(sessionId) || !str(followToken)) throw new TypeError("baton: follow needs a session id and a follow token");
    if (!this.#closed) throw new Error("baton: follow() while connected; close() first");
    this.#gen++;
    this.#sessionId = sessionId;
    this.#token = followToken;
    this.#followToken = followToken;
    this.#following = true;
    this.#loaded = Promise.resolve(); // a stored session is not ours any more
    this.#resetSession();
    this.#persist();
    this.#emit("state", this.#state);
  }
  get lastSeq() { return this.#lastSeq; }
  get checksum() { return this.#checksum; }
  /** @returns {ClientStats} */
  get stats() { return { ...this.#stats }; }

  /**
   * Sends a raw client frame; false when not connected (nothing was sent).
   * @param {string} event
   * @param {{step_id?: string, content?: string, metadata?: Record<string, any>}} [fields]
   * @returns {boolean}
   */
  send(event, fields = {}) {
    /** @type {Record<string, any>} */
    const frame = { event };
    if (fields.step_id !== undefined) frame.step_id = fields.step_id;
    if (fields.content !== undefined) frame.content = fields.content;
    if (fields.metadata !== undefined) frame.metadata = fields.metadata;
    if (!this.#sendLive(frame)) return false;
    if (event === "user.response") this.#resent = 0; // errors from now on may answer this one
    return true;
  }

  /** @param {string} request @param {{adaptive?: boolean, mode?: "chat"|"plan"}} [options] */
  sendMessage(request, options = {}) {
    /** @type {Record<string, any>} */
    const metadata = {};
    if (options.adaptive) metadata.adaptive = true;
    if (options.mode) metadata.mode = options.mode;
    return this.send("user.message", { content: request, metadata: Object.keys(metadata).length ? metadata : undefined });
  }

  /** @param {Task[]} tasks @param {{adaptive?: boolean}} [options] */
  solveTasks(tasks, options = {}) {
    const metadata = options.adaptive ? { tasks, adaptive: true } : { tasks };
    if (!this.send("user.solve_tasks", { metadata })) return false;
    this.#seeds = this.#seeds.filter((s) => s.run_id !== null);
    this.#seeds.push({ run_id: null, tasks: clone(tasks) });
    return true;
  }

  /**
   * user.response; folds the answer into the state and keeps it to send
   * again after a resume.
   * @param {string} stepId
   * @param {Record<string, any>} metadata
   */
  respond(stepId, metadata) {
    const run = this.#state.run;
    const index = run ? run.pending_confirm.findIndex((c) => c.step_id === stepId) : -1;
    const confirm = index >= 0 && run ? run.pending_confirm[index] : undefined;
    const frame = { event: "user.response", step_id: stepId, metadata };
    if (!this.#sendLive(frame)) return false;
    this.#resent = 0;
    this.#refusable = confirm ? { stepId, confirm, index } : null;
    this.#answers.set(stepId, JSON.stringify(frame));
    if (confirm && confirm.kind === "plan_confirm") {
      this.#seeds = this.#seeds.filter((s) => s.run_id !== confirm.run_id);
      if (metadata && metadata.confirmed === true && Array.isArray(metadata.tasks)) {
        this.#seeds.push({ run_id: confirm.run_id, tasks: clone(metadata.tasks) });
      }
    }
    this.#setState(answered(this.#state, stepId, metadata));
    return true;
  }

  /** @param {string} stepId @param {Task[]} [tasks] an edit of the plan */
  confirmPlan(stepId, tasks) {
    return this.respond(stepId, tasks ? { confirmed: true, tasks } : { confirmed: true });
  }
  /** @param {string} stepId */
  rejectPlan(stepId) { return this.respond(stepId, { confirmed: false }); }
  /** @param {string} stepId @param {"retry"|"skip"|"abort"} action */
  answerTaskFailed(stepId, action) { return this.respond(stepId, { action }); }
  /** @param {string} stepId @param {boolean} approved */
  approveTool(stepId, approved) { return this.respond(stepId, { approved }); }
  /** @param {string} stepId @param {string} text */
  answerInput(stepId, text) { return this.respond(stepId, { text }); }
  /** @param {string} stepId @param {boolean} confirmed @param {Task[]} [tasks] */
  answerAdjust(stepId, confirmed, tasks) {
    return this.respond(stepId, tasks ? { confirmed, tasks } : { confirmed });
  }
  /** @param {string} feedback */
  replan(feedback) { return this.send("user.replan", { metadata: { feedback } }); }
  cancel() { return this.send("user.cancel"); }
  /** @param {string} taskId */
  cancelTask(taskId) { return this.send("user.cancel_task", { metadata: { task_id: taskId } }); }
  /** @param {string} taskId */
  restartTask(taskId) { return this.send("user.restart_task", { metadata: { task_id: taskId } }); }

  /** Acks everything applied so far now (the client also acks by itself). */
  ack() {
    if (!this.#conn || this.#conn.phase !== "live") return false;
    this.#flushAck();
    return true;
  }

  // ---- Connections ----

  /**
   * Why the client could never connect, or null: what no retry can mend,
   * so connect() says it at once rather than reconnect forever.
   * @returns {Error|null}
   */
  #unusable() {
    if (!this.#url) {
      return new Error("baton: no url: pass { url: \"ws://HOST:PORT/ws\" } (only a page has a default, its own origin)");
    }
    if (typeof (this.#WebSocket || globalThis.WebSocket) !== "function") {
      return new Error("baton: no WebSocket implementation: run Node ≥ 22, Node 20 with --experimental-websocket, or pass { WebSocket }");
    }
    return null;
  }

  #open() {
    this.#retryTimer = null;
    const unusable = this.#unusable();
    if (unusable) {
      this.#giveUp(unusable.message); // connect() checked: only a WebSocket taken away since lands here
      return;
    }
    if (this.#opened++ > 0) this.#stats.reconnects++;
    const WS = this.#WebSocket || globalThis.WebSocket;
    /** @type {any} */
    let ws;
    try {
      const { url, protocols } = handshake(this.#url, this.#protocols, typeof this.#bearer === "function" ? this.#bearer() : this.#bearer);
      ws = protocols ? new WS(url, protocols) : new WS(url);
    } catch (err) {
      this.#dropped(`connect failed: ${err instanceof Error ? err.message : err}`);
      return;
    }
    const conn = { ws, phase: "hello", fresh: null, resumed: null };
    this.#conn = conn;
    ws.onmessage = (/** @type {any} */ ev) => this.#enqueue(() => this.#onFrame(conn, ev.data));
    ws.onclose = (/** @type {any} */ ev) => this.#enqueue(() => this.#onClose(conn, ev && typeof ev.code === "number" ? ev.code : 1006));
    // A failed connection fires error, and in browsers close after it;
    // Node 20's WebSocket fires no close when the handshake fails (a 401,
    // a server down), so error is the drop. A close that follows is then
    // ignored: the connection is no longer the current one.
    ws.onerror = () => this.#enqueue(() => this.#onClose(conn, 1006));
  }

  /** @param {() => (void|Promise<void>)} fn */
  #enqueue(fn) {
    this.#queue = this.#queue.then(fn).catch(rethrowLater);
  }

  /** @param {any} conn @param {number} code */
  #onClose(conn, code) {
    if (conn !== this.#conn) return; // a connection the client left itself
    this.#conn = null;
    this.#stopAckTimer();
    this.#persist();
    if (code === 4000) {
      this.#giveUp("replaced"); // another tab or device took the session
      return;
    }
    this.#dropped(`closed ${code}`);
  }

  /** @param {string} detail @param {number} [retryAfter] ms the server asked to wait, else the backoff's */
  #dropped(detail, retryAfter = 0) {
    this.#conn = null;
    if (this.#closed) return;
    if (!this.#opts.reconnect) {
      this.#giveUp(detail);
      return;
    }
    const backoff = this.#backoff(this.#attempt++);
    const delay = retryAfter > 0 ? Math.min(retryAfter, this.#opts.backoffMax) : backoff;
    this.#setConnection("RECONNECTING", detail);
    this.#retryTimer = setTimeout(() => this.#open(), delay);
  }

  /** @param {number} attempt @returns {number} ms: doubling, ±50 % jitter, never above backoffMax */
  #backoff(attempt) {
    const { backoffInitial, backoffMax } = this.#opts;
    const base = Math.min(backoffMax, backoffInitial * 2 ** attempt);
    return Math.min(backoffMax, base * (0.5 + Math.random()));
  }

  /** @param {string} detail */
  #giveUp(detail) {
    this.#closed = true;
    this.#settle(new Error(`baton: disconnected (${detail})`));
    this.#setConnection("DISCONNECTED", detail);
  }

  /** Rejects a pending connect() and lets the next one start afresh. @param {Error} err */
  #settle(err) {
    const ready = this.#ready;
    this.#ready = null;
    if (ready && !ready.done) {
      ready.done = true;
      ready.reject(err);
    }
  }

  /** @param {any} conn @param {string} detail @param {any} meta */
  #goLive(conn, detail, meta) {
    conn.phase = "live";
    // The server keeps at most history_limit runs in its history: so does the client.
    const limited = withHistoryLimit(this.#state, num(meta && meta.history_limit));
    if (limited !== this.#state) {
      this.#state = limited;
      this.#emit("state", this.#state);
    }
    this.#attempt = 0;
    if (detail === "resumed" || detail === "resynced") this.#resendAnswers(conn);
    if (this.#lastSeq > this.#acked) this.#startAckTimer();
    this.#setConnection("CONNECTED", detail);
    this.#emit("connected", meta);
    this.#checkReady();
  }

  #checkReady() {
    const ready = this.#ready;
    if (ready && !ready.done && this.#conn && this.#conn.phase === "live" && this.#lastSeq >= this.#replayTo) {
      ready.done = true;
      ready.resolve();
    }
  }

  /** Sends the current run's answers again: one may have been lost with the connection. @param {any} conn */
  #resendAnswers(conn) {
    this.#resent = 0;
    this.#refusable = null; // an error from now on answers a re-sent answer, or a later one
    for (const text of this.#answers.values()) {
      if (this.#sendText(conn, text)) this.#resent++;
    }
  }

  /** @param {Record<string, any>} frame */
  #sendLive(frame) {
    const conn = this.#conn;
    return !!conn && conn.phase === "live" && this.#sendText(conn, JSON.stringify(frame));
  }

  /** @param {any} conn @param {string} text */
  #sendText(conn, text) {
    if (conn.ws.readyState !== OPEN) return false;
    try {
      conn.ws.send(text);
      return true;
    } catch {
      return false;
    }
  }

  // ---- Frames ----

  /** @param {any} conn @param {any} data */
  async #onFrame(conn, data) {
    if (conn !== this.#conn) return;
    /** @type {any} */
    let f;
    try {
      f = typeof data === "string" ? JSON.parse(data) : null;
    } catch {
      f = null;
    }
    if (!f || typeof f !== "object" || typeof f.event !== "string") {
      this.#violation("a frame that is not a JSON object with an event");
      return;
    }
    if (!f.metadata || typeof f.metadata !== "object") f.metadata = {};
    this.#emit("frame", f);
    switch (conn.phase) {
      case "hello": return this.#onHello(conn, f);
      case "resume": return this.#onResumed(conn, f);
      case "snapshot": return this.#onSnapshot(conn, f);
    }
    if (!f.event.startsWith("system.")) return this.#applyEvent(conn, f);
    if (f.event === "system.error") this.#onError(f.metadata);
    else if (f.event === "system.state_snapshot") this.#applySnapshot(f.metadata);
  }

  /** The connection's own system.connected: take its session, or resume ours. @param {any} conn @param {Frame} f */
  #onHello(conn, f) {
    if (f.event !== "system.connected") {
      this.#violation(`the first frame was ${f.event}, not system.connected`);
      return;
    }
    conn.fresh = f.metadata;
    if (this.#sessionId && this.#token) {
      conn.phase = "resume";
      /** @type {Record<string, any>} */
      const metadata = { session_id: this.#sessionId, resume_token: this.#token,
        last_seq: this.#lastSeq, state_checksum: this.#checksum };
      if (this.#opts.follow || this.#following) metadata.follow = true; // beside the session's other connections (§3.6)
      this.#sendText(conn, JSON.stringify({ event: "user.reconnect_with_state", metadata }));
      return;
    }
    this.#adopt(f.metadata);
    this.#goLive(conn, "new session", f.metadata);
  }

  /** The answer to user.reconnect_with_state (§3.5). @param {any} conn @param {Frame} f */
  #onResumed(conn, f) {
    const m = f.metadata;
    if (f.event === "system.error" && m.code === "resume_rejected") {
      // The session is gone: the connection's fresh one is ours now.
      this.#stats.rejected++;
      this.#emit("error", m, false);
      this.#adopt(conn.fresh);
      this.#emit("reset", "resume_rejected");
      this.#goLive(conn, "resume_rejected", conn.fresh);
      return;
    }
    if (f.event === "system.error" && m.code === "follow_limit") {
      // The session has as many connections as it may: trying again
      // would only be refused again until one leaves.
      this.#emit("error", m, false);
      try { conn.ws.close(1000); } catch { /* already closing */ }
      this.#conn = null;
      this.#giveUp("follow_limit");
      return;
    }
    if (f.event !== "system.connected" || !m.resumed) {
      if (f.event === "system.error") this.#emit("error", m, false);
      else this.#violation(`user.reconnect_with_state answered with ${f.event}`);
      // busy with retry_after_ms: the server is taking over many sessions
      // at once and says when to come back (spread by it already).
      this.#abandon(conn, `resume failed: ${str(m.code) || f.event}`, num(m.retry_after_ms));
      return;
    }
    this.#stats.resumes++;
    // Every resume rotates the token (§3.5): the one just sent stops working
    // once this client has read this frame (the pong to the ping after it).
    this.#token = str(m.resume_token) || this.#token;
    this.#followToken = str(m.follow_token) || this.#followToken;
    this.#persist();
    if (m.resync) {
      this.#stats.resyncs++;
      conn.phase = "snapshot";
      conn.resumed = m;
      return;
    }
    const last = num(m.last_seq);
    this.#replayTo = last;
    if (last > this.#lastSeq) this.#expect.set(last, str(m.state_checksum));
    else if (last < this.#lastSeq) this.#violation(`resume: the server's last seq ${last} is below the client's ${this.#lastSeq}`);
    else if (str(m.state_checksum) !== this.#checksum) {
      this.#violation(`checksum at seq ${last}: client ${this.#checksum}, server ${str(m.state_checksum)}`);
    }
    this.#goLive(conn, "resumed", m);
  }

  /** @param {any} conn @param {Frame} f */
  #onSnapshot(conn, f) {
    if (f.event !== "system.state_snapshot") {
      this.#violation(`a resync answered with ${f.event}, not system.state_snapshot`);
      this.#abandon(conn, "resync without a snapshot");
      return;
    }
    this.#applySnapshot(f.metadata);
    this.#goLive(conn, "resynced", conn.resumed);
  }

  /** Leaves a connection that cannot be used and reconnects later (after retryAfter ms when the server said). @param {any} conn @param {string} detail @param {number} [retryAfter] */
  #abandon(conn, detail, retryAfter = 0) {
    try { conn.ws.close(1000); } catch { /* already closing */ }
    this.#dropped(detail, retryAfter);
  }

  /** @param {Record<string, any>} m */
  #applySnapshot(m) {
    this.#lastSeq = num(m.seq);
    this.#checksum = str(m.state_checksum);
    this.#expect.clear();
    this.#replayTo = 0;
    let s = fromSnapshot(/** @type {any} */ (m), num(this.#state.history_limit));
    // Answers sent again after this resync close their confirmations on the
    // server; close them here too.
    for (const [stepId, text] of this.#answers) s = answered(s, stepId, JSON.parse(text).metadata);
    this.#state = s;
    this.#persist();
    this.#emit("snapshot", m);
    this.#emit("state", this.#state);
  }

  /** A sequenced event: once, in seq order, checksum checked. @param {any} conn @param {any} f */
  async #applyEvent(conn, f) {
    const seq = f.seq;
    if (!Number.isSafeInteger(seq) || seq < 1) {
      this.#violation(`${f.event} without a valid seq`);
      return;
    }
    if (seq <= this.#lastSeq) {
      this.#stats.duplicates++;
      return;
    }
    const gen = this.#gen;
    const sum = await nextChecksum(this.#checksum, str(f.event_id));
    if (gen !== this.#gen || conn !== this.#conn) return; // closed or reset meanwhile
    if (seq !== this.#lastSeq + 1) this.#violation(`gap: event seq ${seq} after ${this.#lastSeq}`);
    this.#lastSeq = seq;
    this.#checksum = sum;
    const want = this.#expect.get(seq);
    if (want !== undefined) {
      this.#expect.delete(seq);
      if (want !== sum) this.#violation(`checksum at seq ${seq}: client ${sum}, server ${want}`);
    }
    const before = this.#state;
    let s = f.event === "solver.start" ? this.#seed(before, f.metadata) : before;
    s = reduce(s, f);
    this.#state = s;
    if (RUN_END.has(f.event)) {
      this.#answers.clear();
      this.#seeds = this.#seeds.filter((x) => x.run_id !== f.metadata.run_id);
    }
    this.#stats.events++;
    this.#emit("event", { ...f, replayed: seq <= this.#replayTo });
    // A listener may have answered already: the latest state is the one to show.
    if (this.#state !== before) this.#emit("state", this.#state);
    if (++this.#sinceAck >= this.#opts.ackEvery) this.#flushAck();
    else this.#startAckTimer();
    this.#checkReady();
  }

  /**
   * At a run's first solver.start, the task list the client sent (an edit,
   * user.solve_tasks) becomes the run's, as on the server (§6).
   * @param {State} state
   * @param {Record<string, any>} m
   */
  #seed(state, m) {
    const isNew = !state.run || state.run.run_id !== m.run_id;
    if (!isNew && state.phase === "solving") return state;
    const i = this.#seeds.findIndex((s) => s.run_id === m.run_id || (isNew && s.run_id === null));
    if (i < 0) return state;
    const [seed] = this.#seeds.splice(i, 1);
    return beginSolving(state, m.run_id, seed.tasks);
  }

  /** @param {Record<string, any>} m */
  #onError(m) {
    let resent = false;
    if (m.code === "step_id_mismatch" && m.ref_type === "user.response" && this.#resent > 0) {
      this.#resent--;
      resent = true;
    }
    if (m.ref_type === "user.solve_tasks") this.#seeds = this.#seeds.filter((s) => s.run_id !== null);
    if (m.ref_type === "user.response" && m.code === "invalid_tasks") {
      this.#seeds = this.#seeds.filter((s) => s.run_id === null); // the edit was refused
    }
    if (!resent && m.ref_type === "user.response" && (m.code === "invalid_tasks" || m.code === "invalid_message")) {
      this.#reopen();
    }
    this.#emit("error", m, resent);
  }

  /**
   * The server refused the latest answer and kept its question open
   * (§5.3, §10, §11): open it again where it was, forget the answer (it is
   * not sent again after a resume) and whatever text it recorded.
   */
  #reopen() {
    const r = this.#refusable;
    this.#refusable = null;
    const run = this.#state.run;
    if (!r || !run || run.run_id !== r.confirm.run_id || run.pending_confirm.some((c) => c.step_id === r.stepId)) return;
    this.#answers.delete(r.stepId);
    const pending = [...run.pending_confirm];
    pending.splice(Math.min(r.index, pending.length), 0, r.confirm);
    this.#setState({
      ...this.#state,
      phase: this.#state.phase,
      run: { ...run, pending_confirm: pending, answers: run.answers.filter((a) => a.step_id !== r.stepId) },
    });
  }

  /** Takes a fresh session (system.connected's metadata): nothing applied yet. @param {any} m */
  #adopt(m) {
    this.#gen++;
    this.#sessionId = str(m && m.session_id);
    this.#token = str(m && m.resume_token);
    this.#followToken = str(m && m.follow_token);
    this.#following = false;
    this.#resetSession();
    this.#persist();
    this.#emit("state", this.#state);
  }

  #resetSession() {
    this.#lastSeq = 0;
    this.#checksum = "";
    this.#state = initialState();
    this.#expect.clear();
    this.#replayTo = 0;
    this.#answers.clear();
    this.#seeds = [];
    this.#resent = 0;
    this.#refusable = null;
    this.#sinceAck = 0;
    this.#acked = 0;
    this.#stopAckTimer();
  }

  #forget() {
    this.#gen++;
    this.#sessionId = "";
    this.#token = "";
    this.#resetSession();
    const storage = this.#storage;
    if (storage) {
      this.#saving = this.#saving.then(() => storage.removeItem(this.#opts.storageKey)).catch(() => {});
    }
  }

  // ---- Acks and storage ----

  #startAckTimer() {
    if (!this.#ackTimer) this.#ackTimer = setTimeout(() => this.#flushAck(), this.#opts.ackInterval);
  }

  #stopAckTimer() {
    clearTimeout(this.#ackTimer);
    this.#ackTimer = null;
  }

  /** Persists the session, then acks what it persisted (§3.2). */
  #flushAck() {
    this.#stopAckTimer();
    this.#sinceAck = 0;
    const seq = this.#lastSeq;
    const gen = this.#gen;
    if (seq <= this.#acked) return;
    // Stored first: a reload must never resume from a seq older than what
    // the server has already dropped. A storage failure does not hold the
    // ack back (the worst a reload can then get is a resync).
    this.#persist().then(() => {
      const conn = this.#conn;
      if (gen !== this.#gen || seq <= this.#acked || !conn || conn.phase !== "live") return;
      if (this.#sendText(conn, JSON.stringify({ event: "user.ack", metadata: { last_seq: seq } }))) {
        this.#acked = seq;
      }
    });
  }

  /**
   * Writes the session to storage after the writes already under way; each
   * write stores the session as it is when the write starts, so a late one
   * never puts back older data. Never rejects.
   * @returns {Promise<void>}
   */
  #persist() {
    if (!this.#storage) return Promise.resolve();
    this.#saving = this.#saving.then(() => this.#write()).catch(() => {});
    return this.#saving;
  }

  /** @returns {void|Promise<void>} */
  #write() {
    const storage = this.#storage;
    if (!storage || !this.#sessionId) return;
    return storage.setItem(this.#opts.storageKey, JSON.stringify({
      v: STORE_VERSION, session_id: this.#sessionId, resume_token: this.#token,
      follow_token: this.#followToken, following: this.#following, last_seq: this.#lastSeq, checksum: this.#checksum, state: this.#state,
      answers: [...this.#answers], seeds: this.#seeds,
    }));
  }

  /** Reads the stored session, if any; a broken or unreadable one is ignored. */
  async #load() {
    const storage = this.#storage;
    if (!storage) return;
    /** @type {any} */
    let d;
    try {
      const raw = await storage.getItem(this.#opts.storageKey);
      d = typeof raw === "string" ? JSON.parse(raw) : null;
    } catch {
      return;
    }
    if (!d || d.v !== STORE_VERSION || !str(d.session_id) || !str(d.resume_token) ||
        !Number.isSafeInteger(d.last_seq) || d.last_seq < 0 || typeof d.checksum !== "string" ||
        !isState(d.state) || this.#sessionId) {
      return;
    }
    this.#sessionId = d.session_id;
    this.#token = d.resume_token;
    this.#followToken = str(d.follow_token);
    this.#following = d.following === true; // a session this client follows stays followed
    this.#lastSeq = d.last_seq;
    this.#checksum = d.checksum;
    this.#acked = 0;
    this.#state = { ...d.state, history: arr(d.state.history), history_limit: num(d.state.history_limit) };
    this.#answers = new Map(arr(d.answers).filter((a) => Array.isArray(a) && typeof a[0] === "string" && typeof a[1] === "string"));
    this.#seeds = arr(d.seeds).filter((s) => s && Array.isArray(s.tasks));
    this.#emit("state", this.#state);
  }

  /** In a browser, the session is also stored when the page goes away. */
  #watchPagehide() {
    if (this.#pagehide || typeof document === "undefined" || typeof globalThis.addEventListener !== "function") return;
    this.#pagehide = () => {
      try {
        const p = this.#write(); // synchronous with sessionStorage: done before the page is gone
        if (p && typeof p.then === "function") p.then(undefined, () => {});
      } catch {
        // quota or storage unavailable: the next load resumes from an older point, or starts afresh
      }
    };
    globalThis.addEventListener("pagehide", this.#pagehide);
  }

  // ---- Events ----

  /** @param {State} s */
  #setState(s) {
    this.#state = s;
    this.#emit("state", s);
  }

  /** @param {ConnectionState} state @param {string} detail */
  #setConnection(state, detail) {
    if (state === this.#connection && detail === this.#detail) return;
    this.#connection = state;
    this.#detail = detail;
    this.#emit("connection", state, detail);
  }

  /** @param {string} message */
  #violation(message) {
    this.#emit("violation", message);
  }

  /** @param {string} name @param {...any} args */
  #emit(name, ...args) {
    const set = this.#listeners.get(name);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (err) {
        rethrowLater(err);
      }
    }
  }
}

/** In a page: the page's own origin + "/ws". */
function defaultURL() {
  const loc = /** @type {any} */ (globalThis).location;
  if (!loc || typeof loc.host !== "string" || !loc.host) return undefined;
  return `${loc.protocol === "https:" ? "wss:" : "ws:"}//${loc.host}/ws`;
}

/** The characters a WebSocket subprotocol may hold (RFC 9110 §5.6.2 tchar). */
const TCHARS = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * The URL and protocols of a handshake carrying token: as the protocol
 * "baton.bearer.<token>" beside "baton" (the one the server selects), or
 * as the access_token query parameter when the token has characters a
 * protocol cannot hold. Browsers can set no header on a WebSocket.
 * @param {string} url
 * @param {string[]|undefined} protocols
 * @param {string|null|undefined} token
 * @returns {{url: string, protocols: string[]|undefined}}
 */
function handshake(url, protocols, token) {
  if (!token) return { url, protocols };
  if (TCHARS.test(token)) {
    const offered = (protocols || []).filter((p) => p !== "baton" && !p.startsWith("baton.bearer."));
    return { url, protocols: [...offered, "baton", `baton.bearer.${token}`] };
  }
  return { url: `${url}${url.includes("?") ? "&" : "?"}access_token=${encodeURIComponent(token)}`, protocols };
}

/** @returns {StorageLike|null} */
function defaultStorage() {
  try {
    const s = /** @type {any} */ (globalThis).sessionStorage;
    return s && typeof s.getItem === "function" ? s : null;
  } catch {
    return null; // a sandboxed frame may throw on access
  }
}

/** @template T @param {T} v @returns {T} */
function clone(v) {
  return JSON.parse(JSON.stringify(v));
}
