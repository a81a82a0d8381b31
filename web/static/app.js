// Baton's UI: one page that drives a session through baton-client.mjs and
// renders its state — the request, the plan and its confirmation, the
// task board, every question the server asks, the answer, the connection
// and the event log. All of it comes from the client's state reducer, fed
// by the event stream and by resync snapshots alike.

import { BatonClient } from "./baton-client.mjs";
import { Board, tickRetries } from "./board.js";
import { Confirms } from "./confirms.js";
import { PlanEditor } from "./plan.js";
import { renderMarkdown } from "./markdown.js";
import { h, $ } from "./dom.js";

const LOG_LINES = 5000; // event log entries kept on the page

const followed = followLink();
// Every resume follows (§3.6 of docs/protocol.md): a reconnect on this
// device leaves the user's other devices on the session attached.
const client = new BatonClient({ token: pageToken(), follow: true });
if (followed) client.follow(followed.sessionId, followed.token);
// For the console and for tests that want more than the page shows.
globalThis.batonClient = client;
const board = new Board($("board"), {
  cancelTask: (id) => act(client.cancelTask(id)),
  restartTask: (id) => act(client.restartTask(id)),
});
const confirms = new Confirms($("confirms"), client);
const plan = new PlanEditor({
  confirm: (stepId, tasks) => act(client.confirmPlan(stepId, tasks)),
  reject: (stepId) => act(client.rejectPlan(stepId)),
  replan: (feedback) => act(client.replan(feedback)),
});

// pageToken is the bearer token for a Baton with authentication on: open
// the page as /#token=TOKEN (a fragment never reaches a server, nor its
// logs). It is kept in sessionStorage for reloads and taken out of the
// address bar; #token= alone forgets it.
function pageToken() {
  const m = /^#(?:.*&)?token=([^&]*)/.exec(location.hash);
  let token;
  try {
    token = m ? decodeURIComponent(m[1]) : sessionStorage.getItem("baton-token");
    if (m) {
      history.replaceState(null, "", location.pathname + location.search);
      if (token) sessionStorage.setItem("baton-token", token);
      else sessionStorage.removeItem("baton-token");
    }
  } catch {
    // A malformed escape, or no storage (a sandboxed frame): what was read stands.
  }
  return token || undefined;
}

// followLink reads an "open on another device" link, /#follow=SESSION.TOKEN
// (the session id and its follow token, §3.6): the page then follows that
// session. The fragment never reaches a server, nor its logs or a
// Referer; it is taken out of the address bar at once, so the page's
// history does not keep it. null when the page was opened otherwise.
function followLink() {
  const m = /^#(?:.*&)?follow=([^&.]+)\.([^&]+)/.exec(location.hash);
  if (!m) return null;
  try {
    history.replaceState(null, "", location.pathname + location.search);
    return { sessionId: decodeURIComponent(m[1]), token: decodeURIComponent(m[2]) };
  } catch {
    return null; // a malformed escape: the page starts its own session
  }
}

// The "open on another device" link: anyone who has it can watch the
// session and answer its questions until the session ends, so it is shown
// only on request, with that warning.
$("share").addEventListener("click", () => {
  const box = $("share-box");
  box.hidden = !box.hidden;
  renderShare();
});

function renderShare() {
  const link = client.sessionId && client.followToken
    ? `${location.origin}${location.pathname}#follow=${encodeURIComponent(client.sessionId)}.${encodeURIComponent(client.followToken)}`
    : "";
  /** @type {HTMLInputElement} */ ($("share-link")).value = link;
}

// act reports a frame that could not be sent (the client is between
// connections); the user sends it again once reconnected.
function act(sent) {
  if (!sent) showError("Not connected: try again when the connection is back.");
  else clearError();
  return sent;
}

function showError(text) {
  const el = $("error");
  el.textContent = text;
  el.hidden = false;
}

function clearError() {
  $("error").hidden = true;
}

// ---- The request box.

$("request-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = /** @type {HTMLTextAreaElement} */ ($("request")).value.trim();
  if (!text) return;
  const chat = chatMode();
  const adaptive = !chat && /** @type {HTMLInputElement} */ ($("adaptive")).checked;
  if (act(client.sendMessage(text, { adaptive, mode: chat ? "chat" : "plan" }))) /** @type {HTMLTextAreaElement} */ ($("request")).value = "";
});
$("cancel-run").addEventListener("click", () => act(client.cancel()));
// A new conversation is a new session: the client forgets this one (its
// runs stay on the server until it expires) and connects afresh.
$("new-conversation").addEventListener("click", () => {
  if (client.state.phase !== "idle") return;
  client.close({ forget: true });
  $("event-log").replaceChildren();
  logged = 0;
  $("event-count").textContent = "0";
  clearError();
  client.connect().catch((err) => showError(`Could not connect: ${err.message ?? err}`));
});

