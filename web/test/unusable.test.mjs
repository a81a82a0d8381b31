// connect() when the client could never connect — no WebSocket
// implementation (Node 20 without --experimental-websocket), no url
// outside a page: it rejects at once with an error that says what to do,
// instead of reconnecting forever.
import test from "node:test";
import assert from "node:assert/strict";

import { BatonClient } from "../static/baton-client.mjs";
import { FakeServer, connected, record } from "../testdata/harness.mjs";

/** Runs fn with globalThis.WebSocket absent, as in Node 20 without the flag. */
async function withoutGlobalWebSocket(fn) {
  const saved = Object.getOwnPropertyDescriptor(globalThis, "WebSocket");
  Object.defineProperty(globalThis, "WebSocket", { value: undefined, configurable: true, writable: true });
  try {
    return await fn();
  } finally {
    if (saved) Object.defineProperty(globalThis, "WebSocket", saved);
    else delete globalThis.WebSocket;
  }
}

/** How p stands once every pending microtask ran: "resolved", "pending" or the rejection. */
function settledNow(p) {
  return Promise.race([
    p.then(() => "resolved", (err) => err),
    new Promise((resolve) => setImmediate(() => resolve("pending"))),
  ]);
}

const noWebSocket = /^baton: no WebSocket implementation: run Node ≥ 22, Node 20 with --experimental-websocket, or pass \{ WebSocket \}$/;

test("connect() rejects at once when it could never connect", async (t) => {
  const cases = [
    { name: "no global WebSocket, none passed", options: { url: "ws://127.0.0.1:9/ws" }, want: noWebSocket },
    { name: "WebSocket: null passed", options: { url: "ws://127.0.0.1:9/ws", WebSocket: null }, want: noWebSocket },
    { name: "WebSocket not a constructor", options: { url: "ws://127.0.0.1:9/ws", WebSocket: {} }, want: noWebSocket },
    { name: "no url outside a page", options: {}, want: /^baton: no url: pass \{ url: "ws:\/\/HOST:PORT\/ws" \}/ },
  ];
  for (const c of cases) {
    await t.test(c.name, () => withoutGlobalWebSocket(async () => {
      const client = new BatonClient({ storage: null, backoffInitial: 1, ...c.options });
      const rec = record(client);
      const got = await settledNow(client.connect());
      assert.ok(got instanceof Error, `connect() is ${got}, want rejected at once`);
      assert.match(got.message, c.want);
      assert.equal(client.connection, "DISCONNECTED");
      assert.deepEqual(rec.connections, [], "no connection attempt, no RECONNECTING");
      // Again: nothing was left half-started by the first call.
      const again = await settledNow(client.connect());
      assert.ok(again instanceof Error && c.want.test(again.message), `second connect() is ${again}`);
      client.close();
    }));
  }
});

test("a WebSocket passed in is used when there is no global one", () => withoutGlobalWebSocket(async () => {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://fake/ws", storage: null, WebSocket: server.WebSocket });
  const ready = client.connect();
  const ws = await server.accept(0);
  ws.deliver(connected("sess_1", "tok_1"));
  await ready;
  assert.equal(client.connection, "CONNECTED");
  client.close();
}));
