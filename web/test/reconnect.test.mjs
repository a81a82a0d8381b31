// BatonClient's connections against a scripted WebSocket: backoff, the
// close codes of §8, resume_rejected, and the session kept in storage
// across a reload.
import test from "node:test";
import assert from "node:assert/strict";

import { BatonClient, toSnapshot } from "../static/baton-client.mjs";
import {
  FakeServer, Stream, MemoryStorage, AsyncMemoryStorage, connected, systemError, record, until,
} from "../testdata/harness.mjs";

const R = "run_1";

function newClient(server, options = {}) {
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, storage: null, ...options });
  return { client, rec: record(client) };
}

/** Connects client to a fresh session on its socket number n. */
async function connectFresh(server, client, n = 0, id = "sess_1") {
  const ready = client.connect();
  const ws = await server.accept(n);
  ws.deliver(connected(id, `tok_${id}`));
  await ready;
  return ws;
}

test("reconnection delays double from backoffInitial with ±50 % jitter and never pass backoffMax", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  for (const [random, want] of [
    [0, [50, 100, 200, 400, 500, 500]], // ×0.5
    [0.999999, [150, 300, 600, 1000, 1000, 1000]], // ×1.5, then capped
  ]) {
    const rnd = t.mock.method(Math, "random", () => random);
    const server = new FakeServer();
    const { client, rec } = newClient(server, { backoffInitial: 100, backoffMax: 1000 });
    const ws = await connectFresh(server, client);
    let last = ws;
    for (const [i, delay] of want.entries()) {
      last.drop(4100 + i); // a new code each time: each drop is seen as its own connection event
      await until(() => rec.connections.at(-1) === `RECONNECTING closed ${4100 + i}`, `drop ${i}`);
      t.mock.timers.tick(delay - 1);
      assert.equal(server.sockets.length, i + 1, `attempt ${i + 1} before ${delay} ms (random ${random})`);
      t.mock.timers.tick(1);
      assert.equal(server.sockets.length, i + 2, `attempt ${i + 1} at ${delay} ms (random ${random})`);
      last = server.last;
      last.open();
    }
    // A connection that goes live starts the delays over.
    last.deliver(connected("sess_x", "tok_x"));
    await until(() => last.sent.length === 1, "the resume");
    last.deliver({ event: "system.connected", metadata: { resumed: true, last_seq: 0, state_checksum: "", replayed: 0 } });
    await until(() => client.connection === "CONNECTED", "connected");
    last.drop(1006);
    await until(() => rec.connections.at(-1) === "RECONNECTING closed 1006", "the last drop");
    t.mock.timers.tick(want[0]);
    assert.equal(server.sockets.length, want.length + 2, "after a live connection the first delay again");
    client.close();
    rnd.mock.restore();
  }
});

for (const code of [1012, 1013, 1006]) {
  test(`closed with ${code}: the client reconnects and resumes`, async (t) => {
    const server = new FakeServer();
    const { client, rec } = newClient(server, { backoffInitial: 1 });
    t.after(() => client.close());
    const ws = await connectFresh(server, client);
    const stream = new Stream("sess_1");
    ws.deliver(stream.add("plan.start", { run_id: R }));
    await until(() => client.lastSeq === 1, "seq 1");
    ws.drop(code);
    const ws2 = await server.accept(1);
    ws2.deliver(connected("sess_fresh", "tok_fresh"));
    await until(() => ws2.sent.length === 1, "the resume");
    assert.deepEqual(ws2.sent[0], { event: "user.reconnect_with_state", metadata: { session_id: "sess_1",
      resume_token: "tok_sess_1", last_seq: 1, state_checksum: stream.sum(1) } });
    ws2.deliver({ event: "system.connected", metadata: { resumed: true, last_seq: 1, state_checksum: stream.sum(1), replayed: 0 } });
    await until(() => client.connection === "CONNECTED", "resumed");
    assert.deepEqual(rec.connections, ["CONNECTING connecting", "CONNECTED new session", `RECONNECTING closed ${code}`, "CONNECTED resumed"]);
    assert.deepEqual([client.sessionId, rec.violations], ["sess_1", []]);
  });
}

test("closed with 4000 (session replaced): DISCONNECTED, and no reconnection", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const server = new FakeServer();
  const { client, rec } = newClient(server, { backoffInitial: 1 });
  const ws = await connectFresh(server, client);
  ws.drop(4000);
  await until(() => client.connection === "DISCONNECTED", "disconnected");
  assert.deepEqual(rec.connections.at(-1), "DISCONNECTED replaced");
  t.mock.timers.tick(120_000);
  await until(() => true, "a turn");
  assert.equal(server.sockets.length, 1, "reconnected after 4000");
  assert.equal(client.sessionId, "sess_1", "the session is kept: connect() takes it back");
});

