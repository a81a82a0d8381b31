// The JS half of the agreement test (TestJSReducerAgrees in
// web/agree_test.go). BATON_AGREE names a directory holding log.json — a
// session recorded from a real server: {in} frames it sent, {out} frames
// the client sent, {snapshot} the server's own state at quiet moments — and
// expected.json, wsproto.State after each entry of the log.
//
// The log is replayed through a BatonClient on a scripted WebSocket: the
// server's frames delivered, the client's frames sent again through the
// client's own helpers (and compared with the recorded ones). After every
// entry the client's state, as toSnapshot gives it, must equal
// wsproto.State's; at a snapshot, the server's too.

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { BatonClient, toSnapshot } from "../static/baton-client.mjs";
import { FakeServer, firstDiff, record, until } from "./harness.mjs";

const dir = process.env.BATON_AGREE;
if (!dir) {
  console.error("BATON_AGREE is not set: this script is run by TestJSReducerAgrees");
  process.exit(2);
}
const log = JSON.parse(readFileSync(join(dir, "log.json"), "utf8"));
const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));

/** Sends a recorded client frame through the client's helper for it. */
function sendAgain(client, f) {
  const m = f.metadata || {};
  switch (f.event) {
    case "user.message": return client.sendMessage(f.content, { adaptive: m.adaptive === true, mode: m.mode });
    case "user.solve_tasks": return client.solveTasks(m.tasks, { adaptive: m.adaptive === true });
    case "user.replan": return client.replan(m.feedback);
    case "user.cancel": return client.cancel();
    case "user.cancel_task": return client.cancelTask(m.task_id);
    case "user.restart_task": return client.restartTask(m.task_id);
    case "user.response": {
      const c = client.state.run?.pending_confirm.find((p) => p.step_id === f.step_id);
      switch (c?.kind) {
        case "plan_confirm": return m.confirmed ? client.confirmPlan(f.step_id, m.tasks) : client.rejectPlan(f.step_id);
        case "plan_adjust": return client.answerAdjust(f.step_id, m.confirmed, m.tasks);
        case "task_failed": return client.answerTaskFailed(f.step_id, m.action);
        case "tool_confirm": return client.approveTool(f.step_id, m.approved);
        case "input_request": return client.answerInput(f.step_id, m.text);
      }
      return client.respond(f.step_id, m);
    }
  }
  throw new Error(`no helper sends ${f.event}`);
}

function describe(e) {
  if (e.in) return `in ${e.in.event}${e.in.seq ? ` seq ${e.in.seq}` : ""}`;
  if (e.out) return `out ${e.out.event}`;
  return "the server's snapshot";
}

async function main() {
  const server = new FakeServer();
  const client = new BatonClient({ url: "ws://recorded/ws", WebSocket: server.WebSocket, storage: null });
  const rec = record(client);
  const ready = client.connect();
  const ws = await server.accept(0);
  const counts = { in: 0, out: 0, snapshot: 0 };
  for (const [i, e] of log.entries()) {
    const where = `entry ${i} (${describe(e)})`;
    if (e.in) {
      counts.in++;
      const n = rec.errors.length;
      ws.deliver(e.in);
      if (e.in.seq) await until(() => client.lastSeq >= e.in.seq, `${where} applied`);
      else if (e.in.event === "system.connected") await ready;
      else if (e.in.event === "system.error") await until(() => rec.errors.length > n, `${where} handled`);
    } else if (e.out) {
      counts.out++;
      const n = ws.frames.length;
      if (!sendAgain(client, e.out)) throw new Error(`${where}: the client did not send it`);
      const d = firstDiff(ws.frames.slice(n), [e.out]);
      if (d) throw new Error(`${where}: the client's frame differs from the recorded one: ${d}`);
    } else {
      counts.snapshot++;
      const d = firstDiff(toSnapshot(client.state), e.snapshot);
      if (d) throw new Error(`${where}: the JS state differs from the server's snapshot: ${d}`);
    }
    const d = firstDiff(toSnapshot(client.state), expected[i]);
    if (d) throw new Error(`${where}: the JS state differs from wsproto.State's: ${d}`);
  }
  if (rec.violations.length) throw new Error(`violations: ${rec.violations.join("; ")}`);
  if (client.stats.events !== client.lastSeq) throw new Error(`stats ${JSON.stringify(client.stats)}, last seq ${client.lastSeq}`);
  client.close();
  console.log(`agreed after each of ${log.length} entries: ${counts.in} frames in (${client.lastSeq} events), ` +
    `${counts.out} out, ${counts.snapshot} server snapshots`);
}

try {
  await main();
  process.exit(0);
} catch (err) {
  console.error(err && err.stack ? err.stack : err);
  process.exit(1);
}
