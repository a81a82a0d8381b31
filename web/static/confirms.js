// The open questions other than the plan's: a failed task (retry, skip,
// abort), a tool that needs approval, a question for the user, a plan
// adjustment. One card per step_id, kept while the question is open so
// what the user typed survives re-renders.

import { h, seconds } from "./dom.js";

export class Confirms {
  /**
   * @param {HTMLElement} root
   * @param {import("./baton-client.mjs").BatonClient} client
   */
  constructor(root, client) {
    this.root = root;
    this.client = client;
    /** @type {Map<string, HTMLElement>} */
    this.cards = new Map();
  }

  /** @param {import("./baton-client.mjs").State} state */
  render(state) {
    const now = Date.now();
    const open = (state.run?.pending_confirm ?? []).filter((c) =>
      c.kind !== "plan_confirm" && !(Date.parse(c.expires_at) <= now));
    const ids = new Set(open.map((c) => c.step_id));
    for (const [id, el] of this.cards) {
      if (!ids.has(id)) { el.remove(); this.cards.delete(id); }
    }
    for (const c of open) {
      if (!this.cards.has(c.step_id)) {
        const el = this.card(c, state);
        this.cards.set(c.step_id, el);
        this.root.append(el);
      }
    }
  }

  card(c, state) {
    const task = c.task_id ? state.run?.tasks.find((t) => t.id === c.task_id) : null;
    const about = task ? `${task.title} (${task.id})` : c.task_id ?? "";
    const box = (title, ...body) => h("section", {
      class: `confirm ${c.kind}`, "data-testid": `confirm-${c.kind}`, "data-step-id": c.step_id, "data-task-id": c.task_id,
    }, h("h3", null, title), ...body,
    h("p", { class: "expires", "data-expires-at": Date.parse(c.expires_at) || null }, expiresIn(c.expires_at)));
    const button = (label, testid, fn, cls) => h("button", { type: "button", class: cls, "data-testid": testid,
      onclick: (e) => { disableAll(e.target); fn(); } }, label);

    switch (c.kind) {
      case "task_failed":
        return box(`Task failed: ${about}`,
          task?.error ? h("p", { class: "task-error" }, task.error) : null,
          h("div", { class: "row" }, (c.options ?? ["retry", "skip", "abort"]).map((a) =>
            button(a[0].toUpperCase() + a.slice(1), `confirm-${a}`, () => this.client.answerTaskFailed(c.step_id, a),
              a === "abort" ? "danger" : ""))));
      case "tool_confirm":
        return box(`Allow a tool? ${about}`,
          h("p", null, "The task wants to run ", h("code", null, c.tool ?? "")),
          h("pre", { class: "args" }, JSON.stringify(c.arguments ?? {}, null, 2)),
          h("div", { class: "row" },
            button("Decline", "confirm-decline", () => this.client.approveTool(c.step_id, false), "danger"),
            button("Allow", "confirm-approve", () => this.client.approveTool(c.step_id, true))));
      case "input_request": {
        const input = h("input", { type: "text", class: "grow", "data-testid": "confirm-text", placeholder: "Your answer" });
        const send = () => { if (input.value.trim()) { disableAll(input); this.client.answerInput(c.step_id, input.value.trim()); } };
        input.addEventListener("keydown", (e) => { if (e.key === "Enter") send(); });
        return box(about ? `A question from ${about}` : "A question from the agent",
          h("p", { class: "question" }, c.question ?? ""),
          c.context ? h("p", { class: "context" }, c.context) : null,
          h("div", { class: "row" }, input, h("button", { type: "button", "data-testid": "confirm-answer", onclick: send }, "Answer")));
      }
      case "plan_adjust":
        return box("The agent wants to change the plan",
          (c.added ?? []).length ? h("div", null, "Add:", h("ul", null, c.added.map((t) =>
            h("li", null, h("strong", null, t.title), ` (${t.id})`, t.depends_on?.length ? `, after ${t.depends_on.join(", ")}` : "")))) : null,
          (c.removed ?? []).length ? h("p", null, "Remove: ", c.removed.join(", ")) : null,
          h("div", { class: "row" },
            button("Keep the plan", "confirm-adjust-decline", () => this.client.answerAdjust(c.step_id, false), "danger"),
            button("Apply", "confirm-adjust-apply", () => this.client.answerAdjust(c.step_id, true))));
      default:
        // A kind this page does not know yet: say so rather than hide it.
        return box(`The server asks something this page cannot answer (${c.kind})`);
    }
  }

  /** tick refreshes the expiry countdowns and drops questions past theirs. */
  tick(state) {
    for (const el of this.root.querySelectorAll("[data-expires-at]")) {
      el.textContent = expiresIn(Number(el.dataset.expiresAt));
    }
    this.render(state);
  }
}

function expiresIn(at) {
  const t = typeof at === "number" ? at : Date.parse(at);
  return Number.isFinite(t) ? `open for ${seconds(t - Date.now())}` : "";
}

function disableAll(el) {
  for (const b of el.closest("section").querySelectorAll("button, input")) b.disabled = true;
}
