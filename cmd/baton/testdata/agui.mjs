// Runs AG-UI's own TypeScript client against a real Baton (agui_node_test.go):
// @ag-ui/client's HttpAgent through a plan-mode run with its interrupt and
// resume, and a chat-mode run; and a plain fetch client that cuts a stream
// mid-run and resumes it with Last-Event-ID. Every event must pass
// @ag-ui/core's schemas and every stream @ag-ui/client's verifyEvents
// (HttpAgent applies it to every run too), and every state
// patch must apply (fast-json-patch, as HttpAgent applies them).
//
// BATON_URL is the server, BATON_NODE_MODULES the node_modules holding
// the packages (internal/npmtest). Prints OK at the end.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import assert from "node:assert/strict";

const require = createRequire(process.env.BATON_NODE_MODULES + "/");
const { HttpAgent, verifyEvents } = require("@ag-ui/client");
const { EventSchemas } = require("@ag-ui/core/schemas");
const { from, lastValueFrom, toArray } = require("rxjs");
const jsonpatch = require("fast-json-patch");
const base = process.env.BATON_URL;

// A state patch HttpAgent cannot apply is only a warning there: fail.
const warn = console.warn;
console.warn = (...args) => {
  warn(...args);
  if (String(args[0]).includes("Failed to apply")) {
    process.exitCode = 1;
    throw new Error("a state patch did not apply: " + args[0]);
  }
};

// verify checks a stream with @ag-ui/core's event schemas, event by
// event, and @ag-ui/client's verifyEvents, as a whole.
async function verify(events, what) {
  for (const [i, e] of events.entries()) {
    const r = EventSchemas.safeParse(e);
    if (!r.success) throw new Error(`${what}: event ${i} (${e.type}) fails @ag-ui/core's schema: ${r.error.message}`);
  }
  try {
    await lastValueFrom(verifyEvents(undefined)(from(events)).pipe(toArray()));
  } catch (e) {
    throw new Error(`${what}: verifyEvents refused the stream: ${e.message}`);
  }
}

function recorder() {
  const events = [];
  return { events, onEvent: ({ event }) => { events.push(event); } };
}

// The plan run: the first run ends with the plan's interrupt; the second,
// resuming it, runs the same Baton run to its answer.
async function planRun() {
  const agent = new HttpAgent({ url: base + "/agui", threadId: randomUUID() });
  agent.addMessage({ id: randomUUID(), role: "user", content: "Compare Go and Rust" });
  const first = recorder();
  await agent.runAgent({ forwardedProps: { mode: "plan" } }, first);
  await verify(first.events, "plan, first run");
  assert.equal(agent.pendingInterrupts.length, 1, "one interrupt pending");
  const [interrupt] = agent.pendingInterrupts;
  assert.equal(interrupt.reason, "plan_confirm");
  assert.equal(agent.state.phase, "awaiting_confirm");
  assert.ok(Object.keys(agent.state.run.tasks).length >= 2, "the plan's tasks are in the state");

  const second = recorder();
  const { result } = await agent.runAgent(
    { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { confirmed: true } }] }, second);
  await verify(second.events, "plan, resumed run");
  assert.equal(agent.pendingInterrupts.length, 0, "no interrupt left");
  assert.equal(result.status, "succeeded");
  assert.equal(agent.state.phase, "idle");
  assert.equal(agent.state.run.final_answer, result.answer);
  for (const t of Object.values(agent.state.run.tasks)) assert.equal(t.status, "completed", `task ${t.id}`);
  const said = agent.messages.filter((m) => m.role === "assistant" && typeof m.content === "string" && m.content);
  assert.equal(said.at(-1).content, result.answer, "the answer is the last assistant message");
  assert.ok(agent.messages.some((m) => m.role === "tool"), "tool results are messages");
  console.log(`plan run: ${first.events.length} + ${second.events.length} events`);
}

// A declined plan: the resumed run ends cancelled, and the thread takes
// a new request after it.
async function declinedRun() {
  const agent = new HttpAgent({ url: base + "/agui", threadId: randomUUID() });
  agent.addMessage({ id: randomUUID(), role: "user", content: "Plan a party" });
  await agent.runAgent({ forwardedProps: { mode: "plan" } });
  const [interrupt] = agent.pendingInterrupts;
  const rec = recorder();
  await agent.runAgent({ resume: [{ interruptId: interrupt.id, status: "cancelled" }] }, rec);
  await verify(rec.events, "declined plan");
  assert.deepEqual(rec.events.at(-1).outcome, { type: "cancelled" });
  assert.equal(agent.state.phase, "idle");
  agent.addMessage({ id: randomUUID(), role: "user", content: "Just say hello" });
  const { result } = await agent.runAgent({ forwardedProps: { mode: "chat" } });
  assert.equal(result.status, "succeeded", "a new request on the thread runs");
  console.log("declined plan: cancelled, then a chat run on the thread");
}

