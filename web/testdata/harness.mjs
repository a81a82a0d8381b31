// Test harness for baton-client.mjs: a scripted WebSocket the test plays the
// server of, storages, frame builders and waits with deadlines. Shared by
// web/test/*.test.mjs and the scripts the Go tests run (it lives here, not
// in web/test/, because Node's runner would run every .mjs under test/).

import { sha256Hex } from "../static/baton-client.mjs";

/**
 * Waits until cond() holds, checking after every turn of the event loop;
 * throws naming what it waited for once ms have passed. setImmediate and
 * performance.now are not faked by mock timers, so this works under them.
 */
export async function until(cond, what, ms = 5000) {
  const deadline = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/**
 * FakeServer hands out FakeWebSocket, a WebSocket class whose other end the
 * test drives: open() it, deliver() frames, drop() it. Every socket the
 * client makes is in sockets, every frame it sends in socket.sent (parsed).
 */
export class FakeServer {
  constructor() {
    /** @type {any[]} */
    this.sockets = [];
    const server = this;
    this.WebSocket = class FakeWebSocket {
      constructor(url, protocols) {
        this.url = url;
        this.protocols = protocols;
        this.readyState = 0;
        this.sent = [];
        this.closedWith = null;
        server.sockets.push(this);
      }
      send(data) {
        if (this.readyState !== 1) throw new Error("send on a socket that is not open");
        this.sent.push(JSON.parse(data));
      }
      close(code = 1005) {
        if (this.readyState >= 2) return;
        this.readyState = 3;
        this.closedWith = code;
        setImmediate(() => this.onclose && this.onclose({ code, reason: "" }));
      }
      // The server's side.
      open() {
        this.readyState = 1;
        if (this.onopen) this.onopen({});
      }
      deliver(frame) {
        if (this.readyState !== 1) throw new Error("deliver on a socket that is not open");
        this.onmessage({ data: typeof frame === "string" ? frame : JSON.stringify(frame) });
      }
      /** A failed connection as Node 20's WebSocket reports it: error, and no close. */
      fail() {
        this.readyState = 3;
        if (this.onerror) this.onerror({});
      }
      drop(code = 1006) {
        this.readyState = 3;
        this.onclose({ code, reason: "" });
      }
      /** The frames the client sent, acks left out. */
      get frames() {
        return this.sent.filter((f) => f.event !== "user.ack");
      }
      get acks() {
        return this.sent.filter((f) => f.event === "user.ack").map((f) => f.metadata.last_seq);
      }
    };
  }

  get last() {
    return this.sockets.at(-1);
  }

  /** Waits for the client's socket number n (0-based) and opens it. */
  async accept(n, ms) {
    await until(() => this.sockets.length > n, `the client's connection #${n + 1}`, ms);
    const ws = this.sockets[n];
    ws.open();
    return ws;
  }
}

/** A session's event stream: sequenced frames with their checksums. */
export class Stream {
  constructor(sessionId = "sess_test") {
    this.sessionId = sessionId;
    this.frames = [];
    this.sums = [""];
  }
  /** Appends a sequenced event and returns its frame. */
  add(event, metadata = {}, extra = {}) {
    const seq = this.frames.length + 1;
    const f = {
      event, event_id: `ev-${this.sessionId}-${seq}`, seq, session_id: this.sessionId,
      timestamp: "2026-01-02T03:04:05.5Z", content: "", metadata, ...extra,
    };
    this.frames.push(f);
    this.sums.push(sha256Hex(this.sums[seq - 1] + f.event_id));
    return f;
  }
  get latest() {
    return this.frames.length;
  }
  sum(seq = this.latest) {
    return this.sums[seq];
  }
}

export function connected(sessionId, token, extra = {}) {
  return { event: "system.connected", session_id: sessionId, metadata: {
    session_id: sessionId, resume_token: token, resumed: false, last_seq: 0, state_checksum: "",
    buffer_capacity: 1000, ...extra } };
}

export function systemError(code, refType, message = code) {
  return { event: "system.error", metadata: { code, message, ref_type: refType } };
}

/** sessionStorage's shape, in memory; fail makes setItem throw (a full quota). */
export class MemoryStorage {
  constructor() {
    this.map = new Map();
    this.writes = 0;
    this.fail = false;
  }
  getItem(k) { return this.map.has(k) ? this.map.get(k) : null; }
  setItem(k, v) {
    if (this.fail) throw new Error("QuotaExceededError");
    this.writes++;
    this.map.set(k, String(v));
  }
  removeItem(k) { this.map.delete(k); }
  stored(k = "baton-session") {
    const v = this.map.get(k);
    return v === undefined ? null : JSON.parse(v);
  }
}

/**
 * AsyncStorage's shape: every method answers a turn of the event loop
 * later. hold() makes writes wait until release() — to see what the client
 * does while a write is under way.
 */
export class AsyncMemoryStorage extends MemoryStorage {
  constructor() {
    super();
    this.held = null;
  }
  async getItem(k) {
    await new Promise((r) => setImmediate(r));
    return super.getItem(k);
  }
  async setItem(k, v) {
    if (this.held) await this.held.promise;
    await new Promise((r) => setImmediate(r));
    super.setItem(k, v);
  }
  async removeItem(k) {
    await new Promise((r) => setImmediate(r));
    super.removeItem(k);
  }
  hold() {
    let release;
    const promise = new Promise((r) => { release = r; });
    this.held = { promise, release };
  }
  release() {
    const h = this.held;
    this.held = null;
    h.release();
  }
}

/** Records everything a client emits. */
export function record(client) {
  const rec = { events: [], errors: [], violations: [], connections: [], resets: [], snapshots: [] };
  client.on("event", (f) => rec.events.push(f));
  client.on("error", (m, resent) => rec.errors.push({ ...m, resent }));
  client.on("violation", (m) => rec.violations.push(m));
  client.on("connection", (state, detail) => rec.connections.push(`${state} ${detail}`));
  client.on("reset", (reason) => rec.resets.push(reason));
  client.on("snapshot", (m) => rec.snapshots.push(m));
  return rec;
}

/**
 * The path and values of the first difference between two JSON values,
 * or null when they are equal (key order aside).
 */
export function firstDiff(a, b, path = "$") {
  if (a === b) return null;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null ||
      Array.isArray(a) !== Array.isArray(b)) {
    return `${path}: ${JSON.stringify(a)} ≠ ${JSON.stringify(b)}`;
  }
  if (Array.isArray(a) && a.length !== b.length) {
    return `${path}: ${a.length} elements ≠ ${b.length}: ${JSON.stringify(a)} ≠ ${JSON.stringify(b)}`;
  }
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  for (const k of keys) {
    if (!(k in a) || !(k in b)) {
      return `${path}.${k}: ${k in a ? JSON.stringify(a[k]) : "(absent)"} ≠ ${k in b ? JSON.stringify(b[k]) : "(absent)"}`;
    }
    const d = firstDiff(a[k], b[k], Array.isArray(a) ? `${path}[${k}]` : `${path}.${k}`);
    if (d) return d;
  }
  return null;
}
