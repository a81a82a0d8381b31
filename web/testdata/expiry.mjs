// BatonClient against a real Baton verifying JWTs with no leeway, run by
// TestJSClientExpiry (web/auth_test.go) with the server's WebSocket URL in
// BATON_WS and the JWT secret in BATON_JWT_SECRET. Its token option is a
// function issuing JWTs that expire 1.5 s later. It exits 0 when every
// check held.
//
//   1. each connection is closed with 4001 (token expired) at its JWT's
//      exp; the client asks the function again and resumes the session,
//      twice at least, while a run goes on and completes;
//   2. every resume rotated the resume token: each stored one is new, and
//      the first, presented on a connection of its own, is answered
//      resume_rejected.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";

import { BatonClient } from "../static/baton-client.mjs";
import { MemoryStorage, until } from "./harness.mjs";

const url = process.env.BATON_WS;
const secret = process.env.BATON_JWT_SECRET;
if (!url || !secret) {
  console.error("BATON_WS or BATON_JWT_SECRET is not set: this script is run by TestJSClientExpiry");
  process.exit(2);
}

const b64 = (s) => Buffer.from(s).toString("base64url");

/** An HS256 JWT for alice expiring in ms. */
function jwt(ms) {
  const s = `${b64(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64(JSON.stringify({ sub: "alice", exp: (Date.now() + ms) / 1000 }))}`;
  return `${s}.${createHmac("sha256", secret).update(s).digest("base64url")}`;
}

async function main() {
  // Every resume token the client stores, in order, each change once.
  const tokens = [];
  const storage = new MemoryStorage();
  const setItem = storage.setItem.bind(storage);
  storage.setItem = (k, v) => {
    setItem(k, v);
    const t = JSON.parse(v).resume_token;
    if (t !== tokens[tokens.length - 1]) tokens.push(t);
  };
  let issued = 0;
  const closes = [];
  const client = new BatonClient({ url, storage, storageKey: "k", backoffInitial: 50, backoffMax: 200,
    token: () => { issued++; return jwt(1500); } });
  client.on("connection", (state, detail) => { if (state === "RECONNECTING") closes.push(detail); });
  await client.connect();
  const session = client.sessionId;

  // A run long enough to outlive a few tokens: each task takes 1 s.
  const tasks = ["a", "b", "c", "d"].map((id, i) => ({ id, title: id.toUpperCase(),
    description: "Work [sim:sleep=1s]", depends_on: i ? [["a", "b", "c", "d"][i - 1]] : [] }));
  client.solveTasks(tasks);
  await until(() => client.stats.resumes >= 2 && client.state.run && client.state.run.final_answer !== null,
    "two resumes and the final answer", 40_000);
  await until(() => tokens.length >= client.stats.resumes + 1, "the resume tokens stored", 5_000);
  client.close();

  assert.equal(client.sessionId, session, "the session changed");
  assert.equal(client.stats.rejected, 0, "a resume was rejected");
  assert.ok(closes.length >= 2 && closes.every((d) => d === "closed 4001"), `the closes: ${closes}`);
  assert.ok(issued >= 3, `the token function was asked ${issued} times`);
  assert.equal(new Set(tokens).size, tokens.length, `a resume token came back: ${tokens}`);
  console.log(`# ${closes.length} closes with 4001, ${client.stats.resumes} resumes, ${tokens.length} resume tokens, all different`);

  // The first resume token is dead.
  const ws = new WebSocket(url, ["baton", `baton.bearer.${jwt(60_000)}`]);
  const frames = [];
  ws.onmessage = (ev) => frames.push(JSON.parse(ev.data));
  await until(() => frames.length === 1, "system.connected");
  ws.send(JSON.stringify({ event: "user.reconnect_with_state", metadata: { session_id: session,
    resume_token: tokens[0], last_seq: 0, state_checksum: "" } }));
  await until(() => frames.length === 2, "the answer to the resume with the first token");
  ws.close();
  assert.equal(frames[1].event, "system.error", JSON.stringify(frames[1]));
  assert.equal(frames[1].metadata.code, "resume_rejected");
  console.log("# the first resume token is rejected");
  console.log("OK");
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