test("every resume rotates the token: the next resume sends the newest; 4001 (token expired) reconnects asking the token function again", async (t) => {
  const server = new FakeServer();
  let asked = 0;
  const { client } = newClient(server, { backoffInitial: 1, token: () => `jwt-${++asked}` });
  let ws = await connectFresh(server, client);
  let sent = "tok_sess_1";
  for (const [i, code] of [1006, 4001, 4001].entries()) {
    ws.drop(code);
    ws = await server.accept(i + 1);
    assert.deepEqual(ws.protocols, ["baton", `baton.bearer.jwt-${i + 2}`], `connection ${i + 2}'s bearer`);
    ws.deliver(connected(`sess_fresh_${i}`, `tok_fresh_${i}`));
    await until(() => ws.sent.length === 1, `resume ${i + 1}`);
    assert.equal(ws.sent[0].event, "user.reconnect_with_state");
    assert.deepEqual([ws.sent[0].metadata.session_id, ws.sent[0].metadata.resume_token], ["sess_1", sent], `resume ${i + 1}'s token`);
    sent = `tok_rotated_${i}`;
    ws.deliver({ event: "system.connected", session_id: "sess_1", metadata: { session_id: "sess_1", resume_token: sent,
      resumed: true, last_seq: 0, state_checksum: "", buffer_capacity: 1000, replayed: 0 } });
    await until(() => client.connection === "CONNECTED", `connected after resume ${i + 1}`);
  }
  assert.equal(client.sessionId, "sess_1");
  assert.equal(client.stats.resumes, 3);
  client.close();
});

test("reconnect: false: a drop ends the client; a pending connect() rejects", async () => {
  const server = new FakeServer();
  const { client, rec } = newClient(server, { reconnect: false });
  const ready = client.connect();
  const ws = await server.accept(0);
  ws.drop(1006);
  await assert.rejects(ready, /disconnected \(closed 1006\)/);
  assert.deepEqual(rec.connections, ["CONNECTING connecting", "DISCONNECTED closed 1006"]);
  assert.equal(server.sockets.length, 1);
});

test("busy with retry_after_ms: the client keeps its session and resumes again after the server's hint, not its backoff", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const server = new FakeServer();
  const { client, rec } = newClient(server, { backoffInitial: 10, backoffMax: 5000 });
  t.after(() => client.close());
  const ws = await connectFresh(server, client);
  ws.drop(1006);
  await until(() => rec.connections.at(-1) === "RECONNECTING closed 1006", "the drop");
  t.mock.timers.tick(15); // the backoff's first delay is at most 15 ms
  const ws2 = server.last;
  ws2.open();
  ws2.deliver(connected("sess_2", "tok_2"));
  await until(() => ws2.sent.length === 1, "the resume");
  ws2.deliver({ event: "system.error", metadata: { code: "busy", message: "taking over many sessions", ref_type: "user.reconnect_with_state", retry_after_ms: 1200 } });
  await until(() => rec.connections.at(-1) === "RECONNECTING resume failed: busy", "busy");
  const sockets = server.sockets.length;
  t.mock.timers.tick(1199);
  assert.equal(server.sockets.length, sockets, "no attempt before the hint");
  t.mock.timers.tick(1);
  assert.equal(server.sockets.length, sockets + 1, "an attempt at the hint");
  const ws3 = server.last;
  ws3.open();
  ws3.deliver(connected("sess_3", "tok_3"));
  await until(() => ws3.sent.length === 1, "the second resume");
  const resume = ws3.sent[0];
  assert.deepEqual([resume.event, resume.metadata.session_id, resume.metadata.resume_token], ["user.reconnect_with_state", "sess_1", "tok_sess_1"]);
  assert.deepEqual([client.sessionId, rec.resets.length, client.stats.rejected], ["sess_1", 0, 0]);
});

test("resume_rejected: the client takes the fresh session, clears its state, emits reset and stores the new session", async (t) => {
  const server = new FakeServer();
  const storage = new MemoryStorage();
  const { client, rec } = newClient(server, { backoffInitial: 1, storage });
  t.after(() => client.close());
  const ws = await connectFresh(server, client);
  const stream = new Stream("sess_1");
  ws.deliver(stream.add("plan.start", { run_id: R, request: "r" }));
  await until(() => client.lastSeq === 1, "seq 1");
  ws.drop(1006);
  const ws2 = await server.accept(1);
  ws2.deliver(connected("sess_2", "tok_2"));
  await until(() => ws2.sent.length === 1, "the resume");
  ws2.deliver(systemError("resume_rejected", "user.reconnect_with_state"));
  await until(() => rec.resets.length === 1, "reset");
  assert.deepEqual(rec.resets, ["resume_rejected"]);
  assert.deepEqual([client.sessionId, client.lastSeq, client.checksum, client.state], ["sess_2", 0, "", { phase: "idle", run: null, history: [], history_limit: 0 }]);
  assert.deepEqual([client.connection, rec.connections.at(-1), client.stats.rejected], ["CONNECTED", "CONNECTED resume_rejected", 1]);
  await until(() => storage.stored()?.session_id === "sess_2", "the new session stored");
  assert.deepEqual([storage.stored().resume_token, storage.stored().last_seq], ["tok_2", 0]);
  const fresh = new Stream("sess_2");
  ws2.deliver(fresh.add("plan.start", { run_id: "run_2" }));
  await until(() => client.lastSeq === 1, "the new session's seq 1");
  assert.deepEqual(rec.violations, []);
});

