#!/usr/bin/env bash
# Measures Baton on loopback and writes docs/performance.md.
#   bash bench/run.sh            # ~3 minutes on a 2-core machine
# Everything targets 127.0.0.1 and ends by itself. Needs go, curl and python3.
# Overridable: BENCH_PORT (18480) and BENCH_DEBUG_PORT (18481) for the server
# under test, BENCH_REDIS_PORT (18482) and BENCH_PORT2 (18483) for the Redis
# store's runs (skipped without redis-server), BENCH_OUT (docs/performance.md)
# for the report.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in go curl python3; do
  command -v "$tool" >/dev/null || { echo "bench/run.sh needs $tool" >&2; exit 1; }
done
port=${BENCH_PORT:-18480} debug=${BENCH_DEBUG_PORT:-18481} report=${BENCH_OUT:-docs/performance.md}
rport=${BENCH_REDIS_PORT:-18482} port2=${BENCH_PORT2:-18483}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true

bin=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$bin"' EXIT
go build -o "$bin/baton" ./cmd/baton
# Every session of the load comes from one address, and the idle phase holds
# 10,000 sessions beside those of earlier phases still alive: the connection
# limits are off (README, Limits). The rate limit stays: the load's clients
# must not meet it.
limits=(--max-conns-per-ip 0 --max-sessions 0)
go build -o "$bin/baton-load" ./cmd/baton-load

"$bin/baton" "${limits[@]}" --addr 127.0.0.1:$port --debug-addr 127.0.0.1:$debug --sim-delay 0 --retry-base 5ms \
  --log-format json 2>"$bin/baton.log" >/dev/null &
pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
url="ws://127.0.0.1:$port/ws"

