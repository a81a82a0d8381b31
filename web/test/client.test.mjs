// BatonClient against a scripted WebSocket: applying events (order,
// dedupe, gaps, the checksum chain), snapshots, acks, answers sent again
// after a resume, and the task lists it seeds runs with.
import test from "node:test";
import assert from "node:assert/strict";

import { BatonClient, initialState, reduce, fromSnapshot, toSnapshot } from "../static/baton-client.mjs";
import {
  FakeServer, Stream, MemoryStorage, AsyncMemoryStorage, connected, systemError, record, until,
} from "../testdata/harness.mjs";

/** A client connected to a fresh session sess_1 of a FakeServer. */
async function start(options = {}) {
  const server = new FakeServer();
  const storage = "storage" in options ? options.storage : new MemoryStorage();
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, backoffInitial: 1, ...options, storage });
  const rec = record(client);
  const ready = client.connect();
  const ws = await server.accept(0);
  ws.deliver(connected("sess_1", "tok_1"));
  await ready;
  return { server, storage, client, rec, ws, stream: new Stream("sess_1") };
}

/** Drops ws and resumes on the client's next socket, answered with reply. */
async function resume(server, ws, reply, n = 1) {
  ws.drop(1006);
  const ws2 = await server.accept(n);
  ws2.deliver(connected(`sess_fresh${n}`, `tok_fresh${n}`));
  await until(() => ws2.sent.length > 0, "user.reconnect_with_state");
  if (reply) ws2.deliver(reply);
  return ws2;
}

const R = "run_1";
const TASKS = [{ id: "a", title: "A", description: "", depends_on: [] }, { id: "b", title: "B", description: "", depends_on: ["a"] }];

test("connect takes the connection's fresh session and stores it", async (t) => {
  const { client, rec, storage } = await start();
  t.after(() => client.close());
  assert.equal(client.sessionId, "sess_1");
  assert.equal(client.connection, "CONNECTED");
  assert.deepEqual(rec.connections, ["CONNECTING connecting", "CONNECTED new session"]);
  await until(() => storage.stored(), "the session stored");
  assert.deepEqual([storage.stored().session_id, storage.stored().resume_token, storage.stored().last_seq], ["sess_1", "tok_1", 0]);
});

test("sequenced events are applied once and in seq order, though hashing is asynchronous", async (t) => {
  const { client, rec, ws, stream } = await start();
  t.after(() => client.close());
  stream.add("plan.start", { run_id: R, request: "r" });
  stream.add("plan.completed", { run_id: R, plan_summary: "p", tasks: TASKS });
  for (let i = 0; i < 200; i++) stream.add("plan.step_completed", { run_id: R, step: i });
  let expected = initialState();
  for (const f of stream.frames) {
    ws.deliver(f); // all at once: the client must still take them one by one
    expected = reduce(expected, f);
  }
  ws.deliver(stream.frames[1]); // a replayed duplicate
  await until(() => client.stats.duplicates === 1, "the duplicate dropped");
  assert.deepEqual(rec.events.map((f) => f.seq), stream.frames.map((f) => f.seq));
  assert.equal(client.lastSeq, stream.latest);
  assert.equal(client.checksum, stream.sum());
  assert.deepEqual(client.state, expected);
  assert.deepEqual(client.stats, { events: 202, duplicates: 1, resumes: 0, resyncs: 0, rejected: 0, reconnects: 0 });
  assert.deepEqual(rec.violations, []);
  assert.equal(rec.events.every((f) => f.replayed === false), true);
});

test("a gap in seqs is a violation", async (t) => {
  const { client, rec, ws, stream } = await start();
  t.after(() => client.close());
  const [first, , third] = [stream.add("plan.start", { run_id: R }), stream.add("plan.step_completed", {}), stream.add("plan.step_completed", {})];
  ws.deliver(first);
  ws.deliver(third);
  await until(() => client.lastSeq === 3, "seq 3 applied");
  assert.deepEqual(rec.violations, ["gap: event seq 3 after 1"]);
});

test("frames that are not JSON objects with an event are violations", async (t) => {
  const { client, rec, ws } = await start();
  t.after(() => client.close());
  ws.deliver("{not json");
  ws.deliver("[1,2]");
  ws.deliver({ seq: 1 });
  ws.deliver({ event: "plan.start", metadata: {} }); // sequenced, but no seq
  await until(() => rec.violations.length === 4, "four violations");
  assert.equal(client.lastSeq, 0);
});

