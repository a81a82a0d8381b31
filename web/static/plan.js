// The plan editor: the open plan_confirm's tasks as a form — titles,
// descriptions, dependencies, added and removed tasks — confirmed,
// rejected or sent back with feedback. The draft is the editor's own: it
// survives every re-render of the page until the question is settled.

import { h, $ } from "./dom.js";

const FIELD_SIZING = typeof CSS !== "undefined" && CSS.supports("field-sizing", "content");

/** fit makes a textarea as tall as its text, for browsers without field-sizing. */
function fit(el) {
  if (FIELD_SIZING) return;
  el.style.height = "auto";
  el.style.height = `${el.scrollHeight + el.offsetHeight - el.clientHeight}px`;
}

export class PlanEditor {
  /**
   * @param {{confirm(stepId: string, tasks: any[] | undefined): void, reject(stepId: string): void, replan(feedback: string): void}} actions
   */
  constructor(actions) {
    this.actions = actions;
    this.form = /** @type {HTMLFormElement} */ ($("plan-editor"));
    this.list = $("plan-tasks");
    this.errors = $("plan-errors");
    /** @type {{stepId: string, original: string, tasks: {id: string, title: string, description: string, depends_on: string[]}[], problems: any[], sent: boolean} | null} */
    this.draft = null;
    this.nextId = 1;

    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      if (!this.draft || this.draft.sent) return;
      this.draft.sent = true;
      this.draft.problems = [];
      const tasks = this.draft.tasks.map((t) => ({ ...t, depends_on: [...t.depends_on] }));
      // An unchanged plan is confirmed as is: the server solves its own list.
      const edited = JSON.stringify(tasks) !== this.draft.original;
      this.actions.confirm(this.draft.stepId, edited ? tasks : undefined);
      this.renderList();
    });
    $("reject-plan").addEventListener("click", () => {
      if (this.draft && !this.draft.sent) {
        this.draft.sent = true;
        this.actions.reject(this.draft.stepId);
        this.renderList();
      }
    });
    $("add-task").addEventListener("click", () => {
      if (!this.draft) return;
      const ids = new Set(this.draft.tasks.map((t) => t.id));
      let id;
      do id = `new${this.nextId++}`; while (ids.has(id));
      this.draft.tasks.push({ id, title: "", description: "", depends_on: [] });
      this.renderList();
      this.list.querySelector(`[data-testid="plan-title-${this.draft.tasks.length - 1}"]`)?.focus();
    });
    // A narrower or wider page wraps the titles anew.
    addEventListener("resize", () => this.fit());
    $("replan").addEventListener("click", () => {
      const input = /** @type {HTMLInputElement} */ ($("replan-feedback"));
      if (!this.draft || this.draft.sent || !input.value.trim()) return;
      this.draft.sent = true;
      this.actions.replan(input.value.trim());
      input.value = "";
      this.renderList();
    });
  }

  /**
   * sync shows the editor for the run's open plan confirmation, keeping the
   * draft while it is the same question.
   * @param {import("./baton-client.mjs").State} state
   */
  sync(state) {
    const confirm = state.run?.pending_confirm.find((c) => c.kind === "plan_confirm");
    if (confirm && (!this.draft || this.draft.stepId !== confirm.step_id)) {
      const tasks = (confirm.tasks ?? []).map((t) => ({
        id: t.id, title: t.title, description: t.description ?? "", depends_on: [...(t.depends_on ?? [])],
      }));
      this.draft = { stepId: confirm.step_id, original: JSON.stringify(tasks), tasks, problems: [], sent: false };
      this.renderList();
    }
    // The question is settled once the run leaves awaiting_confirm (its
    // client state drops the confirmation as soon as it is answered, but
    // an edit the server refuses leaves it open there).
    if (this.draft && state.phase !== "awaiting_confirm" && !confirm) this.draft = null;
    const shown = !this.form.hidden;
    this.form.hidden = !this.draft;
    if (!shown) this.fit();
  }

  /**
   * refused shows the server's problems with the edit beside the tasks
   * they name, and lets the user fix and confirm again.
   * @param {{code: string, message: string, details?: any[]}} err
   */
  refused(err) {
    if (!this.draft || !this.draft.sent) return false;
    this.draft.sent = false;
    this.draft.problems = err.details?.length ? err.details : [{ code: err.code, message: err.message }];
    this.renderList();
    return true;
  }

  renderList() {
    const d = this.draft;
    if (!d) return;
    const problems = (i, id) => d.problems.filter((p) => p.index === i || (p.index === undefined && p.task_id && p.task_id === id));
    this.list.replaceChildren(...d.tasks.map((t, i) => h("li", { class: "plan-task", "data-testid": `plan-task-${i}` },
      h("div", { class: "row" },
        h("input", { class: "pt-id", value: t.id, "aria-label": "id", "data-testid": `plan-id-${i}`, size: 6,
          onchange: (e) => { this.renameTask(i, e.target.value.trim()); } }),
        // A title wraps rather than scrolls out of sight: a one-line
        // textarea that grows with its text (a phone is narrow).
        h("textarea", { class: "pt-title grow", rows: 1, value: t.title, placeholder: "Title", "aria-label": "title",
          "data-testid": `plan-title-${i}`,
          onkeydown: (e) => { if (e.key === "Enter") e.preventDefault(); },
          oninput: (e) => {
            if (/[\r\n]/.test(e.target.value)) e.target.value = e.target.value.replace(/[\r\n]+/g, " ");
            t.title = e.target.value;
            fit(e.target);
          } }),
        h("button", { type: "button", class: "small danger", "data-testid": `plan-remove-${i}`, title: "Remove this task",
          onclick: () => this.removeTask(i) }, "Remove")),
      h("textarea", { class: "pt-desc", rows: 2, placeholder: "Description", "aria-label": "description", "data-testid": `plan-desc-${i}`,
        value: t.description, oninput: (e) => { t.description = e.target.value; } }),
      d.tasks.length > 1 ? h("div", { class: "pt-deps" }, "depends on: ",
        d.tasks.filter((o) => o !== t).map((o) => h("label", { class: "check" },
          h("input", { type: "checkbox", checked: t.depends_on.includes(o.id), "data-testid": `plan-dep-${i}-${o.id}`,
            onchange: (e) => {
              t.depends_on = e.target.checked ? [...t.depends_on, o.id] : t.depends_on.filter((x) => x !== o.id);
            } }),
          o.id))) : null,
      problems(i, t.id).map((p) => h("p", { class: "error", "data-testid": `plan-problem-${i}` }, p.message)))));
    const general = d.problems.filter((p) => p.index === undefined && !p.task_id);
    this.errors.replaceChildren(...general.map((p) => h("span", null, p.message, " ")));
    this.errors.hidden = general.length === 0;
    for (const b of this.form.querySelectorAll("button")) b.disabled = d.sent;
    this.fit();
  }

  /** fit sizes the title fields to their text where CSS cannot (field-sizing). */
  fit() {
    if (this.form.hidden) return;
    for (const el of this.list.querySelectorAll("textarea.pt-title")) fit(/** @type {HTMLTextAreaElement} */ (el));
  }

  renameTask(i, id) {
    const d = this.draft;
    const old = d.tasks[i].id;
    d.tasks[i].id = id;
    for (const t of d.tasks) t.depends_on = t.depends_on.map((x) => (x === old ? id : x));
    this.renderList();
  }

  removeTask(i) {
    const d = this.draft;
    const [gone] = d.tasks.splice(i, 1);
    for (const t of d.tasks) t.depends_on = t.depends_on.filter((x) => x !== gone.id);
    d.problems = [];
    this.renderList();
  }
}