load() { "$bin/baton-load" -url "$url" -quiet -json "$@"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
heap() { # live heap after a forced GC, in bytes
  curl -fs "http://127.0.0.1:$debug/debug/pprof/heap?gc=1" >/dev/null
  curl -fs "http://127.0.0.1:$debug/debug/vars" | python3 -c "import json,sys; print(json.load(sys.stdin)['memstats']['HeapAlloc'])"
}
rss() { awk '/VmRSS/ {print $2*1024}' /proc/$pid/status; }

echo "== active sessions" >&2
declare -A R
p99s=()
for n in 1 100 1000 1000 1000; do # 1,000 three times: its p99 swings between runs here
  runs=$(( n == 1 ? 200 : (n == 100 ? 10 : 2) ))
  out=$(load -sessions $n -runs $runs -mix tasks=1 -ramp 1s -ack-every 50)
  row=$(echo "$out" | python3 -c "import json,sys; r=json.load(sys.stdin); print('%d | %d | %d | %.0f | %.2f | %.2f | %.2f | %d' % (r['sessions'], r['runs'], r['events'], r['events_per_sec'], r['latency_p50_ms'], r['latency_p99_ms'], r['latency_max_ms'], r['violation_count']))")
  R[$n]+="| $row |"$'\n'
  [ "$n" = 1000 ] && p99s+=("$(echo "$row" | cut -d'|' -f6 | xargs)")
  echo "  $n: $row" >&2
done
worst=$(printf '%s\n' "${p99s[@]}" | sort -g | tail -1)

echo "== agent loops" >&2
declare -A A
for n in 1 100 1000; do
  runs=$(( n == 1 ? 100 : (n == 100 ? 5 : 1) ))
  out=$(load -sessions $n -runs $runs -mix agent=1 -ramp 1s -ack-every 50)
  row=$(echo "$out" | python3 -c "import json,sys; r=json.load(sys.stdin); print('%d | %d | %d | %.0f | %.2f | %.2f | %.2f | %d' % (r['sessions'], r['runs'], r['events'], r['events_per_sec'], r['latency_p50_ms'], r['latency_p99_ms'], r['latency_max_ms'], r['violation_count']))")
  A[$n]="| $row |"$'\n'
  echo "  $n: $row" >&2
done

echo "== 10,000 idle sessions" >&2
h0=$(heap); r0=$(rss)
"$bin/baton-load" -url "$url" -idle 10000 -hold 60s >"$bin/idle.out" &
idlepid=$!
for _ in $(seq 600); do grep -q connected "$bin/idle.out" 2>/dev/null && break; sleep 0.2; done
sleep 1 # let the last handshakes' garbage become collectable
h1=$(heap); r1=$(rss)
conns=$(curl -fs "http://127.0.0.1:$port/healthz" | field connections)
kill $idlepid 2>/dev/null; wait $idlepid 2>/dev/null || true
idle_heap=$(( (h1 - h0) / 10000 )); idle_rss=$(( (r1 - r0) / 10000 ))
echo "  $conns connections: heap $idle_heap B/session, RSS $idle_rss B/session" >&2

kill $pid; wait $pid 2>/dev/null || true

echo "== resume under drops" >&2
declare -A D
for ring in 1000 16; do # the default ring, then one too small for what a session misses while down
  "$bin/baton" "${limits[@]}" --addr 127.0.0.1:$port --sim-delay 20ms --retry-base 5ms --buffer-size $ring \
    --log-format json 2>>"$bin/baton.log" >/dev/null &
  dpid=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  out=$(load -sessions 200 -runs 5 -drop-rate 120 -ack-every 20)
  row=$(echo "$out" | python3 -c "import json,sys; r=json.load(sys.stdin); print('$ring | %d | %d | %d | %d | %d | %d | %d | %.2f | %d' % (r['sessions'], r['runs'], r['events'], r['drops'], r['resumes'], r['resyncs'], r['duplicates_dropped'], r['latency_p99_ms'], r['violation_count']))")
  D[$ring]="| $row |"$'\n'
  echo "  ring $ring: $row" >&2
  kill $dpid; wait $dpid 2>/dev/null || true
done

echo "== the Redis store" >&2
declare -A S
row() { python3 -c "import json,sys; r=json.load(sys.stdin); print('$1 | %d | %d | %d | %.0f | %.2f | %.2f | %d' % (r['sessions'], r['runs'], r['events'], r['events_per_sec'], r['latency_p50_ms'], r['latency_p99_ms'], r['violation_count']))"; }
waithealth() { for _ in $(seq 100); do curl -fs "http://127.0.0.1:$1/healthz" >/dev/null && return; sleep 0.1; done; }
if command -v redis-server >/dev/null; then
  mkdir -p "$bin/redis"
  redis-server --port $rport --bind 127.0.0.1 --save "" --appendonly no --dir "$bin/redis" >"$bin/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$rport) 2>/dev/null && break; sleep 0.1; done
  redis="redis://127.0.0.1:$rport/0"
  for store in memory redis; do
    extra=(); [ $store = redis ] && extra=(--store redis --redis-url "$redis")
    "$bin/baton" "${limits[@]}" --addr 127.0.0.1:$port --sim-delay 0 --retry-base 5ms "${extra[@]}" --log-format json 2>>"$bin/baton.log" >/dev/null &
    spid=$!; waithealth $port
    for n in 100 1000; do
      runs=$(( n == 100 ? 10 : 2 ))
      S[$store$n]="| $(load -sessions $n -runs $runs -mix tasks=1 -ramp 1s -ack-every 50 | row "$store") |"$'\n'
      echo "  $store $n: ${S[$store$n]}" >&2
    done
    kill $spid; wait $spid 2>/dev/null || true
  done
  # Two nodes on one Redis, every drop resumed on the other node.
  "$bin/baton" "${limits[@]}" --addr 127.0.0.1:$port --sim-delay 20ms --retry-base 5ms --store redis --redis-url "$redis" --log-format json 2>>"$bin/baton.log" >/dev/null &
  apid=$!
  "$bin/baton" "${limits[@]}" --addr 127.0.0.1:$port2 --sim-delay 20ms --retry-base 5ms --store redis --redis-url "$redis" --log-format json 2>>"$bin/baton.log" >/dev/null &
  bpid=$!
  waithealth $port; waithealth $port2
  two=$("$bin/baton-load" -url "ws://127.0.0.1:$port/ws" -url "ws://127.0.0.1:$port2/ws" -resume-elsewhere -quiet -json \
    -sessions 200 -runs 5 -drop-rate 120 -ack-every 20 | python3 -c "import json,sys; r=json.load(sys.stdin); print('| %d | %d | %d | %d | %d | %d | %d | %.2f | %d |' % (r['sessions'], r['runs'], r['events'], r['drops'], r['resumes'], r['resyncs'], r['duplicates_dropped'], r['latency_p99_ms'], r['violation_count']))")
  echo "  two nodes: $two" >&2
  kill $apid $bpid; wait $apid $bpid 2>/dev/null || true
  redisbench=$(go test -run '^$' -bench 'OpenRing1000|Writer' -benchmem -count 1 ./redisstore/ | grep -E '^Benchmark')
  echo "$redisbench" >&2
  kill $rpid; wait $rpid 2>/dev/null || true
  rate() { echo "${S[$1]}" | cut -d'|' -f6 | xargs; }
  p99() { echo "${S[$1]}" | cut -d'|' -f8 | xargs; }
  rate_pct=$(python3 -c "print('%.0f' % (100*$(rate redis100)/$(rate memory100)))")
  p99_x=$(python3 -c "print('%.2f' % ($(p99 redis1000)/$(p99 memory1000)))")
  open_ms=$(python3 -c "print('%.2f' % ($(echo "$redisbench" | awk '$1 ~ /^BenchmarkOpenRing1000-/ {print $3}')/1e6))")
else
  echo "  redis-server is missing: not measured" >&2
  rate_pct=0 p99_x=0 open_ms=0 two="| not measured: no redis-server |" redisbench="not measured: no redis-server"
fi

echo "== go benchmarks" >&2
jsbench=$(node web/testdata/bench.mjs 2>&1 || echo "node is missing: not measured")
gobench=$(go test -run '^$' -bench 'EventPath|BareWebSocket|ResumeFullRing|Emit|Append|Since1000|Ack$|AppendFrame|Scheduler50|AgentRound|Event$|EventParallel' \
  -benchmem -count 1 ./orchestrator/ ./buffer/ ./wsproto/ ./solver/ ./metrics/ | grep -E '^Benchmark')
echo "$gobench" >&2
ns() { echo "$gobench" | awk -v b="$1" '$1 ~ "^"b"-" {print $3}'; }
ratio=$(python3 -c "print('%.0f' % (100*$(ns BenchmarkBareWebSocket)/$(ns BenchmarkEventPathWebSocket)))")
resume_server=$(python3 -c "print('%.3f' % ($(ns BenchmarkResumeFullRingServer)/1e6))")
resume_e2e=$(python3 -c "print('%.2f' % ($(ns BenchmarkResumeFullRingEndToEnd)/1e6))")

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
cat >"$report" <<MD
# Performance

Measured by \`bash bench/run.sh\` on $(date -u +%Y-%m-%d): $(nproc) cores ($cpu),
$(free -g | awk '/Mem:/ {print $2}') GiB, $(go version | cut -d' ' -f3), Linux $(uname -r).
Server and load generator share the same $(nproc) cores over loopback, so every number
here includes the load tool's own cost, and latency under load moves a lot between runs
(at 1,000 unpaced sessions the p99 is the backlog — events queued while server and load
tool share the CPU — and ranges over hundreds of ms between runs; since the agent loop a
\`tasks=1\` run is 74 events, not 28). Numbers, not assertions: nothing in the test suite
times anything.

## Targets

| target | result | |
|---|---|---|
| event path ≥ 60 % of the bare WebSocket ceiling | **${ratio} %** | $( [ "$ratio" -ge 60 ] && echo met || echo missed) |
| ≥ 10,000 idle sessions at ≤ 32 KiB heap each | **$conns** sessions, **$(( idle_heap / 1024 )) KiB** heap each | $( [ "$conns" -ge 10000 ] && [ "$idle_heap" -le 32768 ] && echo met || echo missed) |
| p99 delivery latency ≤ 25 ms at 1,000 active sessions | **${p99s[*]} ms** in three runs; worst $worst | $(python3 -c "print('met' if float('$worst') <= 25 else 'missed (judged by the worst run)')") |
| full-ring replay ≤ 2 ms server time | **${resume_server} ms** (end to end ${resume_e2e} ms) | $(python3 -c "print('met' if $resume_server <= 2 else 'missed')") |
| \`--store redis\`: events/s ≥ 50 % of memory's at 100 sessions | **${rate_pct} %** | $(python3 -c "print('met' if $rate_pct >= 50 else 'missed')") |
| \`--store redis\`: p99 at 1,000 sessions ≤ 2× memory's | **${p99_x}×** | $(python3 -c "print('met' if 0 < $p99_x <= 2 else 'missed')") |
| \`--store redis\`: a resume replaying 1,000 events from another node ≤ 5 ms server time | **$(python3 -c "print('%.2f' % ($open_ms + $resume_server))") ms** (store read ${open_ms} ms + ${resume_server} ms) | $(python3 -c "print('met' if 0 < $open_ms + $resume_server <= 5 else 'missed')") |

## Active sessions (\`--sim-delay 0\`, \`baton-load -mix tasks=1\`)

Each run is four client-supplied tasks (a diamond), 74 events with their todo lists and tool events; sessions ack every 50.
Latency is server timestamp → client receipt of live events.

| sessions | runs | events | events/s | p50 ms | p99 ms | max ms | violations |
|---|---|---|---|---|---|---|---|
${R[1]}${R[100]}${R[1000]}

## Agent loops (\`--sim-delay 0\`, \`baton-load -mix agent=1\`)

Each run is three tasks whose agent loops write and complete todo lists, one asking the
user (\`ask_user\`, answered by the load tool through an \`input_request\`) and one making
a failing tool call; about 60 events a run, half of them tool and todo events.

| sessions | runs | events | events/s | p50 ms | p99 ms | max ms | violations |
|---|---|---|---|---|---|---|---|
${A[1]}${A[100]}${A[1000]}
\`AgentRound\` below is the loop's own cost per round (prompt, budget, one tool call with its
events and todo tracking), with a model and a tool that take no time.

## Resume under drops (\`--sim-delay 20ms\`, \`baton-load -drop-rate 120\`)

The README's load: 200 sessions of 5 runs of every kind (\`-mix\` default), each session's
connection killed at random twice a minute; acks every 20. First with the default ring,
where a resume is a replay, then with a 16-entry ring, where most resumes find events gone
and are answered with a snapshot (resync). The tool counts an event delivered twice as a
violation, and starts and ends runs from snapshots as from events.

| ring | sessions | runs | events | drops | resumes | resyncs | duplicates | p99 ms | violations |
|---|---|---|---|---|---|---|---|---|---|
${D[1000]}${D[16]}
## The Redis store (\`--store redis\`, a local \`redis-server\`)

The same load as *Active sessions* (\`--sim-delay 0\`, \`-mix tasks=1\`), against one Baton
with each store, in the same run of this script. With Redis, every event is appended to
the session's stream (batched: one round trip carries every session's pending events) and
reaches the client only once Redis holds it.

| store | sessions | runs | events | events/s | p50 ms | p99 ms | violations |
|---|---|---|---|---|---|---|---|
${S[memory100]}${S[redis100]}${S[memory1000]}${S[redis1000]}
Not a target but worth saying: with Redis the p50 and p99 at 100 sessions are several times
the memory store's. This load is unpaced, so latency is backlog, and with Redis each event
costs the server more CPU. A transition's event carries a checkpoint of the whole session
state (\`EmitCheckpointed\` below: about 5 µs for a 1-task state, 19 µs for 10 tasks, under
the session lock). The writer's round trip adds its own CPU, and redis-server shares the
same two cores. A checkpoint that re-encoded only what changed would cut the first.

Two Batons on one Redis, 200 sessions of 5 runs of every kind (\`--sim-delay 20ms\`), each
connection killed twice a minute and resumed on **the other** node, which replays from
Redis, tails the stream and forwards the client's commands to the owner:

| sessions | runs | events | drops | resumes | resyncs | duplicates | p99 ms | violations |
|---|---|---|---|---|---|---|---|---|
$two

\`\`\`text
$redisbench
\`\`\`

- \`OpenRing1000\`: what a node that does not hold a session reads to answer a resume
  replaying a full ring: the session's hash and 1,000 events in one round trip, rebuilt
  into a ring. Add \`ResumeFullRingServer\` below for the whole server time of the resume.
- \`Writer\`: appends made durable per second through the store's one writer, with a unit
  per append; \`window=1\` waits for each event to be durable before the next.

## Idle sessions

$conns connected idle sessions: **$idle_heap B** of live heap and **$idle_rss B** of RSS per
session on the server (heap after a forced GC, before and after connecting them).

## The JavaScript client (\`node web/testdata/bench.mjs\`)

\`\`\`text
$jsbench
\`\`\`

Per event the client hashes one chain link and folds the event: tens of µs, invisible
beside the network. SubtleCrypto's digest is asynchronous, and its promise costs more than
the hash itself in Node; the client still prefers it where it exists, as the contract asks.

## Micro-benchmarks (\`go test -bench\`)

\`\`\`text
$gobench
\`\`\`

- \`EventPathWebSocket\` vs \`BareWebSocket\`: one event through Baton (id, encoding, ring,
  state, queue, writer) vs the same pre-encoded frame written in a loop by a bare
  coder/websocket server; both read by a client over loopback. Ratio above; since the
  per-batch deadline both are bound by the same reader, so the ratio sits near 100 % and
  moves ±15 % between runs.
- \`ResumeFullRingServer\`: lookup, token check, ring read, attach and enqueue of 1,000
  replayed frames; \`ResumeFullRingEndToEnd\` adds the dial, the handshake and reading all
  1,001 frames on the client.

## What the profile shows, and what changed

A CPU profile of the server (\`--debug-addr\`, \`/debug/pprof/profile\`) during a
1,000-session run showed the server using about 40 % of one core while the load generator
took the rest of the machine: at 1,000 sessions on 2 shared cores the p99 is mostly the two
processes queueing for CPU, not Baton's event path, which is why it swings between runs. Inside the server, 41 % of its
time was \`coder/websocket.(*Conn).writeFrame\` (one write syscall per frame), 23 % the
emit path (UUID v7, envelope encoding, ring append with SHA-256, state fold), and about 8 %
a \`context.WithTimeout\` made for every frame written.

- Before: the writer made one deadline context per frame — \`EventPathWebSocket\`
  8,433 ns/op and 18 allocs/op (67 % of the ceiling). After: one deadline per batch of
  queued frames — 11 allocs/op and 6.1–7.4 µs/op over three runs (the ratio above).
- Then the frame was encoded into a fresh 256-byte buffer that grew for most events (two
  allocations, slack kept in the ring); now it is encoded into a per-session scratch buffer
  and copied out at its exact size: \`Emit\` 1,716 → 1,450 ns/op, 6 → 5 allocs, 1,088 → 704 B.
- Allocations per event on the hot path now: \`Emit\` 5 — the event id string, the
  metadata's \`json.Marshal\` and its result, the exact-size frame, the encode closure —
  plus the queue slot's amortised growth and the writer's per-batch context.
- Metrics (\`/metrics\`, package \`metrics\`): every event also increments a Prometheus counter
  resolved at start — one read-only map lookup and one atomic add, \`BenchmarkEvent\` 12 ns
  and 0 allocs (18 ns from both cores at once on one counter) — and the orchestrator's
  benchmarks run with it, as cmd/baton does; ring fill is sampled at scrape, off the event
  path. Interleaved runs of the code before, with the Observer off and on (10 each, medians,
  benchstat): \`Emit\` 1.45 / 1.26 / 1.46 µs and \`EventPathWebSocket\` 3.60 / 3.60 / 3.76 µs
  — a spread of ±16–44 % between runs and no difference significant (p ≥ 0.06); allocations
  unchanged (5 and 10 per event). With one CPU (\`-cpu 1\`) likewise: \`Emit\` 1.48 / 1.49 /
  1.48 µs.
- Left for later, measured not guessed: writes are one syscall per frame because
  coder/websocket flushes each message; coalescing them would need a writer below its API.
  A p99 at 1,000 sessions should be re-measured with the load generator on another
  machine before optimising further.
MD
echo "wrote $report" >&2
