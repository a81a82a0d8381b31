// Drives bench/socketio/server.js as baton-load drives Baton: N sessions
// (one Socket.IO connection each, WebSocket transport only, started over
// the ramp), each running R runs of baton-load's tasks workload one after
// the other, acking every K events. It checks every session's seqs are
// contiguous and every run ends in agent.final_answer, and prints a JSON
// report with baton-load's field names.
//
//   node bench/socketio/load.js --url http://127.0.0.1:18494 --sessions 100 --runs 10
//
// --pace N offers a fixed rate of N events/s across all sessions: runs
// start at N/74 a second (a run is 74 events), each on a session whose
// last run has ended; without it every session starts its next run at once.
// Exits 1 on any violation.

import { io } from "socket.io-client";
import { diamond, now, parseMicro } from "./script.js";

const opts = { url: "http://127.0.0.1:18494", sessions: 10, runs: 3, ramp: 1000, "ack-every": 50, pace: 0, timeout: 300 };
for (let i = 2; i < process.argv.length; i += 2) {
  const name = process.argv[i].replace(/^--?/, "");
  if (!(name in opts)) {
    process.stderr.write(`load.js: unknown flag ${process.argv[i]}; flags: ${Object.keys(opts).join(", ")}\n`);
    process.exit(2);
  }
  opts[name] = name === "url" ? process.argv[i + 1] : Number(process.argv[i + 1]);
}
const eventsPerRun = 74;

const violations = [];
const latencies = [];
let events = 0;
let runs = 0;
let finished = 0;
let started;

// Pacing: one queue of sessions ready to start a run, released on schedule.
const ready = [];
let nextStart = 0;
let timer = null;
function requestRun(s) {
  if (!opts.pace) return s.startRun();
  ready.push(s);
  pump();
}
function pump() {
  const t = performance.now();
  if (nextStart === 0) nextStart = t;
  while (ready.length > 0 && nextStart <= t) {
    ready.shift().startRun();
    nextStart += (1000 * eventsPerRun) / opts.pace;
  }
  if (ready.length > 0 && timer === null) {
    timer = setTimeout(() => { timer = null; pump(); }, Math.max(0, nextStart - t));
  }
}

function session(i) {
  const s = { lastSeq: 0, sinceAck: 0, runsDone: 0, runID: "" };
  const sock = io(opts.url, { transports: ["websocket"], forceNew: true, reconnection: false });
  const fail = (msg) => violations.push(`session ${i}: ${msg}`);
  s.startRun = () => sock.emit("message", { event: "user.solve_tasks", metadata: { tasks: diamond } });
  sock.on("event", (f) => {
    const received = now();
    if (!f.seq) {
      if (f.event === "system.connected") requestRun(s);
      else if (f.event === "system.error") fail(`system.error ${f.metadata?.code}`);
      return;
    }
    if (f.seq !== s.lastSeq + 1) fail(`gap or duplicate: seq ${f.seq} after ${s.lastSeq}`);
    s.lastSeq = f.seq;
    events++;
    latencies.push(received - parseMicro(f.timestamp));
    if (opts["ack-every"] > 0 && ++s.sinceAck >= opts["ack-every"]) {
      s.sinceAck = 0;
      sock.emit("message", { event: "user.ack", metadata: { last_seq: f.seq } });
    }
    if (f.event === "agent.final_answer") {
      runs++;
      if (++s.runsDone < opts.runs) return requestRun(s);
      sock.close();
      if (++finished === opts.sessions) report(0);
    }
  });
  sock.on("connect_error", (err) => { fail(`connect: ${err.message}`); if (++finished === opts.sessions) report(0); });
  sock.on("disconnect", (reason) => {
    if (s.runsDone < opts.runs) {
      fail(`disconnected (${reason}) after ${s.runsDone} runs`);
      if (++finished === opts.sessions) report(0);
    }
  });
}

function report(timedOut) {
  const seconds = (performance.now() - started) / 1000;
  if (timedOut) violations.push(`timed out after ${opts.timeout}s: ${finished} of ${opts.sessions} sessions finished`);
  latencies.sort((a, b) => a - b);
  const pct = (p) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] : 0);
  const rep = {
    sessions: opts.sessions, runs, events, seconds, events_per_sec: events / seconds,
    offered_events_per_sec: opts.pace || undefined,
    latency_p50_ms: pct(0.5), latency_p95_ms: pct(0.95), latency_p99_ms: pct(0.99), latency_max_ms: pct(1),
    violation_count: violations.length, violations: violations.slice(0, 20),
  };
  process.stdout.write(JSON.stringify(rep, null, 2) + "\n");
  process.exit(violations.length > 0 ? 1 : 0);
}

started = performance.now();
for (let i = 0; i < opts.sessions; i++) {
  setTimeout(() => session(i), opts.sessions > 1 ? (opts.ramp * i) / opts.sessions : 0);
}
setTimeout(() => report(1), opts.timeout * 1000);