for (const [name, Storage] of [["sessionStorage-like", MemoryStorage], ["AsyncStorage-like", AsyncMemoryStorage]]) {
  test(`a reload resumes the stored session with a replay (${name})`, async (t) => {
    const storage = new Storage();
    const server = new FakeServer();
    const first = newClient(server, { storage, ackEvery: 3 });
    const ws = await connectFresh(server, first.client);
    const stream = new Stream("sess_1");
    ws.deliver(stream.add("plan.start", { run_id: R, request: "reload me" }));
    ws.deliver(stream.add("plan.completed", { run_id: R, tasks: [{ id: "a", title: "A", depends_on: [] }] }));
    ws.deliver(stream.add("agent.user_confirm", { run_id: R, step_id: "confirm_plan_1", kind: "plan_confirm" }));
    ws.deliver(stream.add("plan.step_completed", { run_id: R }));
    await until(() => first.client.lastSeq === 4 && ws.acks.length === 1, "seq 4 and the ack of 3");
    await until(() => storage.stored()?.last_seq === 3, "seq 3 stored");
    // The page reloads: the old client is gone without a word; a new one
    // reads the stored session.
    const second = newClient(server, { storage });
    t.after(() => second.client.close());
    const ready = second.client.connect();
    const ws2 = await server.accept(1);
    ws2.deliver(connected("sess_fresh", "tok_fresh"));
    await until(() => ws2.sent.length === 1, "the resume");
    assert.deepEqual(ws2.sent[0].metadata, { session_id: "sess_1", resume_token: "tok_sess_1", last_seq: 3, state_checksum: stream.sum(3) });
    stream.add("solver.start", { run_id: R, task_id: "a", attempt: 1 });
    ws2.deliver({ event: "system.connected", metadata: { resumed: true, last_seq: 5, state_checksum: stream.sum(5), replayed: 2 } });
    for (const f of stream.frames.slice(3)) ws2.deliver(f);
    await ready;
    assert.equal(second.client.lastSeq, 5, "connect() resolves once the replay is applied");
    ws.deliver(stream.frames[4]); // the old page's client, for comparison
    await until(() => first.client.lastSeq === 5, "the old client at seq 5");
    assert.deepEqual(toSnapshot(second.client.state), toSnapshot(first.client.state));
    assert.deepEqual([second.client.stats.resyncs, second.client.stats.resumes, second.rec.violations], [0, 1, []]);
    first.client.close();
  });
}

test("close() keeps the session for a later connect(); close({forget: true}) drops it", async () => {
  const server = new FakeServer();
  const storage = new MemoryStorage();
  const { client, rec } = newClient(server, { storage });
  const ws = await connectFresh(server, client);
  client.close();
  assert.equal(ws.closedWith, 1000);
  assert.equal(rec.connections.at(-1), "DISCONNECTED closed");
  await until(() => storage.stored()?.session_id === "sess_1", "kept in storage");
  client.connect();
  const ws2 = await server.accept(1);
  ws2.deliver(connected("sess_2", "tok_2"));
  await until(() => ws2.sent.length === 1, "the resume");
  assert.equal(ws2.sent[0].event, "user.reconnect_with_state");
  client.close({ forget: true });
  await until(() => storage.stored() === null, "removed from storage");
  assert.equal(client.sessionId, "");
  const ready = client.connect();
  const ws3 = await server.accept(2);
  ws3.deliver(connected("sess_3", "tok_3"));
  await ready;
  assert.deepEqual([client.sessionId, ws3.sent], ["sess_3", []]);
  client.close();
});

test("close() before the connection is up rejects connect()", async () => {
  const server = new FakeServer();
  const { client } = newClient(server);
  const ready = client.connect();
  await server.accept(0);
  client.close();
  await assert.rejects(ready, /closed/);
});

test("in a browser the session is stored on pagehide", async (t) => {
  const listeners = new Map();
  globalThis.document = {};
  globalThis.addEventListener = (name, fn) => listeners.set(name, fn);
  globalThis.removeEventListener = (name, fn) => { if (listeners.get(name) === fn) listeners.delete(name); };
  t.after(() => { delete globalThis.document; delete globalThis.addEventListener; delete globalThis.removeEventListener; });
  const server = new FakeServer();
  const storage = new MemoryStorage();
  const { client } = newClient(server, { storage, ackEvery: 1000, ackInterval: 60_000 });
  const ws = await connectFresh(server, client);
  const stream = new Stream("sess_1");
  ws.deliver(stream.add("plan.start", { run_id: R, request: "r" }));
  await until(() => client.lastSeq === 1, "seq 1");
  await until(() => storage.stored(), "the fresh session stored");
  assert.equal(storage.stored().last_seq, 0);
  listeners.get("pagehide")();
  assert.equal(storage.stored().last_seq, 1, "stored synchronously on pagehide");
  assert.equal(storage.stored().state.run.request, "r");
  client.close();
  assert.equal(listeners.has("pagehide"), false);
});
