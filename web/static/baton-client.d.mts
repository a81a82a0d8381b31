// Type declarations for baton-client.mjs, Baton's dependency-free
// JavaScript client (docs/protocol.md). Copy both files into a project:
// TypeScript finds baton-client.d.mts for "./baton-client.mjs" (and, saved
// as baton-client.d.ts, for "./baton-client.js"); the .mjs has the same
// types as JSDoc.

/** A task as the server and the user write it (§5.1). */
export interface Task {
  id: string;
  title: string;
  description?: string;
  depends_on?: string[];
}

export type Phase = "idle" | "planning" | "awaiting_confirm" | "solving" | "aggregating";
export type TaskStatus =
  | "pending" | "running" | "retrying" | "completed" | "failed" | "skipped" | "cancelled";
export type TodoStatus = "pending" | "in_progress" | "completed" | "blocked";

export interface TodoItem {
  id: string;
  content: string;
  status: TodoStatus;
  tool_calls: number;
  note?: string;
}

export interface TodoList {
  version: number;
  items: TodoItem[];
}

/** One agent.tool_call and, once it arrived, its agent.tool_result (§10). */
export interface ToolCallState {
  step_id: string;
  tool: string;
  arguments: Record<string, unknown>;
  attempt: number;
  round: number;
  /** false until the agent.tool_result arrived. */
  done: boolean;
  ok?: boolean;
  result?: string;
  truncated?: boolean;
  duration_ms?: number;
}

export type ConfirmKind = "plan_confirm" | "task_failed" | "tool_confirm" | "plan_adjust" | "input_request";

/** The metadata of an open agent.user_confirm, of any kind. */
export interface Confirm {
  run_id: string;
  step_id: string;
  kind: ConfirmKind;
  expires_at: string;
  plan_summary?: string;       // plan_confirm
  tasks?: Task[];              // plan_confirm, plan_adjust (the whole list after the change)
  task_id?: string;            // task_failed, tool_confirm, input_request from a task
  options?: string[];          // task_failed: ["retry","skip","abort"]
  tool?: string;               // tool_confirm
  arguments?: Record<string, unknown>; // tool_confirm
  question?: string;           // input_request
  context?: string;            // input_request
  added?: Task[];              // plan_adjust
  removed?: string[];          // plan_adjust
}

export interface TaskState extends Task {
  depends_on: string[];
  status: TaskStatus;
  attempt: number;
  result?: string;
  error?: string;
  /** Why a skipped task did not run: solver.skipped's reason ("dependency_failed", "synthesized"). */
  skip_reason?: string;
  /** For dependency_failed: the dependency that did not complete. */
  skip_dependency?: string;
  todo: TodoList | null;
  // What the event stream adds for a UI (not in a snapshot; a resync
  // starts them afresh):
  /** The latest solver.progress of the current attempt, 0..1. */
  progress: number;
  progress_message: string;
  /** In a chat run (§5.6): the text the model has written since this attempt's start or its latest tool result — the answer as it is written. */
  streamed: string;
  /** While retrying: when the next attempt starts (ms since the epoch, from the event's timestamp + delay_ms). */
  retry_at: number | null;
  /** This task's tool calls, oldest first (the last 50). */
  tool_calls: ToolCallState[];
}

export interface AnswerState {
  step_id: string;
  task_id?: string;
  question: string;
  text: string;
}

export interface Decision {
  run_id: string;
  after_task: string;
  action: "continue" | "adjust_plan" | "request_input" | "synthesize";
  reason: string;
  details?: unknown[];
}

export interface RunState {
  run_id: string;
  request: string;
  /** "chat" for a chat run (§5.6: one task, t1, answered directly); null for every other run. */
  mode: "chat" | null;
  plan_summary: string;
  plan_version: number;
  tasks: TaskState[];
  pending_confirm: Confirm[];
  answers: AnswerState[];
  last_decision: Decision | null;
  final_answer: string | null;
  // What the event stream adds for a UI (not in a snapshot):
  /** pipeline.completed's status, or "cancelled" with cancel_reason, once the run ended. */
  status: "succeeded" | "partial" | "failed" | "cancelled" | null;
  cancel_reason: string | null;
  /** aggregate.completed's summary. */
  summary: string | null;
}

