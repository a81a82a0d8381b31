// BatonClient's token option against a real Baton with authentication on,
// run by TestJSClientToken (web/auth_test.go) with the server's WebSocket
// URL in BATON_WS and two of its tokens in BATON_TOKEN_PROTOCOL (one a
// subprotocol can hold) and BATON_TOKEN_QUERY (one it cannot). It exits 0
// when every check held.
//
//   1. the token as a subprotocol: the handshake succeeds (the server
//      selects "baton"; Node's WebSocket, like a browser's, fails one
//      that selects none) and a run completes;
//   2. the token in the access_token query parameter: the same;
//   3. no token, and a wrong one: the handshake is refused and connect
//      rejects (with reconnect off).

import assert from "node:assert/strict";

import { BatonClient } from "../static/baton-client.mjs";
import { until } from "./harness.mjs";

const url = process.env.BATON_WS;
if (!url) {
  console.error("BATON_WS is not set: this script is run by TestJSClientToken");
  process.exit(2);
}

async function run(name, token) {
  const client = new BatonClient({ url, storage: null, token, reconnect: false });
  await client.connect();
  assert.equal(client.connection, "CONNECTED", name);
  client.solveTasks([{ id: "a", title: "A", description: "", depends_on: [] }]);
  await until(() => client.state.run && client.state.run.final_answer !== null, `${name}: the final answer`, 20_000);
  client.close();
  console.log(`# ${name}: connected, run completed`);
}

async function refused(name, token) {
  const client = new BatonClient({ url, storage: null, token, reconnect: false });
  await assert.rejects(client.connect(), `${name}: connect resolved`);
  assert.equal(client.connection, "DISCONNECTED", name);
  console.log(`# ${name}: refused`);
}

async function main() {
  await run("a subprotocol", process.env.BATON_TOKEN_PROTOCOL);
  await run("the query", process.env.BATON_TOKEN_QUERY);
  await refused("no token", undefined);
  await refused("a wrong token", "not-a-token");
  console.log("OK");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
