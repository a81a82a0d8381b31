// The reducer, event kind by event kind, against wsproto.State's rules
// (wsproto/state.go). Inputs are deep-frozen: a reducer that modified its
// arguments would throw. The agreement with the Go reducer on real runs is
// web/agree_test.go's.
import test from "node:test";
import assert from "node:assert/strict";

import {
  initialState, reduce, fromSnapshot, toSnapshot, answered, beginSolving, withHistoryLimit,
} from "../static/baton-client.mjs";

const R = "run_1";
const TS = "2026-01-02T03:04:05.25Z";

function deepFreeze(v) {
  if (v && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

const ev = (event, metadata) => deepFreeze({ event, seq: 1, event_id: "e", timestamp: TS, content: "", metadata });

function fold(frames, state = initialState()) {
  for (const f of frames) state = reduce(deepFreeze(state), deepFreeze(f));
  return state;
}

const TASKS = [
  { id: "a", title: "A", description: "first", depends_on: [] },
  { id: "b", title: "B", description: "", depends_on: ["a"] },
  { id: "c", title: "C", depends_on: ["a"] }, // no description: reads as ""
];

const planned = () => fold([
  ev("plan.start", { run_id: R, request: "do it" }),
  ev("plan.completed", { run_id: R, plan_summary: "three steps", tasks: TASKS }),
]);

const confirm = (kind, extra = {}) => ({ run_id: R, step_id: `confirm_${kind}_${extra.task_id || "x"}`, kind,
  expires_at: "2026-01-02T03:09:05Z", ...extra });

const solving = () => fold([
  ev("agent.user_confirm", confirm("plan_confirm", { plan_summary: "three steps", tasks: TASKS })),
  ev("solver.start", { run_id: R, task_id: "a", attempt: 1 }),
], planned());

const task = (s, id) => s.run.tasks.find((t) => t.id === id);

test("plan.start and plan.completed: a run afresh, then its plan", () => {
  const s1 = fold([ev("plan.start", { run_id: R, request: "do it" })]);
  assert.equal(s1.phase, "planning");
  assert.deepEqual(toSnapshot(s1).run, { run_id: R, request: "do it", plan_summary: "", plan_version: 0,
    tasks: [], pending_confirm: [], answers: [], last_decision: null, final_answer: null });
  const s = planned();
  assert.equal(s.phase, "planning");
  assert.equal(s.run.plan_version, 1);
  assert.equal(s.run.plan_summary, "three steps");
  assert.deepEqual(toSnapshot(s).run.tasks.map((t) => [t.id, t.status, t.attempt, t.description, t.todo]),
    [["a", "pending", 0, "first", null], ["b", "pending", 0, "", null], ["c", "pending", 0, "", null]]);
  assert.deepEqual(task(s, "a"), { id: "a", title: "A", description: "first", depends_on: [], status: "pending",
    attempt: 0, todo: null, progress: 0, progress_message: "", streamed: "", retry_at: null, tool_calls: [] });
  // A new plan.start replaces the run, whatever it was.
  const again = fold([ev("plan.start", { run_id: R, request: "again" })], solving());
  assert.deepEqual([again.phase, again.run.request, again.run.tasks.length], ["planning", "again", 0]);
});

test("a chat run: its solver.start names its one task; its progress messages are the answer as it is written", () => {
  const t1 = { id: "t1", title: "What time is it?", description: "What time is it?", depends_on: [] };
  const start = (attempt) => ev("solver.start", { run_id: R, task_id: "t1", attempt, mode: "chat", task: t1 });
  const progress = (message) => ev("solver.progress", { run_id: R, task_id: "t1", attempt: 1, progress: 0.5, message });
  let s = fold([start(1), progress(""), ev("agent.tool_call", { run_id: R, task_id: "t1", attempt: 1, round: 1, step_id: "tool_1", tool: "clock", arguments: {} }),
    progress("Let me look. "), ev("agent.tool_result", { run_id: R, task_id: "t1", attempt: 1, round: 1, step_id: "tool_1", tool: "clock", ok: true, result: "9:00" }),
    progress("It is"), progress(" nine.")]);
  assert.equal(s.phase, "solving");
  assert.deepEqual(toSnapshot(s).run, { run_id: R, request: "What time is it?", mode: "chat", plan_summary: "", plan_version: 1,
    tasks: [{ ...t1, status: "running", attempt: 1, todo: null }], pending_confirm: [], answers: [], last_decision: null, final_answer: null });
  assert.equal(task(s, "t1").streamed, "It is nine.", "the text since the tool's result");
  // A retry starts the task again, once: the text starts afresh.
  s = fold([start(2)], s);
  assert.deepEqual([s.run.tasks.length, task(s, "t1").streamed, task(s, "t1").attempt], [1, "", 2]);
  // A plan run's progress messages are status lines, not text.
  assert.equal(task(fold([ev("solver.progress", { run_id: R, task_id: "a", attempt: 1, progress: 0.5, message: "Calling x" })], solving()), "a").streamed, "");
  // The snapshot says the mode.
  assert.equal(fromSnapshot(toSnapshot(s)).run.mode, "chat");
  assert.equal(fromSnapshot(toSnapshot(solving())).run.mode, null);
});

test("events of another run change nothing but the history", () => {
  const s = deepFreeze(solving());
  const other = { run_id: "run_other", task_id: "a", attempt: 2, version: 9, items: [], tasks: TASKS, kind: "plan_confirm",
    step_id: "x", reason: "r", content: "answer", summary: "s", status: "succeeded", message: "m", last_error: "e",
    delay_ms: 5, result: "r", item: { id: "1" }, tool: "t", ok: true };
  for (const event of ["plan.completed", "plan.decision", "plan.updated", "agent.user_confirm", "agent.confirm_settled",
    "solver.progress", "solver.completed", "solver.cancelled", "solver.skipped", "solver.restarted", "agent.tool_call",
    "agent.tool_result", "error.execution", "error.recovery_started", "error.recovery_failed", "aggregate.start",
    "aggregate.completed", "pipeline.completed", "todo.updated",
    "todo.item_progress", "todo.completed", "aggregate.progress", "plan.step_completed", "no.such_event"]) {
    assert.equal(reduce(s, ev(event, other)), s, event);
  }
  // A run's end is the session's history (§6), whichever run it is; the
  // current run is untouched.
  for (const [event, answer, status] of [["agent.final_answer", "answer", "succeeded"], ["plan.cancelled", "", "cancelled"],
    ["pipeline.cancelled", "", "cancelled"]]) {
    const s2 = reduce(s, ev(event, { ...other, request: "earlier", ended_at: "2026-01-02T03:04:05Z" }));
    assert.deepEqual([s2.phase, s2.run], [s.phase, s.run], event);
    assert.deepEqual(s2.history, [{ run_id: "run_other", request: "earlier", answer, status, ended_at: "2026-01-02T03:04:05Z" }], event);
    assert.equal(reduce(s2, ev(event, other)).history, s2.history, `${event} again: one entry per run`);
  }
});

test("history: each run's end adds its entry, the oldest go past history_limit, the snapshot carries them", () => {
  let s = withHistoryLimit(initialState(), 2);
  for (const [i, request] of ["first", "second", "third"].entries()) {
    s = fold([ev("plan.start", { run_id: `run_${i}`, request }),
      ev("agent.final_answer", { run_id: `run_${i}`, content: `answer ${i}`, request, status: "succeeded", ended_at: "2026-01-02T03:04:05Z" })], s);
  }
  assert.deepEqual(s.history.map((h) => [h.run_id, h.request, h.answer, h.status]),
    [["run_1", "second", "answer 1", "succeeded"], ["run_2", "third", "answer 2", "succeeded"]]);
  const back = fromSnapshot(toSnapshot(s), 1);
  assert.deepEqual(back.history.map((h) => h.run_id), ["run_2"]);
  assert.deepEqual(toSnapshot(fromSnapshot(toSnapshot(s), 2)).history, toSnapshot(s).history);
});

test("agent.user_confirm: every kind is pending; a plan_confirm awaits the user", () => {
  const s = fold([ev("agent.user_confirm", confirm("plan_confirm", { plan_summary: "p", tasks: TASKS }))], planned());
  assert.equal(s.phase, "awaiting_confirm");
  const s2 = fold([ev("agent.user_confirm", confirm("input_request", { task_id: "a", question: "why?" }))], solving());
  assert.equal(s2.phase, "solving");
  assert.deepEqual(s2.run.pending_confirm.map((c) => c.kind), ["input_request"]);
});

test("solver.start: the first moves to solving and withdraws the plan's confirmation; each settles its task's questions", () => {
  const s = solving();
  assert.equal(s.phase, "solving");
  assert.deepEqual(s.run.pending_confirm, []);
  assert.deepEqual([task(s, "a").status, task(s, "a").attempt], ["running", 1]);
  const waiting = fold([
    ev("agent.user_confirm", confirm("task_failed", { task_id: "a", options: ["retry", "skip", "abort"] })),
    ev("agent.user_confirm", confirm("tool_confirm", { task_id: "b", tool: "rm", arguments: {} })),
    ev("agent.user_confirm", confirm("input_request", { question: "decide-step question" })),
  ], fold([ev("error.execution", { run_id: R, task_id: "a", attempt: 1, message: "boom (internal)" })], s));
  const s2 = fold([ev("solver.start", { run_id: R, task_id: "a", attempt: 2 })], waiting);
  assert.deepEqual(s2.run.pending_confirm.map((c) => c.kind), ["tool_confirm", "input_request"]);
  assert.deepEqual([task(s2, "a").status, task(s2, "a").attempt, task(s2, "a").error], ["running", 2, undefined]);
});

test("solver.start of an unknown run begins a user.solve_tasks run", () => {
  const s = fold([ev("solver.start", { run_id: "run_2", task_id: "x", attempt: 1 })], planned());
  assert.deepEqual(toSnapshot(s), { phase: "solving", run: { run_id: "run_2", request: "", plan_summary: "",
    plan_version: 1, tasks: [], pending_confirm: [], answers: [], last_decision: null, final_answer: null }, history: [] });
  // Seeded with the list the client sent, as the server does.
  const seeded = reduce(beginSolving(planned(), "run_2", [{ id: "x", title: "X" }]),
    ev("solver.start", { run_id: "run_2", task_id: "x", attempt: 1 }));
  assert.deepEqual(toSnapshot(seeded).run.tasks, [{ id: "x", title: "X", description: "", depends_on: [],
    status: "running", attempt: 1, todo: null }]);
});

test("solver.progress: the current attempt's progress, for the UI only", () => {
  const s = fold([ev("solver.progress", { run_id: R, task_id: "a", attempt: 1, progress: 0.5, message: "half" })], solving());
  assert.deepEqual([task(s, "a").progress, task(s, "a").progress_message], [0.5, "half"]);
  const old = fold([ev("solver.progress", { run_id: R, task_id: "a", attempt: 0, progress: 0.9, message: "old" })], s);
  assert.equal(task(old, "a").progress, 0.5);
  assert.deepEqual(toSnapshot(old), toSnapshot(solving()));
});

test("solver.completed: the result; an empty one is left out as Go's omitempty does", () => {
  const s = fold([ev("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "done" })], solving());
  assert.deepEqual([task(s, "a").status, task(s, "a").result], ["completed", "done"]);
  const empty = fold([ev("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "" })], solving());
  assert.equal("result" in toSnapshot(empty).run.tasks[0], false);
});

test("failure and recovery: failed, retrying until the timestamp + delay, failed for good", () => {
  let s = fold([ev("error.execution", { run_id: R, task_id: "a", attempt: 1, error_type: "network",
    message: "unreachable (network)", recoverable: true })], solving());
  assert.deepEqual([task(s, "a").status, task(s, "a").error, task(s, "a").attempt], ["failed", "unreachable (network)", 1]);
  s = fold([ev("error.recovery_started", { run_id: R, task_id: "a", attempt: 1, max_attempts: 3, delay_ms: 750 })], s);
  assert.deepEqual([task(s, "a").status, task(s, "a").retry_at], ["retrying", Date.parse(TS) + 750]);
  s = fold([ev("error.recovery_failed", { run_id: R, task_id: "a", attempts: 3, last_error: "gave up (network)" })], s);
  assert.deepEqual([task(s, "a").status, task(s, "a").error, task(s, "a").retry_at], ["failed", "gave up (network)", null]);
  // Planning failures name no task: nothing changes.
  const p = planned();
  assert.equal(reduce(p, ev("error.execution", { run_id: R, stage: "plan", attempt: 1, message: "m" })), p);
  assert.equal(reduce(p, ev("error.recovery_started", { run_id: R, stage: "plan", attempt: 1, delay_ms: 5 })), p);
});

test("solver.cancelled, solver.skipped, solver.restarted", () => {
  const base = fold([
    ev("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "ra" }),
    ev("todo.updated", { run_id: R, task_id: "a", version: 1, items: [{ id: "1", content: "x", status: "completed", tool_calls: 1 }] }),
    ev("agent.user_confirm", confirm("task_failed", { task_id: "b" })),
    ev("agent.user_confirm", confirm("input_request", { task_id: "c", question: "q" })),
  ], solving());
  const cancelled = fold([ev("solver.cancelled", { run_id: R, task_id: "c", reason: "user_cancel_task" })], base);
  assert.equal(task(cancelled, "c").status, "cancelled");
  assert.deepEqual(cancelled.run.pending_confirm.map((c) => c.task_id), ["b"]);
  const skipped = fold([ev("solver.skipped", { run_id: R, task_id: "b", reason: "dependency_failed", dependency: "a" })], base);
  assert.deepEqual([task(skipped, "b").status, task(skipped, "b").skip_reason, task(skipped, "b").skip_dependency],
    ["skipped", "dependency_failed", "a"]);
  assert.equal(skipped.run.pending_confirm.length, 2, "a skip settles no question");
  const synthesized = fold([ev("solver.skipped", { run_id: R, task_id: "c", reason: "synthesized" })], base);
  assert.deepEqual([task(synthesized, "c").skip_reason, "skip_dependency" in task(synthesized, "c")], ["synthesized", false]);
  const again = fold([ev("solver.restarted", { run_id: R, task_id: "b", reason: "user_restart" })], skipped);
  assert.deepEqual([task(again, "b").status, "skip_reason" in task(again, "b"), "skip_dependency" in task(again, "b")],
    ["pending", false, false]);
  const restarted = fold([
    ev("error.execution", { run_id: R, task_id: "b", attempt: 4, message: "m" }),
    ev("solver.restarted", { run_id: R, task_id: "a", reason: "user_restart" }),
    ev("solver.restarted", { run_id: R, task_id: "b", reason: "user_restart" }),
  ], base);
  const a = task(restarted, "a");
  assert.deepEqual([a.status, a.result, a.error, a.attempt, a.todo.version], ["pending", undefined, undefined, 1, 1]);
  assert.deepEqual([task(restarted, "b").status, task(restarted, "b").attempt, task(restarted, "b").error], ["pending", 4, undefined]);
  assert.deepEqual(restarted.run.pending_confirm.map((c) => c.task_id), ["c"]);
});

test("agent.tool_call and agent.tool_result: the task's calls; a result settles its tool_confirm or input_request", () => {
  const s = fold([
    ev("agent.user_confirm", confirm("task_failed", { task_id: "a" })),
    ev("agent.user_confirm", confirm("input_request", { task_id: "b", question: "q" })),
    ev("agent.tool_call", { run_id: R, task_id: "a", attempt: 1, round: 2, step_id: "tool_1", tool: "rm", arguments: { path: "x" } }),
    ev("agent.user_confirm", confirm("tool_confirm", { task_id: "a", tool: "rm", arguments: { path: "x" } })),
  ], solving());
  assert.deepEqual(task(s, "a").tool_calls, [{ step_id: "tool_1", tool: "rm", arguments: { path: "x" }, attempt: 1, round: 2, done: false }]);
  const r = fold([ev("agent.tool_result", { run_id: R, task_id: "a", attempt: 1, round: 2, step_id: "tool_1", tool: "rm",
    ok: false, result: "declined by the user", truncated: false, duration_ms: 3 })], s);
  assert.deepEqual(task(r, "a").tool_calls, [{ step_id: "tool_1", tool: "rm", arguments: { path: "x" }, attempt: 1, round: 2,
    done: true, ok: false, result: "declined by the user", truncated: false, duration_ms: 3 }]);
  assert.deepEqual(r.run.pending_confirm.map((c) => `${c.kind}/${c.task_id}`), ["task_failed/a", "input_request/b"]);
  let many = solving();
  for (let i = 0; i < 60; i++) {
    many = reduce(many, ev("agent.tool_call", { run_id: R, task_id: "a", attempt: 1, round: i, step_id: `t${i}`, tool: "x", arguments: {} }));
  }
  assert.deepEqual([task(many, "a").tool_calls.length, task(many, "a").tool_calls[0].step_id], [50, "t10"]);
});

test("todo events: a version not above the one held is dropped", () => {
  const item = (id, status, extra = {}) => ({ id, content: `item ${id}`, status, tool_calls: 0, ...extra });
  let s = fold([ev("todo.updated", { run_id: R, task_id: "a", version: 1, items: [item("1", "in_progress"), item("2", "pending")] })], solving());
  s = fold([ev("todo.item_progress", { run_id: R, task_id: "a", version: 2, item: item("1", "completed", { tool_calls: 3, note: "ok" }) })], s);
  s = fold([ev("todo.item_progress", { run_id: R, task_id: "a", version: 3, item: item("9", "blocked") })], s);
  assert.deepEqual(task(s, "a").todo, { version: 3, items: [item("1", "completed", { tool_calls: 3, note: "ok" }), item("2", "pending"), item("9", "blocked")] });
  const stale = fold([
    ev("todo.updated", { run_id: R, task_id: "a", version: 3, items: [] }),
    ev("todo.item_progress", { run_id: R, task_id: "a", version: 2, item: item("2", "completed") }),
  ], s);
  assert.deepEqual(task(stale, "a").todo, task(s, "a").todo);
  const done = fold([ev("todo.completed", { run_id: R, task_id: "a", version: 4 })], s);
  assert.deepEqual(task(done, "a").todo.items.map((i) => i.status), ["completed", "completed", "completed"]);
  const first = fold([ev("todo.completed", { run_id: R, task_id: "b", version: 1 })], s);
  assert.deepEqual(task(first, "b").todo, { version: 1, items: [] });
});

test("agent.confirm_settled: another device's answer, an edited plan and an input_request's text", () => {
  const pc = confirm("plan_confirm", { plan_summary: "three steps", tasks: TASKS });
  const edited = [TASKS[0], { id: "d", title: "D", description: "new", depends_on: ["a"] }];
  let s = fold([ev("agent.user_confirm", pc),
    ev("agent.confirm_settled", { run_id: R, step_id: pc.step_id, kind: "plan_confirm", confirmed: true, tasks: edited })], planned());
  assert.deepEqual(s.run.tasks.map((t) => `${t.id}:${t.status}`), ["a:pending", "d:pending"]);
  assert.deepEqual(s.run.pending_confirm, []);
  s = fold([ev("solver.start", { run_id: R, task_id: "a", attempt: 1 })], s);
  const ask = confirm("input_request", { task_id: "a", question: "Which region?" });
  s = fold([ev("agent.user_confirm", ask),
    ev("agent.confirm_settled", { run_id: R, step_id: ask.step_id, kind: "input_request", task_id: "a", text: "China" })], s);
  assert.deepEqual(s.run.answers, [{ step_id: ask.step_id, task_id: "a", question: "Which region?", text: "China" }]);
  assert.deepEqual(s.run.pending_confirm, []);
  // The device that answered folded its own answer already: the event
  // changes nothing there.
  const own = answered(fold([ev("agent.user_confirm", ask)], s), ask.step_id, { text: "China" });
  const again = reduce(own, ev("agent.confirm_settled", { run_id: R, step_id: ask.step_id, kind: "input_request", task_id: "a", text: "China" }));
  assert.deepEqual(toSnapshot(again), toSnapshot(own));
  // Declined: no tasks; the confirmation closes.
  const d = fold([ev("agent.user_confirm", pc),
    ev("agent.confirm_settled", { run_id: R, step_id: pc.step_id, kind: "plan_confirm", confirmed: false })], planned());
  assert.deepEqual([d.run.tasks.length, d.run.pending_confirm.length], [3, 0]);
});

test("plan.decision and plan.updated: existing tasks keep where they stand", () => {
  const decision = { run_id: R, after_task: "a", action: "adjust_plan", reason: "more", details: [{ code: "cycle", message: "m", index: 1 }] };
  let s = fold([
    ev("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "ra" }),
    ev("plan.decision", decision),
    ev("agent.user_confirm", confirm("plan_adjust", { added: [], removed: ["c"], tasks: TASKS.slice(0, 2) })),
    ev("agent.user_confirm", confirm("input_request", { question: "q" })),
  ], solving());
  assert.deepEqual(s.run.last_decision, decision);
  s = fold([ev("plan.updated", { run_id: R, version: 2, added: [{ id: "d", title: "D", description: "", depends_on: ["a"] }],
    removed: ["c"], reason: "r", tasks: [TASKS[0], TASKS[1], { id: "d", title: "D", description: "", depends_on: ["a"] }] })], s);
  assert.equal(s.run.plan_version, 2);
  assert.deepEqual(s.run.tasks.map((t) => `${t.id}:${t.status}:${t.result || ""}`), ["a:completed:ra", "b:pending:", "d:pending:"]);
  assert.deepEqual(s.run.pending_confirm.map((c) => c.kind), ["input_request"]);
});

test("the end of a run: aggregating, the summary and status, the final answer; unfinished tasks cancelled", () => {
  let s = fold([
    ev("solver.completed", { run_id: R, task_id: "a", attempt: 1, result: "ra" }),
    ev("agent.user_confirm", confirm("input_request", { task_id: "b", question: "q" })),
    ev("aggregate.start", { run_id: R, completed: 1 }),
  ], solving());
  assert.equal(s.phase, "aggregating");
  s = fold([
    ev("aggregate.completed", { run_id: R, summary: "sum" }),
    ev("pipeline.completed", { run_id: R, status: "partial" }),
    ev("agent.final_answer", { run_id: R, content: "the answer" }),
  ], s);
  assert.equal(s.phase, "idle");
  assert.deepEqual([s.run.final_answer, s.run.summary, s.run.status], ["the answer", "sum", "partial"]);
  assert.deepEqual(s.run.pending_confirm, []);
  assert.deepEqual(s.run.tasks.map((t) => t.status), ["completed", "cancelled", "cancelled"]);
  // Running, retrying and pending tasks all count as cancelled.
  const busy = fold([
    ev("solver.start", { run_id: R, task_id: "b", attempt: 1 }),
    ev("error.execution", { run_id: R, task_id: "b", attempt: 1, message: "m" }),
    ev("error.recovery_started", { run_id: R, task_id: "b", attempt: 1, delay_ms: 1000 }),
  ], solving());
  assert.deepEqual(busy.run.tasks.map((t) => t.status), ["running", "retrying", "pending"]);
  for (const [event, reason] of [["plan.cancelled", "user_reject"], ["pipeline.cancelled", "user_cancel"]]) {
    const c = fold([ev(event, { run_id: R, reason })], busy);
    assert.deepEqual([c.phase, c.run.status, c.run.cancel_reason, c.run.final_answer], ["idle", "cancelled", reason, null], event);
    assert.deepEqual(c.run.tasks.map((t) => [t.status, t.retry_at]), [["cancelled", null], ["cancelled", null], ["cancelled", null]], event);
  }
});

test("answered: the confirmation closes; an input_request's text is recorded", () => {
  const s = fold([
    ev("agent.user_confirm", confirm("input_request", { task_id: "a", question: "which?", context: "ctx" })),
    ev("agent.user_confirm", confirm("input_request", { question: "decide?" })),
    ev("agent.user_confirm", confirm("tool_confirm", { task_id: "b", tool: "rm" })),
  ], solving());
  const [q1, q2, tool] = s.run.pending_confirm.map((c) => c.step_id);
  let a = answered(deepFreeze(s), q1, { text: "this one" });
  a = answered(deepFreeze(a), q2, { text: "" });
  a = answered(deepFreeze(a), tool, { approved: true });
  assert.deepEqual(a.run.answers, [{ step_id: q1, task_id: "a", question: "which?", text: "this one" },
    { step_id: q2, question: "decide?", text: "" }]);
  assert.deepEqual(a.run.pending_confirm, []);
  assert.deepEqual(answered(s, "unknown", { text: "x" }).run, s.run);
  assert.equal(answered(initialState(), "x", {}).run, null);
});

test("beginSolving: the client's list replaces the plan's; the plan's confirmation is settled", () => {
  const s = fold([ev("agent.user_confirm", confirm("plan_confirm", { tasks: TASKS }))], planned());
  const edit = [{ id: "z", title: "Z", depends_on: [] }];
  const b = beginSolving(deepFreeze(s), R, edit);
  assert.equal(b.phase, "solving");
  assert.equal(b.run.request, "do it", "the run keeps its request");
  assert.deepEqual([b.run.tasks.map((t) => t.id), b.run.pending_confirm, b.run.plan_version], [["z"], [], 1]);
  const other = beginSolving(s, "run_2", edit);
  assert.deepEqual([other.run.run_id, other.run.request], ["run_2", ""]);
});

test("fromSnapshot and toSnapshot: the snapshot round-trips; the UI extras start afresh", () => {
  const snapshot = deepFreeze({ seq: 42, state_checksum: "abc", phase: "solving", run: {
    run_id: R, request: "do it", plan_summary: "p", plan_version: 2,
    tasks: [
      { id: "a", title: "A", description: "", depends_on: [], status: "completed", attempt: 2, result: "ra",
        todo: { version: 3, items: [{ id: "1", content: "c", status: "completed", tool_calls: 2, note: "n" }] } },
      { id: "b", title: "B", description: "d", depends_on: ["a"], status: "failed", attempt: 1, error: "e", todo: null },
      { id: "c", title: "C", description: "", depends_on: ["b"], status: "skipped", attempt: 0,
        skip_reason: "dependency_failed", skip_dependency: "b", todo: null },
    ],
    pending_confirm: [{ run_id: R, step_id: "confirm_task_1", kind: "task_failed", task_id: "b",
      options: ["retry", "skip", "abort"], expires_at: "2026-01-02T03:09:05.123Z" }],
    answers: [{ step_id: "confirm_input_1", task_id: "a", question: "q", text: "t" }],
    last_decision: { run_id: R, after_task: "a", action: "continue", reason: "fine" },
    final_answer: null,
  }, history: [{ run_id: "run_0", request: "earlier", answer: "then", status: "partial", ended_at: "2026-01-02T03:04:05Z" }] });
  const s = fromSnapshot(snapshot);
  assert.deepEqual(toSnapshot(s), { phase: snapshot.phase, run: snapshot.run, history: snapshot.history });
  assert.deepEqual([task(s, "a").progress, task(s, "a").tool_calls, task(s, "b").retry_at, s.run.status], [0, [], null, null]);
  assert.deepEqual(fromSnapshot({ phase: "idle", run: null }), initialState());
  assert.deepEqual(toSnapshot(initialState()), { phase: "idle", run: null, history: [] });
});

test("toSnapshot encodes a confirmation as wsproto.UserConfirm does", () => {
  const s = fold([
    ev("agent.user_confirm", { run_id: R, step_id: "s1", kind: "plan_adjust", plan_summary: "", added: [],
      removed: [], tasks: [{ id: "a", title: "A" }], options: [], extra_field: 1, expires_at: "2026-01-02T03:09:05Z" }),
  ], solving());
  assert.deepEqual(toSnapshot(s).run.pending_confirm, [{ run_id: R, step_id: "s1", kind: "plan_adjust", added: [], removed: [],
    tasks: [{ id: "a", title: "A", description: "", depends_on: null }], expires_at: "2026-01-02T03:09:05Z" }]);
});