test("acks every ackEvery events", async (t) => {
  const { client, ws, stream, storage } = await start({ ackEvery: 3, ackInterval: 60_000 });
  t.after(() => client.close());
  for (let i = 0; i < 7; i++) ws.deliver(stream.add("plan.step_completed", { run_id: R, step: i }));
  await until(() => client.lastSeq === 7 && ws.acks.length === 2, "seq 7 and two acks");
  assert.deepEqual(ws.acks, [3, 6]);
  assert.ok(storage.stored().last_seq >= 6, "stored before the ack");
  assert.equal(client.ack(), true);
  await until(() => ws.acks.length === 3, "the third ack");
  assert.deepEqual(ws.acks, [3, 6, 7]);
});

test("acks ackInterval after the first unacked event", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { client, ws, stream } = await start({ ackInterval: 1000 });
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  await until(() => client.lastSeq === 1, "seq 1 applied");
  ws.deliver(stream.add("plan.step_completed", { run_id: R }));
  await until(() => client.lastSeq === 2, "seq 2 applied");
  t.mock.timers.tick(999);
  await until(() => true, "a turn");
  assert.deepEqual(ws.acks, []);
  t.mock.timers.tick(1);
  await until(() => ws.acks.length === 1, "the timed ack");
  assert.deepEqual(ws.acks, [2]);
});

test("the ack waits until the session is stored", async (t) => {
  const storage = new AsyncMemoryStorage();
  const { client, ws, stream } = await start({ storage, ackEvery: 2 });
  t.after(() => client.close());
  await until(() => storage.stored(), "the fresh session stored");
  storage.hold();
  ws.deliver(stream.add("plan.start", { run_id: R, request: "r" }));
  ws.deliver(stream.add("plan.step_completed", { run_id: R }));
  await until(() => client.lastSeq === 2, "seq 2 applied");
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r)); // let a wrong client send it
  assert.deepEqual(ws.acks, [], "acked before the session was stored");
  storage.release();
  await until(() => ws.acks.length === 1, "the ack");
  assert.equal(storage.stored().last_seq, 2);
  assert.equal(storage.stored().state.run.request, "r");
});

test("a storage that fails does not break the client", async (t) => {
  const storage = new MemoryStorage();
  storage.getItem = () => { throw new Error("SecurityError"); };
  storage.fail = true;
  const { client, ws, stream, rec } = await start({ storage, ackEvery: 2 });
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  ws.deliver(stream.add("plan.step_completed", { run_id: R }));
  await until(() => ws.acks.length === 1, "the ack, though the session could not be stored");
  assert.deepEqual([client.sessionId, client.lastSeq, rec.violations], ["sess_1", 2, []]);
});

test("a resume sends user.reconnect_with_state first, applies the replay and checks the server's checksum", async (t) => {
  const { server, client, rec, ws, stream } = await start();
  t.after(() => client.close());
  for (let i = 0; i < 3; i++) ws.deliver(stream.add("plan.step_completed", { run_id: R, step: i }));
  await until(() => client.lastSeq === 3, "seq 3");
  for (let i = 0; i < 3; i++) stream.add("plan.step_completed", { run_id: R, step: i }); // 4..6, sent while the network was down
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { session_id: "sess_1", resume_token: "tok_1",
    resumed: true, last_seq: 6, state_checksum: stream.sum(6), replayed: 3 } });
  assert.deepEqual(ws2.sent[0], { event: "user.reconnect_with_state", metadata: { session_id: "sess_1", resume_token: "tok_1",
    last_seq: 3, state_checksum: stream.sum(3) } });
  ws2.deliver(stream.frames[2]); // seq 3 again: dropped
  for (const f of stream.frames.slice(3)) ws2.deliver(f);
  ws2.deliver(stream.add("plan.step_completed", { run_id: R, step: 7 }));
  await until(() => client.lastSeq === 7, "seq 7");
  assert.deepEqual(rec.events.map((f) => [f.seq, f.replayed]), [[1, false], [2, false], [3, false], [4, true], [5, true], [6, true], [7, false]]);
  assert.deepEqual([client.stats.resumes, client.stats.duplicates, client.stats.reconnects], [1, 1, 1]);
  assert.deepEqual(rec.violations, []);
  assert.deepEqual(rec.connections.slice(2), ["RECONNECTING closed 1006", "CONNECTED resumed"]);
});

