// The events of a Baton run of client-supplied tasks on the simulated
// model (a port of bench/bare/script.go's solveEvents): each task's agent
// loop writes a todo list of 2 or 3 items, completes them one tool call at
// a time and answers; then the results are aggregated into the final
// answer. The same types, metadata shapes and sizes as Baton's, in one
// fixed order.

import { randomUUID } from "node:crypto";

// diamond is the task list of baton-load's tasks workload.
export const diamond = [
  task("a"), task("b"), task("c", "a", "b"), task("d", "c"),
];

function task(id, ...deps) {
  return { id, title: "Load task " + id, description: "", depends_on: deps };
}

// waves orders tasks so that each wave depends only on earlier ones; null
// when dependencies are unknown or cyclic.
export function waves(tasks) {
  const done = new Set();
  const out = [];
  while (done.size < tasks.length) {
    const wave = tasks.filter((t) => !done.has(t.id) && t.depends_on.every((d) => done.has(d)));
    if (wave.length === 0) return null;
    for (const t of wave) done.add(t.id);
    out.push(wave);
  }
  return out;
}

// fnv32a of a string's UTF-16 code units (the ids are ASCII).
function fnv32a(s) {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

function todo(t) {
  const items = [
    { id: "1", content: "Gather material for " + t.title, status: "pending", tool_calls: 0 },
    { id: "2", content: "Work through " + t.title, status: "pending", tool_calls: 0 },
    { id: "3", content: "Check the result", status: "pending", tool_calls: 0 },
  ];
  return items.slice(0, 2 + (fnv32a(t.id) % 2));
}

// solveEvents returns [{event, step_id, content, metadata}] for one run.
export function solveEvents(tasks, order) {
  const run = "run_" + randomUUID();
  const evs = [];
  const results = new Map();
  const usage = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  for (const wave of order) {
    for (const t of wave) {
      evs.push({ event: "solver.start", content: "Started " + t.id, metadata: { run_id: run, task_id: t.id, attempt: 1 } });
    }
    for (const t of wave) {
      const items = todo(t);
      const progress = (p, msg) => ({ event: "solver.progress", content: msg,
        metadata: { run_id: run, task_id: t.id, attempt: 1, progress: p, message: msg } });
      let step = "tool_" + randomUUID();
      evs.push(progress(1 / 3, "Calling todo_write"),
        { event: "agent.tool_call", step_id: step, content: "Calling todo_write",
          metadata: { run_id: run, task_id: t.id, attempt: 1, round: 1, step_id: step, tool: "todo_write",
            arguments: { items: items.map((it) => ({ content: it.content, id: it.id })) } } },
        { event: "agent.tool_result", step_id: step, content: "todo_write answered",
          metadata: { run_id: run, task_id: t.id, attempt: 1, round: 1, step_id: step, tool: "todo_write", ok: true,
            result: `Todo list written: ${items.length} items.`, truncated: false, duration_ms: 0 } },
        { event: "todo.updated", content: "Todo list of " + t.id, metadata: { run_id: run, task_id: t.id, version: 1, items } },
        progress(2 / 3, "Calling todo_update"));
      items.forEach((it, i) => {
        step = "tool_" + randomUUID();
        evs.push(
          { event: "agent.tool_call", step_id: step, content: "Calling todo_update",
            metadata: { run_id: run, task_id: t.id, attempt: 1, round: 2, step_id: step, tool: "todo_update",
              arguments: { id: it.id, status: "completed" } } },
          { event: "agent.tool_result", step_id: step, content: "todo_update answered",
            metadata: { run_id: run, task_id: t.id, attempt: 1, round: 2, step_id: step, tool: "todo_update", ok: true,
              result: `Item ${it.id} is now completed.`, truncated: false, duration_ms: 0 } },
          { event: "todo.item_progress", content: it.content + ": completed",
            metadata: { run_id: run, task_id: t.id, version: i + 2, item: { ...it, status: "completed" } } });
      });
      let result = t.title + ": done";
      if (t.depends_on.length > 0) result += ", building on " + [...t.depends_on].sort().join(", ");
      result += ".";
      results.set(t.id, result);
      evs.push(
        { event: "todo.completed", content: `Todo list of ${t.id} completed`, metadata: { run_id: run, task_id: t.id, version: items.length + 2 } },
        progress(1, "Answering"),
        { event: "solver.completed", content: "Completed " + t.id,
          metadata: { run_id: run, task_id: t.id, attempt: 1, result, duration_ms: 0, usage } });
    }
  }
  const n = tasks.length;
  evs.push({ event: "aggregate.start", content: "Aggregating results", metadata: { run_id: run, completed: n, failed: 0, skipped: 0, cancelled: 0 } });
  let answer = "Answer to your tasks:\n";
  for (const t of tasks) {
    const line = "- " + results.get(t.id);
    answer += line + "\n";
    evs.push({ event: "aggregate.progress", content: line, metadata: { run_id: run, message: line } });
  }
  const summary = `${n} of ${n} tasks completed for your tasks.`;
  evs.push(
    { event: "aggregate.completed", content: summary, metadata: { run_id: run, summary } },
    { event: "pipeline.completed", content: "Run succeeded",
      metadata: { run_id: run, status: "succeeded", completed: n, failed: 0, skipped: 0, cancelled: 0, duration_ms: 0, usage } },
    { event: "agent.final_answer", content: answer, metadata: { run_id: run, content: answer } });
  return evs;
}

// now is the wall clock in ms with µs in the fraction; the server's
// timestamps and the load's receipt times both come from it.
export function now() {
  return performance.timeOrigin + performance.now();
}

// isoMicro formats t (now's) as RFC 3339 with microseconds.
export function isoMicro(t) {
  const ms = Math.floor(t);
  const us = Math.floor((t - ms) * 1000);
  return new Date(ms).toISOString().slice(0, 23) + String(us).padStart(3, "0") + "Z";
}

// parseMicro is isoMicro's inverse.
export function parseMicro(s) {
  return Date.parse(s.slice(0, 23) + "Z") + Number(s.slice(23, -1).padEnd(3, "0").slice(0, 3)) / 1000;
}