// The mode switch: plan (the pipeline, with the plan to confirm) or chat
// (one agent answers directly). A chat run has no plan to adapt. The
// choice is kept for reloads of this tab.
function chatMode() {
  return /** @type {HTMLInputElement} */ ($("mode-chat")).checked;
}
function syncMode() {
  const chat = chatMode();
  $("adaptive").toggleAttribute("disabled", chat);
  /** @type {HTMLTextAreaElement} */ ($("request")).placeholder = chat ? "What time is it in Tokyo?" : "Plan a weekend trip to Lisbon";
  try {
    sessionStorage.setItem("baton-mode", chat ? "chat" : "plan");
  } catch {
    // No storage (a sandboxed frame): the switch still works for this page.
  }
}
try {
  if (sessionStorage.getItem("baton-mode") === "chat") /** @type {HTMLInputElement} */ ($("mode-chat")).checked = true;
} catch {
  // No storage: plan, the default.
}
for (const id of ["mode-plan", "mode-chat"]) $(id).addEventListener("change", syncMode);
syncMode();

// ---- Rendering, at most once per task turn however many events arrive.

let pending = false;
function schedule() {
  if (pending) return;
  pending = true;
  setTimeout(() => { pending = false; render(); }, 0);
}

function render() {
  const state = client.state;
  const run = state.run;
  const busy = state.phase !== "idle";
  $("send").toggleAttribute("disabled", busy || client.connection !== "CONNECTED");
  $("cancel-run").hidden = !busy;
  $("new-conversation").toggleAttribute("disabled", busy);
  renderThread(state);
  $("run").hidden = !run;
  if (!run) return;

  $("phase").textContent = state.phase;
  $("phase").dataset.phase = state.phase;
  const chat = run.mode === "chat";
  $("run-mode").hidden = !chat;
  $("plan-summary").textContent = run.plan_summary || run.request;
  // The tasks as they stand, not as planned: an edit at confirmation or an
  // adjustment changes them. While the plan awaits confirmation the editor
  // shows the draft, so the tally waits too.
  $("plan-tally").textContent = state.phase === "awaiting_confirm" ? "" : tally(run);
  const decision = run.last_decision;
  $("decision").hidden = !decision;
  if (decision) $("decision").textContent = `After ${decision.after_task}: ${decision.action} — ${decision.reason}`;

  plan.sync(state);
  confirms.render(state);
  // While the plan awaits its confirmation the editor shows the tasks.
  $("board").hidden = state.phase === "awaiting_confirm";
  board.render(state);

  const answer = run.final_answer;
  // A chat run's answer shows as it is written, until the final one.
  const stream = chat && answer === null && !run.status ? (run.tasks[0]?.streamed ?? "") : "";
  $("answer-stream").hidden = !stream;
  $("answer-stream").textContent = stream;
  $("answer-section").hidden = answer === null && !run.status && !stream;
  $("run-status").textContent = run.status ? `(${run.status}${run.cancel_reason ? `: ${run.cancel_reason}` : ""})` : "";
  const shown = $("final-answer");
  if (shown.dataset.text !== (answer ?? "")) {
    const appeared = !shown.dataset.text && !!answer;
    shown.dataset.text = answer ?? "";
    shown.replaceChildren(renderMarkdown(document, answer ?? ""));
    // The answer is what the run was for: bring it into view when it comes
    // (below a long board, or on a phone, it would land out of sight).
    if (appeared) {
      const still = matchMedia("(prefers-reduced-motion: reduce)").matches;
      $("answer-section").scrollIntoView({ block: "start", behavior: still ? "auto" : "smooth" });
    }
  }
}

// ---- The thread: the session's earlier runs, oldest first, above the
// current one (whose own entry, once it ends, is the answer shown below).

let threadKey = "";
function renderThread(state) {
  const current = state.run ? state.run.run_id : "";
  const entries = (state.history ?? []).filter((e) => e.run_id !== current);
  $("thread").hidden = entries.length === 0;
  const key = entries.map((e) => e.run_id).join(" ");
  if (key === threadKey) return; // entries never change once made
  threadKey = key;
  $("thread-entries").replaceChildren(...entries.map((e) => h("li", { class: "thread-entry", "data-testid": "thread-entry",
    "data-run-id": e.run_id, "data-status": e.status },
  h("p", { class: "thread-request", "data-testid": "thread-request" }, e.request),
  h("div", { class: "thread-answer", "data-testid": "thread-answer" },
    e.answer ? renderMarkdown(document, e.answer) : h("em", {}, `(${e.status}: no answer)`)),
  h("span", { class: "status" }, e.status))));
}