test("a replay that ends on a checksum other than the client's is a violation", async (t) => {
  const { server, client, rec, ws, stream } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  await until(() => client.lastSeq === 1, "seq 1");
  stream.add("plan.step_completed", { run_id: R });
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { resumed: true, last_seq: 2,
    state_checksum: "0".repeat(64), replayed: 1 } });
  ws2.deliver(stream.frames[1]);
  await until(() => rec.violations.length === 1, "the violation");
  assert.match(rec.violations[0], /^checksum at seq 2: client [0-9a-f]{64}, server 0{64}$/);
  // Nothing to replay, and a checksum that differs at once.
  await resume(server, ws2, { event: "system.connected", metadata: { resumed: true, last_seq: 2, state_checksum: "f".repeat(64), replayed: 0 } }, 2);
  await until(() => rec.violations.length === 2, "the second violation");
  assert.match(rec.violations[1], /^checksum at seq 2: client [0-9a-f]{64}, server f{64}$/);
});

test("a resync replaces the state, seq and checksum with the snapshot's", async (t) => {
  const { server, client, rec, ws, stream } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R, request: "old" }));
  await until(() => client.lastSeq === 1, "seq 1");
  for (let i = 0; i < 9; i++) stream.add("plan.step_completed", { run_id: R });
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { resumed: true, resync: true, replayed: 0, last_seq: 10 } });
  const snapshot = { seq: 10, state_checksum: stream.sum(10), phase: "solving", run: { run_id: R, request: "snap",
    plan_summary: "p", plan_version: 1, pending_confirm: [], answers: [], last_decision: null, final_answer: null,
    tasks: [{ id: "a", title: "A", description: "", depends_on: [], status: "running", attempt: 1, todo: null }] } };
  ws2.deliver({ event: "system.state_snapshot", metadata: snapshot });
  ws2.deliver(stream.add("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "ok" }));
  await until(() => client.lastSeq === 11, "seq 11");
  assert.deepEqual(client.state, reduce(fromSnapshot(snapshot), stream.frames[10]));
  assert.equal(client.checksum, stream.sum(11));
  assert.deepEqual([client.stats.resumes, client.stats.resyncs, rec.snapshots.length, rec.violations], [1, 1, 1, []]);
  assert.equal(rec.connections.at(-1), "CONNECTED resynced");
});

test("answers of the run are sent again after a resume; step_id_mismatch to those is resent", async (t) => {
  const { server, client, rec, ws, stream } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  ws.deliver(stream.add("plan.completed", { run_id: R, tasks: TASKS }));
  ws.deliver(stream.add("solver.start", { run_id: R, task_id: "a", attempt: 1 }));
  ws.deliver(stream.add("agent.user_confirm", { run_id: R, step_id: "confirm_input_1", kind: "input_request", task_id: "a", question: "q?" }));
  await until(() => client.state.run?.pending_confirm.length === 1, "the question");
  assert.equal(client.answerInput("confirm_input_1", "yes"), true);
  assert.deepEqual(ws.frames.at(-1), { event: "user.response", step_id: "confirm_input_1", metadata: { text: "yes" } });
  assert.deepEqual([client.state.run.pending_confirm, client.state.run.answers],
    [[], [{ step_id: "confirm_input_1", task_id: "a", question: "q?", text: "yes" }]]);
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { resumed: true, last_seq: 4, state_checksum: stream.sum(4), replayed: 0 } });
  await until(() => ws2.frames.length === 2, "the answer sent again");
  assert.deepEqual(ws2.frames[1], { event: "user.response", step_id: "confirm_input_1", metadata: { text: "yes" } });
  ws2.deliver(systemError("step_id_mismatch", "user.response"));
  await until(() => rec.errors.length === 1, "the error");
  assert.equal(rec.errors[0].resent, true);
  client.respond("confirm_other", { approved: true }); // a new answer: the next mismatch may be its
  ws2.deliver(systemError("step_id_mismatch", "user.response"));
  await until(() => rec.errors.length === 2, "the second error");
  assert.equal(rec.errors[1].resent, false);
});