/** A finished run of the session's conversation (§6). */
export interface HistoryEntry {
  run_id: string;
  /** The run's request; a user.solve_tasks run's task titles, joined by "; ". */
  request: string;
  /** The final answer; "" for a cancelled run. */
  answer: string;
  /** pipeline.completed's status, or "cancelled" (plan.cancelled, pipeline.cancelled). */
  status: "succeeded" | "partial" | "failed" | "cancelled" | string;
  ended_at: string;
}

/** The client-visible state of a session: §6's snapshot, plus the UI extras above. */
export interface State {
  phase: Phase;
  run: RunState | null;
  /** The session's finished runs, oldest first, at most history_limit of them. */
  history: HistoryEntry[];
  /** system.connected's history_limit: how many runs the server keeps (0: no limit). */
  history_limit: number;
}

/** A server frame as received. */
export interface Frame {
  event: string;
  event_id?: string;
  seq?: number;
  session_id?: string;
  step_id?: string;
  timestamp?: string;
  content?: string;
  metadata: Record<string, any>;
}

// ---- The reducer: pure functions, shared by the client and anyone who
// ---- keeps state from recorded frames. They return the new state and
// ---- never modify their arguments.

export function initialState(): State;
/** Folds one sequenced event (events that change nothing return the state as is). */
export function reduce(state: State, frame: Frame): State;
/** The state a system.state_snapshot's metadata describes. */
export function fromSnapshot(snapshot: { phase: Phase; run: any; history?: any[] }, historyLimit?: number): State;
/** The state in §6's snapshot shape, without the UI extras: what wsproto.State would hold. */
export function toSnapshot(state: State): { phase: Phase; run: any; history: HistoryEntry[] };
/** The state with system.connected's history_limit applied: the oldest entries past it go. */
export function withHistoryLimit(state: State, limit: number): State;
/** The user's own answer folded in, as the server folds it: the confirmation closes; an input_request's text is recorded. */
export function answered(state: State, stepId: string, metadata: Record<string, any>): State;
/** Seeds a run's task list with a list the client sent (an edited confirmation, user.solve_tasks), as the server does at the run's first solver.start. */
export function beginSolving(state: State, runId: string, tasks: Task[]): State;

// ---- The §3.4 checksum chain.

/** lowercase hex SHA-256 of a string's UTF-8 bytes, pure JS (no SubtleCrypto). */
export function sha256Hex(text: string): string;
/** c(n) = hex(sha256(c(n−1) + event_id(n))), with SubtleCrypto when present, else sha256Hex. */
export function nextChecksum(previous: string, eventId: string): Promise<string>;

// ---- The client.

export type ConnectionState = "DISCONNECTED" | "CONNECTING" | "CONNECTED" | "RECONNECTING";

/** Where the session is kept across page reloads. sessionStorage fits; React Native's AsyncStorage does too (methods may return promises). */
export interface StorageLike {
  getItem(key: string): string | null | Promise<string | null>;
  setItem(key: string, value: string): void | Promise<void>;
  removeItem(key: string): void | Promise<void>;
}

export interface ClientOptions {
  /** ws:// or wss:// URL of Baton's /ws. In a page, defaults to the page's own origin + "/ws". */
  url?: string;
  /** Defaults to globalThis.sessionStorage when there is one, else memory only. null: memory only. */
  storage?: StorageLike | null;
  /** Key under which the session is stored. Defaults to "baton-session". */
  storageKey?: string;
  /** The WebSocket constructor. Defaults to globalThis.WebSocket. */
  WebSocket?: any;
  /** Sub-protocols offered at the handshake. Defaults to none. */
  protocols?: string[];
  /**
   * Bearer token for a server with authentication on (--auth-tokens, --jwt-secret), or a
   * function returning it, called at every connection (so a refreshed JWT is used on the
   * next reconnect — as after the server closes a connection whose JWT expired, code
   * 4001, and the client reconnects and resumes). Sent as the subprotocol "baton.bearer.<token>" beside "baton", or as
   * the access_token query parameter when the token has characters a subprotocol cannot
   * hold. Defaults to none.
   */
  token?: string | (() => string | null | undefined);
  /** Reconnect by itself when the connection drops. Defaults to true. */
  reconnect?: boolean;
  /** First reconnection delay in ms; doubles each attempt with ±50 % jitter. Defaults to 250. */
  backoffInitial?: number;
  /** Longest reconnection delay in ms. Defaults to 30000. */
  backoffMax?: number;
  /** Ack after this many applied events… Defaults to 50. */
  ackEvery?: number;
  /** …or this many ms after the first unacked one, whichever comes first. Defaults to 1000. */
  ackInterval?: number;
  /**
   * Make every resume a follow (metadata.follow, §3.6 of docs/protocol.md): the connection is
   * attached beside the session's others (another tab, another device) instead of replacing
   * them (4000). Defaults to false. follow() turns it on.
   */
  follow?: boolean;
}

