// Two devices on one session, against a real Baton, run by
// TestJSClientFollowLive (web/live_test.go) with the server's WebSocket URL
// in BATON_WS. It asks the Go side to cut the network by printing "CUT"
// and reads "CUT-DONE <n>" on stdin. It exits 0 when every check held.
//
//   1. a laptop starts a run; a phone follows the session with the
//      laptop's follow token and approves the plan; the network is cut
//      under both; both resume (following) and end with every event once,
//      the same state, and neither replaced;
//   2. a reload on the laptop without follow (a plain resume) replaces
//      both: each is told 4000.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";

import { BatonClient, toSnapshot } from "../static/baton-client.mjs";
import { MemoryStorage, record, until } from "./harness.mjs";

const url = process.env.BATON_WS;
if (!url) {
  console.error("BATON_WS is not set: this script is run by TestJSClientFollowLive");
  process.exit(2);
}

const stdin = createInterface({ input: process.stdin });
const replies = [];
stdin.on("line", (line) => replies.push(line));

async function ask(request) {
  const n = replies.length;
  console.log(request);
  await until(() => replies.length > n, `the Go side's answer to ${request}`, 10_000);
  return replies[n];
}

const log = (msg) => console.log(`# ${msg}`);

/** Checks every event a client applies is applied once, in seq order. */
function appliedOnce(client, name) {
  const ids = new Set();
  const seqs = [];
  client.on("event", (f) => {
    assert.ok(!ids.has(f.event_id), `${name}: event ${f.event_id} (seq ${f.seq}) applied twice`);
    ids.add(f.event_id);
    seqs.push(f.seq);
  });
  return seqs;
}

async function main() {
  const options = { url, backoffInitial: 20, backoffMax: 500, ackInterval: 200 };
  const laptopStorage = new MemoryStorage();
  const laptop = new BatonClient({ ...options, storage: laptopStorage, follow: true });
  const recL = record(laptop);
  const seqsL = appliedOnce(laptop, "laptop");
  await laptop.connect();
  assert.ok(laptop.followToken, "system.connected gave no follow token");
  assert.ok(laptop.sendMessage("Write a short report on the history of tea"));
  await until(() => laptop.state.run?.pending_confirm.some((c) => c.kind === "plan_confirm"), "the plan confirmation", 15_000);

  // The phone: another device, with its own storage, following.
  const phone = new BatonClient({ ...options, storage: new MemoryStorage() });
  const recP = record(phone);
  const seqsP = appliedOnce(phone, "phone");
  phone.follow(laptop.sessionId, laptop.followToken);
  await phone.connect();
  assert.equal(phone.sessionId, laptop.sessionId);
  assert.equal(phone.followToken, laptop.followToken);
  const confirm = phone.state.run.pending_confirm.find((c) => c.kind === "plan_confirm");
  assert.ok(confirm, "the phone does not see the open plan confirmation");
  // Confirmed as planned: a plan edited at confirmation reaches the other
  // devices' state only in a snapshot (no event carries the edit).
  assert.ok(phone.confirmPlan(confirm.step_id));
  await until(() => laptop.state.run.tasks.some((t) => t.status !== "pending"), "the laptop sees the phone's approval", 15_000);

  const cut = await ask("CUT");
  assert.match(cut, /^CUT-DONE [2-9]/, "the cut did not drop both connections");
  await until(() => laptop.state.run.final_answer !== null, "the laptop's final answer", 30_000);
  await until(() => phone.state.run.final_answer !== null && phone.lastSeq === laptop.lastSeq, "the phone's final answer", 30_000);
  for (const [name, c, rec, seqs] of [["laptop", laptop, recL, seqsL], ["phone", phone, recP, seqsP]]) {
    assert.deepEqual(rec.violations, [], name);
    assert.ok(c.stats.resumes >= 1, `${name} resumes: ${JSON.stringify(c.stats)}`);
    assert.equal(c.stats.resyncs, 0, `${name} resynced: the ring should have held every event`);
    assert.deepEqual(seqs, seqs.map((_, i) => i + 1), `${name}: seqs applied in order, without a gap`);
    assert.ok(!rec.connections.includes("DISCONNECTED replaced"), `${name} was replaced: ${rec.connections.join(", ")}`);
  }
  assert.equal(phone.checksum, laptop.checksum);
  assert.deepEqual(toSnapshot(phone.state), toSnapshot(laptop.state));
  assert.deepEqual(laptop.state.run.tasks.map((t) => t.status), confirm.tasks.map(() => "completed"));
  log(`both done: ${laptop.lastSeq} events; laptop ${JSON.stringify(laptop.stats)}, phone ${JSON.stringify(phone.stats)}`);

  // 2. A reload of the laptop without follow: a plain resume replaces
  // every connection, the phone's included.
  const reload = new BatonClient({ ...options, storage: laptopStorage });
  await reload.connect();
  assert.equal(reload.sessionId, laptop.sessionId);
  await until(() => laptop.connection === "DISCONNECTED" && phone.connection === "DISCONNECTED", "both replaced", 10_000);
  assert.equal(recL.connections.at(-1), "DISCONNECTED replaced");
  assert.equal(recP.connections.at(-1), "DISCONNECTED replaced");
  reload.close();
  laptop.close();
  phone.close();
}

try {
  await main();
  console.log("OK");
  stdin.close();
  process.exit(0);
} catch (err) {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
}