test("an answer the server refuses opens its question again, where it was, and is not sent again", async (t) => {
  const { server, client, rec, ws, stream } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  ws.deliver(stream.add("solver.start", { run_id: R, task_id: "a", attempt: 1 }));
  const ask = { run_id: R, step_id: "confirm_input_1", kind: "input_request", task_id: "a", question: "q?" };
  const tool = { run_id: R, step_id: "confirm_tool_1", kind: "tool_confirm", task_id: "b", tool: "rm" };
  ws.deliver(stream.add("agent.user_confirm", ask));
  ws.deliver(stream.add("agent.user_confirm", tool));
  await until(() => client.state.run?.pending_confirm.length === 2, "the questions");
  const before = client.state.run.pending_confirm;

  client.respond("confirm_input_1", { text: 5 }); // not a string: invalid_message, the question stays open
  assert.deepEqual(client.state.run.pending_confirm.map((c) => c.step_id), ["confirm_tool_1"]);
  ws.deliver(systemError("invalid_message", "user.response"));
  await until(() => rec.errors.length === 1, "the refusal");
  assert.deepEqual(client.state.run.pending_confirm, before);
  assert.deepEqual(client.state.run.answers, []);

  // Answered properly this time; a later refusal of another frame opens nothing.
  client.answerInput("confirm_input_1", "yes");
  ws.deliver(systemError("invalid_message", "user.cancel_task"));
  await until(() => rec.errors.length === 2, "an unrelated error");
  assert.deepEqual(client.state.run.pending_confirm.map((c) => c.step_id), ["confirm_tool_1"]);
  assert.deepEqual(client.state.run.answers.map((a) => a.text), ["yes"]);

  // Only the accepted answer is sent again after a resume.
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { resumed: true, last_seq: 4, state_checksum: stream.sum(4), replayed: 0 } });
  await until(() => ws2.frames.length === 2, "the answer sent again");
  assert.deepEqual(ws2.frames.slice(1), [{ event: "user.response", step_id: "confirm_input_1", metadata: { text: "yes" } }]);
});

test("an answer given from an event listener is in the last state emitted", async (t) => {
  const { client, ws, stream } = await start();
  t.after(() => client.close());
  client.on("event", (f) => {
    if (f.event === "agent.user_confirm") client.approveTool(f.metadata.step_id, true);
  });
  const states = [];
  client.on("state", (s) => states.push(s));
  ws.deliver(stream.add("plan.start", { run_id: R }));
  ws.deliver(stream.add("agent.user_confirm", { run_id: R, step_id: "confirm_tool_1", kind: "tool_confirm", task_id: "a", tool: "rm" }));
  await until(() => client.lastSeq === 2, "seq 2");
  assert.deepEqual(states.at(-1).run.pending_confirm, []);
  assert.equal(states.at(-1), client.state);
});

test("answers are forgotten when their run ends", async (t) => {
  const { server, client, ws, stream } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R }));
  ws.deliver(stream.add("agent.user_confirm", { run_id: R, step_id: "confirm_plan_1", kind: "plan_confirm", tasks: TASKS }));
  await until(() => client.state.phase === "awaiting_confirm", "the confirmation");
  client.rejectPlan("confirm_plan_1");
  ws.deliver(stream.add("plan.cancelled", { run_id: R, reason: "user_reject" }));
  await until(() => client.lastSeq === 3, "seq 3");
  const ws2 = await resume(server, ws, { event: "system.connected", metadata: { resumed: true, last_seq: 3, state_checksum: stream.sum(3), replayed: 0 } });
  await until(() => client.connection === "CONNECTED", "resumed");
  assert.deepEqual(ws2.frames.map((f) => f.event), ["user.reconnect_with_state"]);
});

