// Measures baton-client.mjs in Node: a §3.4 chain link (pure JS and
// SubtleCrypto) and the reducer folding solver.progress. bench/run.sh runs it.
import { sha256Hex, nextChecksum, reduce, initialState } from "../static/baton-client.mjs";
const N = 100000;
let t = performance.now(), c = "";
for (let i = 0; i < N; i++) c = sha256Hex(c + "0190f5a2-7b3c-7d4e-8f10-" + i);
console.log("pure-JS chain link µs:", ((performance.now() - t) * 1000 / N).toFixed(2));
t = performance.now(); c = "";
for (let i = 0; i < N; i++) c = await nextChecksum(c, "0190f5a2-7b3c-7d4e-8f10-" + i);
console.log("SubtleCrypto chain link µs:", ((performance.now() - t) * 1000 / N).toFixed(2));
const tasks = Array.from({length: 6}, (_, i) => ({id: "t"+i, title: "T"+i, depends_on: []}));
let s = reduce(initialState(), {event: "plan.start", seq: 1, metadata: {run_id: "r", request: "q"}});
s = reduce(s, {event: "plan.completed", seq: 2, metadata: {run_id: "r", tasks}});
t = performance.now();
for (let i = 0; i < N; i++) s = reduce(s, {event: "solver.progress", seq: i+3, timestamp: "2026-11-23T10:00:00Z", metadata: {run_id: "r", task_id: "t" + (i % 6), attempt: 1, progress: (i % 100) / 100, message: "m"}});
console.log("reduce solver.progress µs:", ((performance.now() - t) * 1000 / N).toFixed(2));