// The chat run: no interrupt; the answer streams as one message.
async function chatRun() {
  const agent = new HttpAgent({ url: base + "/agui", threadId: randomUUID() });
  agent.addMessage({ id: randomUUID(), role: "user", content: "What time is it in Tokyo?" });
  const rec = recorder();
  const { result } = await agent.runAgent({ forwardedProps: { mode: "chat" } }, rec);
  await verify(rec.events, "chat run");
  assert.equal(agent.pendingInterrupts.length, 0);
  assert.equal(agent.state.run.mode, "chat");
  assert.equal(agent.state.run.final_answer, result.answer);
  assert.ok(rec.events.some((e) => e.type === "TEXT_MESSAGE_CONTENT"), "the answer streams");
  const said = agent.messages.filter((m) => m.role === "assistant" && typeof m.content === "string" && m.content);
  assert.equal(said.length, 1, "one assistant message: the streamed answer, not again at the end");
  assert.equal(said[0].content, result.answer);
  console.log(`chat run: ${rec.events.length} events`);
}

// sse reads a response's events, [{id, event}], stopping after max (a cut).
async function sse(resp, max = Infinity) {
  assert.equal(resp.status, 200, `status ${resp.status}`);
  const out = [];
  const dec = new TextDecoder();
  let buf = "";
  const reader = resp.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      let id = null, data = null;
      for (const line of block.split("\n")) {
        if (line.startsWith("id: ")) id = line.slice(4);
        if (line.startsWith("data: ")) data = JSON.parse(line.slice(6));
      }
      if (data === null) continue;
      out.push({ id, event: data });
      if (out.length === max) {
        await reader.cancel();
        return out;
      }
    }
  }
  return out;
}

const post = (input) => fetch(base + "/agui", {
  method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify(input),
});
const get = (thread, lastId, runId) => fetch(`${base}/agui/${thread}?runId=${runId}`, {
  headers: lastId ? { "Last-Event-ID": lastId, Accept: "text/event-stream" } : { Accept: "text/event-stream" },
});

// The fetch client: the resumed run's stream is cut after a few events
// and resumed with Last-Event-ID, twice; the pieces make one valid stream
// with every event once — the same events a replay of the whole stream
// gives afterwards — and its patches make the server's state.
async function cutAndResume() {
  const thread = randomUUID();
  const input = (runId, extra) => ({ threadId: thread, runId, messages: [], tools: [], context: [], ...extra });
  const first = await sse(await post(input("f1", {
    messages: [{ id: "u1", role: "user", content: "Plan a trip to Kyoto" }], forwardedProps: { mode: "plan" },
  })));
  await verify(first.map((e) => e.event), "fetch, first run");
  const interrupt = first.at(-1).event.outcome.interrupts[0];

  let got = await sse(await post(input("f2", {
    resume: [{ interruptId: interrupt.id, status: "resolved", payload: { confirmed: true } }],
  })), 12);
  const cuts = [got.length];
  got = got.concat(await sse(await get(thread, got.at(-1).id, "f2"), 25));
  cuts.push(got.length);
  got = got.concat(await sse(await get(thread, got.at(-1).id, "f2")));
  const events = got.map((e) => e.event);
  await verify(events, "fetch, cut twice and resumed");
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  assert.equal(new Set(got.map((e) => e.id)).size, got.length, "no id twice");

  // Every event once: a replay of the stream from its third event on
  // gives what the cut client saw from there.
  const replay = await sse(await get(thread, got[2].id, "f2"));
  assert.deepEqual(replay, got.slice(3), "the pieces are the stream");

  // The patches make the server's state.
  let state = {};
  for (const e of events) {
    if (e.type === "STATE_SNAPSHOT") state = structuredClone(e.snapshot);
    if (e.type === "STATE_DELTA") state = jsonpatch.applyPatch(state, e.delta, true, false).newDocument;
  }
  const now = await sse(await get(thread, null, "f3"));
  assert.deepEqual(state, now[1].event.snapshot, "the stream's state is the server's");
  assert.equal((await get(thread, got.at(-1).id, "f2")).status, 204, "a stream read whole");
  console.log(`fetch client: ${got.length} events, cut after ${cuts.join(" and ")}`);
}

await planRun();
await declinedRun();
await chatRun();
await cutAndResume();
console.log("OK");