test("an edited plan and user.solve_tasks seed their run at its first solver.start", async (t) => {
  const { client, ws, stream, rec } = await start();
  t.after(() => client.close());
  ws.deliver(stream.add("plan.start", { run_id: R, request: "r" }));
  ws.deliver(stream.add("plan.completed", { run_id: R, tasks: TASKS }));
  ws.deliver(stream.add("agent.user_confirm", { run_id: R, step_id: "confirm_plan_1", kind: "plan_confirm", tasks: TASKS }));
  await until(() => client.state.phase === "awaiting_confirm", "the confirmation");
  const edit = [{ id: "x", title: "X", depends_on: [] }, { id: "a", title: "A2", depends_on: ["x"] }];
  assert.equal(client.confirmPlan("confirm_plan_1", edit), true);
  assert.deepEqual(ws.frames.at(-1).metadata, { confirmed: true, tasks: edit });
  edit[0].id = "changed later by the app";
  ws.deliver(stream.add("solver.start", { run_id: R, task_id: "x", attempt: 1 }));
  await until(() => client.lastSeq === 4, "seq 4");
  assert.deepEqual(client.state.run.tasks.map((t) => `${t.id}:${t.title}:${t.status}`), ["x:X:running", "a:A2:pending"]);
  assert.equal(client.state.run.request, "r");
  ws.deliver(stream.add("agent.final_answer", { run_id: R, content: "done" }));

  // A refused user.solve_tasks seeds nothing.
  client.solveTasks([{ id: "no", title: "No" }]);
  ws.deliver(systemError("busy", "user.solve_tasks"));
  await until(() => rec.errors.length === 1, "busy");
  assert.equal(client.solveTasks(TASKS, { adaptive: true }), true);
  assert.deepEqual(ws.frames.at(-1), { event: "user.solve_tasks", metadata: { tasks: TASKS, adaptive: true } });
  ws.deliver(stream.add("solver.start", { run_id: "run_2", task_id: "a", attempt: 1 }));
  await until(() => client.lastSeq === 6, "seq 6");
  assert.deepEqual(toSnapshot(client.state).run.tasks.map((t) => `${t.id}:${t.status}`), ["a:running", "b:pending"]);
  assert.deepEqual([client.state.run.run_id, client.state.run.request, client.state.run.plan_version], ["run_2", "", 1]);
});

test("the send helpers write the frames of docs/protocol.md", async (t) => {
  const { client, ws } = await start();
  t.after(() => client.close());
  const calls = [
    [() => client.sendMessage("hello"), { event: "user.message", content: "hello" }],
    [() => client.sendMessage("hi", { adaptive: true }), { event: "user.message", content: "hi", metadata: { adaptive: true } }],
    [() => client.confirmPlan("s1"), { event: "user.response", step_id: "s1", metadata: { confirmed: true } }],
    [() => client.answerTaskFailed("s2", "skip"), { event: "user.response", step_id: "s2", metadata: { action: "skip" } }],
    [() => client.approveTool("s3", false), { event: "user.response", step_id: "s3", metadata: { approved: false } }],
    [() => client.answerAdjust("s4", true), { event: "user.response", step_id: "s4", metadata: { confirmed: true } }],
    [() => client.answerAdjust("s5", true, TASKS), { event: "user.response", step_id: "s5", metadata: { confirmed: true, tasks: TASKS } }],
    [() => client.replan("shorter"), { event: "user.replan", metadata: { feedback: "shorter" } }],
    [() => client.cancel(), { event: "user.cancel" }],
    [() => client.cancelTask("a"), { event: "user.cancel_task", metadata: { task_id: "a" } }],
    [() => client.restartTask("b"), { event: "user.restart_task", metadata: { task_id: "b" } }],
    [() => client.send("user.custom", { content: "c", metadata: { k: 1 } }), { event: "user.custom", content: "c", metadata: { k: 1 } }],
  ];
  for (const [call, want] of calls) {
    assert.equal(call(), true);
    assert.deepEqual(ws.frames.at(-1), want);
  }
});

test("send returns false when not connected", async () => {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://fake/ws", WebSocket: server.WebSocket, storage: null });
  assert.equal(client.sendMessage("x"), false);
  const ready = client.connect();
  const ws = await server.accept(0);
  assert.equal(client.cancel(), false, "before system.connected");
  ws.deliver(connected("s", "t"));
  await ready;
  assert.equal(client.cancel(), true);
  client.close();
  assert.equal(client.cancel(), false);
  assert.equal(client.respond("s", { approved: true }), false);
  assert.equal(client.ack(), false);
});
