// The token option: how BatonClient passes a bearer token at the
// handshake (browsers can set no header on a WebSocket).
import test from "node:test";
import assert from "node:assert/strict";

import { BatonClient } from "../static/baton-client.mjs";
import { FakeServer, MemoryStorage, connected, until } from "../testdata/harness.mjs";

/** A client with options on a FakeServer, and its first socket. */
async function open(options) {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, storage: new MemoryStorage(),
    backoffInitial: 1, ...options });
  const ready = client.connect();
  const ws = await server.accept(0);
  ws.deliver(connected("sess_1", "tok_1"));
  await ready;
  return { server, client, ws };
}

const cases = [
  { name: "no token: no protocols, the URL as given", options: {}, url: "ws://fake/ws", protocols: undefined },
  { name: "a JWT as a subprotocol beside baton", options: { token: "eyJh.eyJz.c2ln-_" },
    url: "ws://fake/ws", protocols: ["baton", "baton.bearer.eyJh.eyJz.c2ln-_"] },
  { name: "the application's protocols kept", options: { token: "t0k", protocols: ["x", "baton"] },
    url: "ws://fake/ws", protocols: ["x", "baton", "baton.bearer.t0k"] },
  { name: "a token a protocol cannot hold goes in the query", options: { token: "a/b+c=" },
    url: "ws://fake/ws?access_token=a%2Fb%2Bc%3D", protocols: undefined },
  { name: "in the query after the URL's own", options: { token: "a b", url: "ws://fake/ws?x=1" },
    url: "ws://fake/ws?x=1&access_token=a%20b", protocols: undefined },
  { name: "a function returning nothing: no token", options: { token: () => null }, url: "ws://fake/ws", protocols: undefined },
];

for (const c of cases) {
  test(`token: ${c.name}`, async (t) => {
    const { client, ws } = await open(c.options);
    t.after(() => client.close());
    assert.equal(ws.url, c.url);
    assert.deepEqual(ws.protocols, c.protocols);
  });
}

test("token: a function is asked again at every connection, so a refreshed token is used", async (t) => {
  let n = 0;
  const { server, client, ws } = await open({ token: () => `tok-${++n}` });
  t.after(() => client.close());
  assert.deepEqual(ws.protocols, ["baton", "baton.bearer.tok-1"]);
  ws.drop(1006);
  const ws2 = await server.accept(1);
  assert.deepEqual(ws2.protocols, ["baton", "baton.bearer.tok-2"]);
  ws2.deliver(connected("sess_2", "tok_2"));
  await until(() => ws2.sent.length > 0, "the resume on the new connection");
  assert.equal(ws2.sent[0].event, "user.reconnect_with_state");
});

test("a connection that fails with error and no close (Node 20, a refused handshake) is retried", async (t) => {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, storage: new MemoryStorage(),
    backoffInitial: 1, token: "t" });
  t.after(() => client.close());
  const ready = client.connect();
  await until(() => server.sockets.length === 1, "the first socket");
  server.sockets[0].fail();
  const ws2 = await server.accept(1);
  ws2.deliver(connected("sess_1", "tok_1"));
  await ready;
  assert.equal(client.connection, "CONNECTED");
  assert.equal(client.stats.reconnects, 1);
});

test("with reconnect off, a failed connection rejects connect", async () => {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, storage: new MemoryStorage(), reconnect: false });
  const ready = client.connect();
  await until(() => server.sockets.length === 1, "the socket");
  server.sockets[0].fail();
  await assert.rejects(ready, /disconnected \(closed 1006\)/);
  assert.equal(client.connection, "DISCONNECTED");
});
