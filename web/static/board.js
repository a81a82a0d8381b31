// The task board: the run's tasks as a DAG, one column per depth (a task
// sits one column right of its deepest dependency), each card with its
// status, attempt, progress, retry countdown, todo list and tool calls.

import { h, seconds } from "./dom.js";

const RESULT_PREVIEW = 600; // characters of a result shown before "more"
const TOOL_CALLS_SHOWN = 8; // the latest tool calls listed on a card

/**
 * Board renders tasks into a container, rebuilding only the cards whose
 * task changed.
 */
export class Board {
  /**
   * @param {HTMLElement} root
   * @param {{cancelTask(id: string): void, restartTask(id: string): void}} actions
   */
  constructor(root, actions) {
    this.root = root;
    this.actions = actions;
    /** @type {Map<string, {key: string, el: HTMLElement}>} */
    this.cards = new Map();
    this.layoutKey = "";
  }

  /**
   * @param {import("./baton-client.mjs").State} state
   */
  render(state) {
    const run = state.run;
    const tasks = run ? run.tasks : [];
    const solving = state.phase === "solving";
    const depth = depths(tasks);
    const layoutKey = tasks.map((t) => `${t.id}:${depth.get(t.id)}`).join(",");
    if (layoutKey !== this.layoutKey) {
      this.layoutKey = layoutKey;
      const columns = [];
      for (const t of tasks) {
        const d = depth.get(t.id) ?? 0;
        while (columns.length <= d) columns.push(h("div", { class: "column" }));
        columns[d].append(this.card(t, solving, skipWhy(t, tasks))); // moves an existing card
      }
      this.root.replaceChildren(...columns);
      for (const id of [...this.cards.keys()]) {
        if (!tasks.some((t) => t.id === id)) this.cards.delete(id);
      }
      return;
    }
    for (const t of tasks) this.card(t, solving, skipWhy(t, tasks));
  }

  /** card returns the task's card, rebuilt in place when the task changed. */
  card(t, solving, why) {
    const key = JSON.stringify([t, solving, why]);
    const have = this.cards.get(t.id);
    if (have && have.key === key) return have.el;
    const el = this.build(t, solving, why);
    if (have) {
      // Keep what the user opened (tool calls, a long result) open.
      for (const d of have.el.querySelectorAll("details[open]")) {
        const same = el.querySelector(`details[data-part="${d.dataset.part}"]`);
        if (same) same.open = true;
      }
      have.el.replaceWith(el);
    }
    this.cards.set(t.id, { key, el });
    return el;
  }

  build(t, solving, why) {
    const finished = ["completed", "failed", "skipped", "cancelled"].includes(t.status);
    const active = ["pending", "running", "retrying"].includes(t.status);
    return h("article", { class: `task ${t.status}`, "data-testid": `task-${t.id}`, "data-status": t.status },
      h("header", null,
        h("span", { class: "id" }, t.id),
        h("strong", { class: "title" }, t.title),
        h("span", { class: "badge", "data-testid": `status-${t.id}` }, t.status)),
      t.depends_on.length ? h("p", { class: "deps" }, "after ", t.depends_on.join(", ")) : null,
      t.description ? h("p", { class: "description" }, t.description) : null,
      h("div", { class: "meta" },
        t.attempt ? h("span", { "data-testid": `attempt-${t.id}` }, `attempt ${t.attempt}`) : null,
        t.status === "retrying" && t.retry_at
          ? h("span", { class: "retry", "data-retry-at": t.retry_at }, `retry in ${seconds(t.retry_at - Date.now())}`)
          : null),
      t.status === "running" || (t.status === "completed" && t.progress > 0)
        ? h("div", { class: "progress" },
          h("progress", { max: 1, value: t.status === "completed" ? 1 : t.progress, "data-testid": `progress-${t.id}` }),
          h("span", null, t.status === "completed" ? "" : t.progress_message))
        : null,
      todo(t),
      tools(t),
      t.result ? result(t) : null,
      t.error && t.status !== "completed" ? h("p", { class: "task-error" }, t.error) : null,
      why ? h("p", { class: "skip-reason", "data-testid": `skip-reason-${t.id}` }, why) : null,
      h("div", { class: "actions" },
        active ? h("button", { type: "button", class: "small", "data-testid": `cancel-task-${t.id}`,
          onclick: () => this.actions.cancelTask(t.id) }, "Cancel") : null,
        solving && finished ? h("button", { type: "button", class: "small", "data-testid": `restart-task-${t.id}`,
          onclick: () => this.actions.restartTask(t.id) }, "Restart") : null));
  }
}