const TALLY_ORDER = ["completed", "running", "retrying", "pending", "failed", "skipped", "cancelled"];

/** tally is "5 tasks · 3 completed · 2 pending", and the plan's version once an adjustment changed it. */
function tally(run) {
  const n = run.tasks.length;
  if (!n) return "";
  const count = new Map();
  for (const t of run.tasks) count.set(t.status, (count.get(t.status) ?? 0) + 1);
  const parts = [`${n} task${n > 1 ? "s" : ""}`];
  for (const st of TALLY_ORDER) if (count.get(st)) parts.push(`${count.get(st)} ${st}`);
  if (run.plan_version > 1) parts.push(`plan v${run.plan_version}`);
  return parts.join(" · ");
}

// ---- The connection indicator.

function renderConnection() {
  const el = $("connection");
  el.dataset.state = client.connection;
  el.dataset.seq = String(client.lastSeq);
  el.textContent = `${client.connection} · seq ${client.lastSeq}`;
  $("session").textContent = client.sessionId ? client.sessionId : "";
  $("session").title = client.sessionId ? `session ${client.sessionId}` : "session id";
  $("share").hidden = !client.followToken;
  if (!$("share-box").hidden) renderShare();
}

// ---- The event log: every sequenced event once, in seq order, and every
// unsequenced frame (connected, errors, snapshots) as it came.

let logged = 0;
function log(label, frame, cls) {
  const list = $("event-log");
  const meta = frame.metadata ?? {};
  const who = meta.task_id ? ` ${meta.task_id}` : "";
  list.append(h("li", { class: cls, "data-seq": frame.seq ?? null },
    h("span", { class: "seq" }, label), " ", h("span", { class: "ev" }, frame.event + who), " ", frame.content ?? ""));
  while (list.childElementCount > LOG_LINES) list.firstElementChild.remove();
  $("event-count").textContent = String(++logged);
}

client.on("event", (f) => { log(`#${f.seq}`, f, f.replayed ? "replayed" : ""); renderConnection(); });
client.on("frame", (f) => {
  if (f.seq === undefined || f.seq === null || f.seq === 0) {
    const meta = f.metadata ?? {};
    const note = f.event === "system.connected"
      ? (meta.resumed ? (meta.resync ? "resumed by resync" : `resumed, ${meta.replayed ?? 0} replayed`) : "new session")
      : f.event === "system.error" ? `${meta.code}: ${meta.message}` : f.event === "system.state_snapshot" ? `as of seq ${meta.seq}` : "";
    log("·", { ...f, content: note }, "system");
  }
});
client.on("state", schedule);
// A browser is not told why a handshake failed: a page that never
// connected says what to try, a token being the likely want.
let everConnected = false;
client.on("connection", () => {
  renderConnection();
  schedule();
  if (client.connection === "CONNECTED") {
    if (!everConnected) clearError();
    everConnected = true;
  } else if (client.connection === "RECONNECTING" && !everConnected) {
    showError("Cannot connect to Baton. If it requires a token, open this page as /#token=YOUR_TOKEN.");
  }
});
client.on("connected", renderConnection);
client.on("snapshot", renderConnection);
client.on("error", (m, resent) => {
  if (resent) return; // an answer sent again after a resume that had arrived the first time
  if (m.ref_type === "user.response" && (m.code === "invalid_tasks" || m.code === "invalid_message") && plan.refused(m)) return;
  showError(`${m.code}: ${m.message}`);
});
client.on("reset", (reason) => showError(`The previous session could not be resumed (${reason}); this is a new one.`));
client.on("connection", (state, detail) => {
  if (state !== "DISCONNECTED") return;
  if (detail === "replaced") showError("This session was taken over by a resume elsewhere; reload the page to start a new one.");
  if (detail === "follow_limit") showError("This session has as many devices following it as the server allows; close one and reload.");
});
client.on("violation", (v) => console.error("baton: contract violation:", v));

// Countdowns (retries, expiring questions) tick without rebuilding cards.
setInterval(() => { tickRetries($("board")); confirms.tick(client.state); }, 500);

renderConnection();
client.connect().catch((err) => showError(`Could not connect: ${err.message ?? err}`));
