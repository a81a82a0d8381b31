// The client against a real Baton, run by TestJSClientLive (web/live_test.go)
// with the server's WebSocket URL in BATON_WS. It asks the Go side to cut
// the network by printing "CUT" and reads "CUT-DONE <n>" on stdin. It exits
// 0 when every check held.
//
//   1. a run: message → confirm an edited plan → the network cut in the
//      middle → the client resumes by itself → the final answer, with no
//      violation and every event applied exactly once;
//   2. a reload: a second client with the same storage resumes the session
//      with a replay and holds the same state; the first is told 4000;
//   3. a stored session the server does not know: resume_rejected, a fresh
//      session.

import assert from "node:assert/strict";
import { createInterface } from "node:readline";

import { BatonClient, toSnapshot } from "../static/baton-client.mjs";
import { AsyncMemoryStorage, MemoryStorage, record, until } from "./harness.mjs";

const url = process.env.BATON_WS;
if (!url) {
  console.error("BATON_WS is not set: this script is run by TestJSClientLive");
  process.exit(2);
}

const stdin = createInterface({ input: process.stdin });
const replies = [];
stdin.on("line", (line) => replies.push(line));

/** Prints a request for the Go side and waits for its answer line. */
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
  const storage = new AsyncMemoryStorage(); // as React Native's AsyncStorage
  const options = { url, storage, backoffInitial: 20, backoffMax: 500, ackInterval: 200 };

  // 1. A run with a cut in the middle.
  const a = new BatonClient(options);
  const recA = record(a);
  const seqsA = appliedOnce(a, "client A");
  await a.connect();
  log(`connected: ${a.sessionId}`);
  assert.ok(a.sendMessage("Write a short report on the history of tea"));
  await until(() => a.state.run?.pending_confirm.some((c) => c.kind === "plan_confirm"), "the plan confirmation", 15_000);
  const confirm = a.state.run.pending_confirm.find((c) => c.kind === "plan_confirm");
  const plan = confirm.tasks;
  // The edit: the plan's last task (which builds on all others) is gone, a
  // slow one that builds on the first is added.
  const edit = [...plan.slice(0, -1), { id: "extra", title: "An extra section", description: "[sim:sleep=1s]", depends_on: [plan[0].id] }];
  assert.ok(a.confirmPlan(confirm.step_id, edit));
  await until(() => a.state.run.tasks.some((t) => t.id === "extra" && t.status === "running"), "the extra task running", 15_000);
  const cut = await ask("CUT");
  assert.match(cut, /^CUT-DONE [1-9]/, "the cut dropped no connection");
  log(`cut: ${cut}, last seq ${a.lastSeq}`);
  await until(() => a.state.run.final_answer !== null, "the final answer", 30_000);
  assert.deepEqual(recA.violations, []);
  assert.ok(a.stats.resumes >= 1, `resumes: ${JSON.stringify(a.stats)}`);
  assert.equal(a.stats.resyncs, 0, "a resync: the ring should have held every event");
  assert.ok(recA.connections.includes("CONNECTED resumed"), recA.connections.join(", "));
  assert.deepEqual(seqsA, seqsA.map((_, i) => i + 1), "seqs applied in order without a gap");
  assert.equal(a.lastSeq, seqsA.length);
  const run = a.state.run;
  assert.equal(a.state.phase, "idle");
  assert.deepEqual(run.tasks.map((t) => t.id), edit.map((t) => t.id), "the run's tasks are the edit");
  assert.deepEqual(run.tasks.map((t) => t.status), edit.map(() => "completed"));
  assert.equal(run.status, "succeeded");
  log(`run 1 done: ${a.lastSeq} events, stats ${JSON.stringify(a.stats)}`);

  // 2. A reload: the same storage, a new client; the old one is replaced.
  const b = new BatonClient(options);
  const recB = record(b);
  let replayed = null;
  b.on("connected", (m) => { replayed = m.replayed; });
  appliedOnce(b, "client B");
  await b.connect();
  assert.equal(b.sessionId, a.sessionId);
  assert.deepEqual([b.stats.resumes, b.stats.resyncs, recB.violations], [1, 0, []]);
  assert.equal(b.lastSeq, a.lastSeq);
  assert.equal(b.checksum, a.checksum);
  assert.deepEqual(toSnapshot(b.state), toSnapshot(a.state));
  await until(() => a.connection === "DISCONNECTED", "the old client replaced", 10_000);
  assert.equal(recA.connections.at(-1), "DISCONNECTED replaced");
  log(`reloaded: resumed with a replay of ${replayed} events`);
  const seqB = b.lastSeq;
  assert.ok(b.solveTasks([{ id: "t1", title: "One more", description: "", depends_on: [] }]));
  await until(() => b.state.run.final_answer !== null && b.state.run.run_id !== run.run_id, "the second run's answer", 30_000);
  assert.deepEqual(b.state.run.tasks.map((t) => `${t.id}:${t.status}`), ["t1:completed"]);
  assert.deepEqual(recB.violations, []);
  log(`run 2 done after the reload: seq ${seqB} → ${b.lastSeq}`);

  // 3. A stored session the server does not know.
  const gone = new MemoryStorage();
  gone.setItem("baton-session", JSON.stringify({ v: 1, session_id: "sess_gone", resume_token: "nope", last_seq: 3,
    checksum: "", state: { phase: "idle", run: null }, answers: [], seeds: [] }));
  const c = new BatonClient({ url, storage: gone });
  const recC = record(c);
  await c.connect();
  assert.deepEqual(recC.resets, ["resume_rejected"]);
  assert.match(c.sessionId, /^sess_/);
  assert.notEqual(c.sessionId, "sess_gone");
  assert.deepEqual([c.lastSeq, c.stats.rejected, c.connection], [0, 1, "CONNECTED"]);
  await until(() => gone.stored()?.session_id === c.sessionId, "the new session stored");

  b.close();
  c.close({ forget: true });
  a.close();
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