const TODO_MARK = { pending: "○", in_progress: "◐", completed: "●", blocked: "✕" };

const ENDED = { failed: "failed", skipped: "was skipped", cancelled: "was cancelled" };

/**
 * skipWhy says why a skipped task did not run, from its skip_reason (the
 * solver.skipped's, also in a snapshot); "" for a task that is not skipped.
 * @param {import("./baton-client.mjs").TaskState} t
 * @param {import("./baton-client.mjs").TaskState[]} tasks
 */
export function skipWhy(t, tasks) {
  if (t.status !== "skipped") return "";
  if (t.skip_reason === "synthesized") return "Skipped: the agent answered early with what was done.";
  // dependency_failed; a server too old to say why leaves the first
  // dependency that did not complete to blame.
  const dep = t.skip_dependency ?? t.depends_on.find((id) => tasks.find((o) => o.id === id)?.status !== "completed");
  if (!dep) return "Skipped.";
  const status = tasks.find((o) => o.id === dep)?.status ?? "";
  return `Skipped: ${dep} ${ENDED[status] ?? "did not complete"}, and this task needs its result.`;
}

function todo(t) {
  if (!t.todo || !t.todo.items.length) return null;
  return h("ul", { class: "todo", "data-testid": `todo-${t.id}` },
    t.todo.items.map((it) => h("li", { "data-status": it.status },
      h("span", { class: "mark", title: it.status }, TODO_MARK[it.status] ?? "○"), " ",
      it.content,
      it.tool_calls ? h("span", { class: "count" }, ` · ${it.tool_calls} tool call${it.tool_calls > 1 ? "s" : ""}`) : null,
      it.note ? h("span", { class: "note" }, ` — ${it.note}`) : null)));
}

function tools(t) {
  if (!t.tool_calls.length) return null;
  const shown = t.tool_calls.slice(-TOOL_CALLS_SHOWN);
  const running = t.tool_calls.some((c) => !c.done);
  return h("details", { class: "tools", "data-part": "tools", open: running || null, "data-testid": `tools-${t.id}` },
    h("summary", null, `${t.tool_calls.length} tool call${t.tool_calls.length > 1 ? "s" : ""}`),
    h("ol", null, shown.map((c) => h("li", { class: !c.done ? "pending" : c.ok ? "ok" : "failed", "data-step-id": c.step_id },
      h("code", null, c.tool), " ", h("span", { class: "args" }, compact(c.arguments)),
      c.done
        ? h("div", { class: "tool-result" }, c.ok ? "→ " : "✕ ", preview(c.result ?? "", 300),
          c.truncated ? h("span", { class: "note" }, " (truncated)") : null)
        : h("div", { class: "tool-result" }, "…")))));
}

function result(t) {
  if (t.result.length <= RESULT_PREVIEW) return h("p", { class: "result", "data-testid": `result-${t.id}` }, t.result);
  return h("details", { class: "result", "data-part": "result", "data-testid": `result-${t.id}` },
    h("summary", null, preview(t.result, RESULT_PREVIEW)),
    h("p", null, t.result));
}

function compact(args) {
  const s = JSON.stringify(args ?? {});
  return s === "{}" ? "" : preview(s, 160);
}

function preview(s, n) {
  return s.length <= n ? s : s.slice(0, n) + "…";
}

/** depths maps each task id to its column: 0 for a task with no dependency in the list. */
export function depths(tasks) {
  const byId = new Map(tasks.map((t) => [t.id, t]));
  const depth = new Map();
  const visit = (id, seen) => {
    if (depth.has(id)) return depth.get(id);
    const t = byId.get(id);
    if (!t || seen.has(id)) return -1; // unknown or a cycle: the server refuses those, don't loop
    seen.add(id);
    let d = 0;
    for (const dep of t.depends_on ?? []) d = Math.max(d, visit(dep, seen) + 1);
    depth.set(id, d);
    return d;
  };
  for (const t of tasks) visit(t.id, new Set());
  return depth;
}

/** tickRetries refreshes the retry countdowns without rebuilding cards. */
export function tickRetries(root) {
  for (const el of root.querySelectorAll("[data-retry-at]")) {
    el.textContent = `retry in ${seconds(Number(el.dataset.retryAt) - Date.now())}`;
  }
}