export interface ClientStats {
  events: number;       // sequenced events applied
  duplicates: number;   // replayed events already applied, dropped
  resumes: number;      // successful resumes (replay or resync)
  resyncs: number;      // resumes answered with a snapshot
  rejected: number;     // resumes answered with resume_rejected
  reconnects: number;   // connections opened after the first
}

export interface ClientEvents {
  /** Every frame as received (before dedupe), sequenced or not. */
  frame: (frame: Frame) => void;
  /** A sequenced event applied, once and in seq order (a replayed one has replayed: true). */
  event: (frame: Frame & { replayed: boolean }) => void;
  /** The state changed (after an event, a snapshot or the client's own answer). */
  state: (state: State) => void;
  /** The connection state changed. detail says why (e.g. "closed 1013", "replaced", "resume_rejected"). */
  connection: (state: ConnectionState, detail: string) => void;
  /** system.connected: a fresh session or a resume. */
  connected: (metadata: Record<string, any>) => void;
  /** A resync replaced the state with a snapshot. */
  snapshot: (metadata: Record<string, any>) => void;
  /** A system.error. resent is true for the answer to an answer the client sent again after a resume (step_id_mismatch: it had arrived). */
  error: (metadata: { code: string; message: string; ref_type?: string; details?: any[]; retry_after_ms?: number }, resent: boolean) => void;
  /** The session the client held is gone (resume_rejected); the client now holds the connection's fresh session and an empty state. */
  reset: (reason: string) => void;
  /** The contract broken by the server: a gap, a checksum that differs. */
  violation: (message: string) => void;
}

export class BatonClient {
  constructor(options?: ClientOptions);
  /**
   * Opens the connection (resuming a stored session if there is one) and resolves once
   * system.connected (and any replay or snapshot) arrived. Rejects at once when it could never
   * connect: no WebSocket implementation (Node 20 without --experimental-websocket), or no url
   * outside a page.
   */
  connect(): Promise<void>;
  /** Closes the connection and stops reconnecting. The session stays stored (a later connect resumes it) unless forget is true. */
  close(options?: { forget?: boolean }): void;
  on<K extends keyof ClientEvents>(name: K, fn: ClientEvents[K]): () => void;

  readonly state: State;
  readonly connection: ConnectionState;
  readonly sessionId: string;
  /** The session's follow token, which lets another device follow it (§3.6); "" when unknown. */
  readonly followToken: string;
  /**
   * Follows another device's session with its follow token (§3.6): the client drops the session
   * it held and the next connect() resumes this one with follow, from the first event. Every
   * later resume follows too. Call it before connect() or after close(). A follow beyond the
   * server's --max-followers makes connect() reject (connection detail "follow_limit").
   */
  follow(sessionId: string, followToken: string): void;
  readonly lastSeq: number;
  readonly checksum: string;
  readonly stats: ClientStats;

  /** Sends a raw client frame; false when not connected (nothing was sent). */
  send(event: string, fields?: { step_id?: string; content?: string; metadata?: Record<string, any> }): boolean;
  /** user.message; mode "chat" answers it directly with one agent loop (§5.6), "plan" plans it whatever the server's --default-mode. */
  sendMessage(request: string, options?: { adaptive?: boolean; mode?: "chat" | "plan" }): boolean;
  solveTasks(tasks: Task[], options?: { adaptive?: boolean }): boolean;
  /** user.response; folds the answer into the state and keeps it to send again after a resume. */
  respond(stepId: string, metadata: Record<string, any>): boolean;
  confirmPlan(stepId: string, tasks?: Task[]): boolean;
  rejectPlan(stepId: string): boolean;
  answerTaskFailed(stepId: string, action: "retry" | "skip" | "abort"): boolean;
  approveTool(stepId: string, approved: boolean): boolean;
  answerInput(stepId: string, text: string): boolean;
  answerAdjust(stepId: string, confirmed: boolean, tasks?: Task[]): boolean;
  replan(feedback: string): boolean;
  cancel(): boolean;
  cancelTask(taskId: string): boolean;
  restartTask(taskId: string): boolean;
  /** Acks everything applied so far now (the client also acks by itself). */
  ack(): boolean;
}
