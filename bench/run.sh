#!/usr/bin/env bash
# Measures Baton at system level on loopback, beside a bare coder/websocket
# server (bench/bare, naive and pre-encoded) and Socket.IO with connection
# state recovery (bench/socketio), and rewrites docs/performance.md.
#   bash bench/run.sh            # 3 to 5 minutes on a 2-core machine
#
# For every load it reads the server's CPU time (utime+stime, /proc/PID/stat)
# and write syscalls (syscw, /proc/PID/io) before and after, and divides by the
# events delivered (bench/measure.py). The server runs on one CPU and the load
# tool on the others (taskset), when there are two or more. Each server is
# started fresh for every repetition of every load. Everything listens on
# 127.0.0.1 and ends by itself; every wait has a deadline.
#
# Needs go, curl and python3; node and npm for Socket.IO (skipped without them;
# bench/socketio/node_modules is installed from its lockfile on first use);
# redis-server for the Redis store's numbers (skipped without it), and
# redis-cli for the Redis Cluster's.
# Environment:
#   BENCH_PORT (18480)        the server under test (Baton, bare, Socket.IO)
#   BENCH_DEBUG_PORT (18481)  Baton's --debug-addr, for the idle sessions' heap
#   BENCH_REDIS_PORT (18482), BENCH_PORT2 (18483)  the Redis store's runs
#   BENCH_OUT (docs/performance.md)  the report
#   BENCH_BATON_BIN, BENCH_LOAD_BIN  a baton and a baton-load to measure instead
#       of building ./cmd/baton and ./cmd/baton-load (an older build, for a
#       before/after); the bare server is always built from this tree
#   BENCH_REPS (3)            repetitions of each comparison load
#   BENCH_KEEP                a file to keep this run's raw results in
#   BENCH_BEFORE              an earlier run's kept results: the report sets
#       Baton's figures beside them (before/after)
#   BENCH_SECTIONS (all)      "redis": only the Redis store's section; "storm":
#       only the resume storms; "cluster": only the Redis Cluster's
#   BENCH_CLUSTER_PORT (18490)  the Redis Cluster's three masters: this port
#       and the next two (their buses 10,000 above)
#   BENCH_STORM (10000)       sessions in each resume storm
set -euo pipefail
# Supplied binaries are named from the caller's directory.
baton=${BENCH_BATON_BIN:+$(realpath "$BENCH_BATON_BIN")}
[ -n "${BENCH_BEFORE:-}" ] && export BENCH_BEFORE=$(realpath "$BENCH_BEFORE")
[ -n "${BENCH_KEEP:-}" ] && BENCH_KEEP=$(realpath -m "$BENCH_KEEP")
loadbin=${BENCH_LOAD_BIN:+$(realpath "$BENCH_LOAD_BIN")}
cd "$(dirname "$0")/.."
for tool in go curl python3; do
  command -v "$tool" >/dev/null || { echo "bench/run.sh needs $tool" >&2; exit 1; }
done
port=${BENCH_PORT:-18480} debug=${BENCH_DEBUG_PORT:-18481} report=${BENCH_OUT:-docs/performance.md}
rport=${BENCH_REDIS_PORT:-18482} port2=${BENCH_PORT2:-18483} reps=${BENCH_REPS:-3}
for p in $port $debug $rport $port2; do
  if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
    echo "bench/run.sh: 127.0.0.1:$p is in use; set BENCH_PORT, BENCH_DEBUG_PORT, BENCH_REDIS_PORT or BENCH_PORT2" >&2
    exit 1
  fi
done
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
began=$(date +%s)

bin=$(mktemp -d)
results=$bin/results.jsonl
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$bin"' EXIT
# meta K V [K V]...: facts about this run, for the report.
meta() { python3 -c 'import json,sys; print(json.dumps({"section": "meta", **dict(zip(sys.argv[1::2], sys.argv[2::2]))}))' "$@" >>"$results"; }

if [ -z "$baton" ]; then
  go build -o "$bin/baton" ./cmd/baton
  baton=$bin/baton
  meta baton "built from this tree, $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' 2>/dev/null || echo ' with uncommitted changes')"
else
  meta baton "$BENCH_BATON_BIN (BENCH_BATON_BIN)"
fi
if [ -z "$loadbin" ]; then
  go build -o "$bin/baton-load" ./cmd/baton-load
  loadbin=$bin/baton-load
  meta load "built from this tree"
else
  meta load "$BENCH_LOAD_BIN (BENCH_LOAD_BIN)"
fi
go build -o "$bin/bare" ./bench/bare

# Every session of a load comes from one address, and the idle phase holds
# 10,000 sessions: the connection limits are off (README, Limits), where the
# build has them. So is the rate limit: an unpaced session sends run starts,
# answers and acks faster than 20 frames a second, and an answer refused
# leaves its run waiting.
limits=() pace=0
help=$("$baton" --help 2>&1 || true)
grep -q -- '-max-sessions' <<<"$help" && limits=(--max-conns-per-ip 0 --max-sessions 0)
grep -q -- '-rate-limit' <<<"$help" && limits+=(--rate-limit 0)
# Every load client connects from 127.0.0.1: the per-address session cap
# (200 by default) would leave 800 of 1,000 sessions provisional.
grep -q -- '-max-sessions-per-ip' <<<"$help" && limits+=(--max-sessions-per-ip 0)
grep -q -- '-pace' <<<"$("$loadbin" -h 2>&1 || true)" && pace=1

# Pinning: the server on the first CPU this script may use, the load tool on
# the others. A Go server pinned to one CPU runs with GOMAXPROCS=1.
read -r -a cpus < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')
on_server=() on_load=()
if ! command -v taskset >/dev/null; then
  pinning="not pinned: taskset is missing; server and load tool share the ${#cpus[@]} CPUs"
elif [ ${#cpus[@]} -lt 2 ]; then
  pinning="not pinned: one CPU, which server and load tool share"
elif ! taskset -c "${cpus[0]}" true 2>/dev/null; then
  pinning="not pinned: taskset cannot set affinity here; server and load tool share the ${#cpus[@]} CPUs"
else
  lcpus=$(IFS=,; echo "${cpus[*]:1}")
  on_server=(taskset -c "${cpus[0]}") on_load=(taskset -c "$lcpus")
  pinning="server on CPU ${cpus[0]}, load tool on CPU $lcpus (taskset)"
fi
echo "== $pinning" >&2
meta pinning "$pinning" pace "$pace" reps "$reps" loadavg "$(cut -d' ' -f1-3 /proc/loadavg)"

# Socket.IO, when node and npm are there.
sio=0
if command -v node >/dev/null && command -v npm >/dev/null; then
  if [ -d bench/socketio/node_modules/socket.io ] ||
    (cd bench/socketio && timeout 300 npm ci --no-audit --no-fund --loglevel=error >&2); then
    sio=1
    meta socketio "socket.io $(node -p 'require("./bench/socketio/node_modules/socket.io/package.json").version'), node $(node --version)"
  else
    meta socketio_skipped "npm ci in bench/socketio failed"
  fi
else
  meta socketio_skipped "node or npm is missing"
fi

waithealth() { # port: true once /healthz answers, within 15 s
  for _ in $(seq 150); do curl -fs "http://127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done
  echo "bench/run.sh: nothing healthy on 127.0.0.1:$1 after 15 s" >&2
  return 1
}
stop() { # pid...: SIGTERM, then SIGKILL after 10 s
  kill "$@" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  kill -9 "$@" 2>/dev/null || true
  wait "$@" 2>/dev/null || true
}
# start_baton ARGS...: a Baton on the server CPU; sets spid.
start_baton() {
  "${on_server[@]}" "$baton" "${limits[@]}" --addr 127.0.0.1:$port --retry-base 5ms --log-format json "$@" \
    2>>"$bin/baton.log" >/dev/null &
  spid=$!
  waithealth $port
}
start_server() { # baton|naive|preencoded|socketio; sets spid
  case $1 in
    baton) start_baton --sim-delay 0; return ;;
    naive | preencoded) "${on_server[@]}" "$bin/bare" -addr 127.0.0.1:$port -mode "$1" 2>>"$bin/bare.log" & ;;
    socketio) "${on_server[@]}" node bench/socketio/server.js $port 2>>"$bin/socketio.log" & ;;
  esac
  spid=$!
  waithealth $port
}
# measure TAG... -- LOAD...: one load against $spid, its report appended to
# the results and returned on stdout.
measure() {
  local tags=()
  while [ "$1" != -- ]; do tags+=(--tag "$1"); shift; done
  shift
  python3 bench/measure.py --pid $spid --timeout 300 "${measure_also[@]}" "${tags[@]}" -- "${on_load[@]}" "$@" | tee -a "$results"
}
measure_also=() # --also NAME=PID: other processes whose CPU per event is measured too
say() { # the progress line of a report
  python3 -c 'import json,sys; r=json.load(sys.stdin); print("  %s: %d events, %.0f/s, server %.2f µs/event, %.2f writes/event, p99 %.2f ms, %d violations" % (sys.argv[1], r["events"], r["events_per_sec"], r["server_cpu_us_per_event"], r["server_syscw_per_event"], r["latency_p99_ms"], r["violation_count"]))' "$1" >&2
}

# BENCH_SECTIONS=redis measures only the Redis store's section (a quick
# before/after of the store; the report then has only that section).
only_redis=0; [ "${BENCH_SECTIONS:-all}" = redis ] && only_redis=1
only_storm=0; [ "${BENCH_SECTIONS:-all}" = storm ] && only_storm=1
only_cluster=0; [ "${BENCH_SECTIONS:-all}" = cluster ] && only_cluster=1
storm=${BENCH_STORM:-10000}
# storm SCENARIO PID ARGS...: a resume storm of $storm sessions (baton-load
# -storm), its report appended to the results; the tool reads PID's CPU and
# peak RSS from /proc itself, from the drop until every session resumed.
run_storm() {
  local scenario=$1 pid=$2; shift 2
  "${on_load[@]}" timeout 600 "$loadbin" -storm "$storm" -storm-timeout 120s -quiet -json -server-pid "$pid" "$@" >"$bin/storm.json" || true
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(section="storm", scenario=sys.argv[2]); print(json.dumps(r))' \
    "$bin/storm.json" "$scenario" >>"$results" || { echo "  $scenario: the storm gave no report" >&2; return 0; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("  %s: %d of %d resumed in %.2f s (p50 %.0f ms, p99 %.0f ms), server CPU %.2f s, peak RSS %.0f MB, %d resyncs, %d rejections, %d violations" % (sys.argv[2], r["resumed"], r["sessions"], r["seconds_to_all_resumed"], r["resume_p50_ms"], r["resume_p99_ms"], r.get("server_cpu_seconds", 0), r.get("server_peak_rss_mb", 0), r["resyncs"], r["rejections"], r["violation_count"]))' \
    "$bin/storm.json" "$scenario" >&2
}
if [ $only_redis = 0 ] && [ $only_storm = 0 ] && [ $only_cluster = 0 ]; then
echo "== Baton, bare and Socket.IO, $reps repetitions" >&2
servers=(baton naive preencoded)
[ $sio = 1 ] && servers+=(socketio)
loads=(u100 u1000 p1000)
for rep in $(seq "$reps"); do
  for l in "${loads[@]}"; do
    for s in "${servers[@]}"; do
      if [ $l = p1000 ] && [ $s != socketio ] && [ $pace = 0 ]; then
        [ $rep = 1 ] && meta skipped "$s/$l" why "baton-load has no -pace"
        continue
      fi
      case $l in
        u100) n=100 runs=20 rate= ;;
        u1000) n=1000 runs=2 rate= ;;
        p1000) n=1000 runs=2 rate=20000 ;;
      esac
      if [ $s = socketio ]; then
        cmd=(node bench/socketio/load.js --url "http://127.0.0.1:$port" --sessions $n --runs $runs --ramp 1000 --ack-every 50 ${rate:+--pace $rate})
      else
        cmd=("$loadbin" -url "ws://127.0.0.1:$port/ws" -quiet -json -sessions $n -runs $runs -mix tasks=1 -ramp 1s -ack-every 50 ${rate:+-pace $rate})
      fi
      start_server $s
      measure section=compare server=$s load=$l rep=$rep -- "${cmd[@]}" | say "$s $l #$rep"
      stop $spid
    done
  done
done

echo "== agent loops" >&2
start_baton --sim-delay 0 --debug-addr 127.0.0.1:$debug
for n in 1 100 1000; do
  runs=$(( n == 1 ? 100 : (n == 100 ? 5 : 1) ))
  measure section=agent -- "$loadbin" -url "ws://127.0.0.1:$port/ws" -quiet -json -sessions $n -runs $runs -mix agent=1 -ramp 1s -ack-every 50 | say "$n sessions"
done

echo "== 10,000 idle sessions" >&2
heap() { # live heap after a forced GC, in bytes
  curl -fs "http://127.0.0.1:$debug/debug/pprof/heap?gc=1" >/dev/null
  curl -fs "http://127.0.0.1:$debug/debug/vars" | python3 -c "import json,sys; print(json.load(sys.stdin)['memstats']['HeapAlloc'])"
}
rss() { awk '/VmRSS/ {print $2*1024}' /proc/$spid/status; }
h0=$(heap) r0=$(rss)
"${on_load[@]}" "$loadbin" -url "ws://127.0.0.1:$port/ws" -idle 10000 -hold 60s >"$bin/idle.out" &
idlepid=$!
for _ in $(seq 600); do grep -q connected "$bin/idle.out" 2>/dev/null && break; sleep 0.2; done
sleep 1 # let the last handshakes' garbage become collectable
h1=$(heap) r1=$(rss)
conns=$(curl -fs "http://127.0.0.1:$port/healthz" | python3 -c "import json,sys; print(json.load(sys.stdin)['connections'])")
stop $idlepid
meta idle_connections "$conns" idle_heap "$(( (h1 - h0) / 10000 ))" idle_rss "$(( (r1 - r0) / 10000 ))"
echo "  $conns connections: heap $(( (h1 - h0) / 10000 )) B/session" >&2
stop $spid

echo "== resume under drops" >&2
for ring in 1000 16; do # the default ring, then one too small for what a session misses while down
  start_baton --sim-delay 20ms --buffer-size $ring
  measure section=drops ring=$ring -- "$loadbin" -url "ws://127.0.0.1:$port/ws" -quiet -json -sessions 200 -runs 5 -drop-rate 120 -ack-every 20 | say "ring $ring"
  stop $spid
done

fi # only_redis

echo "== a resume storm of $storm sessions on one node" >&2
if [ $only_redis = 0 ] && [ $only_cluster = 0 ] && grep -q -- '-storm' <<<"$("$loadbin" -h 2>&1 || true)"; then
  start_baton --sim-delay 0
  run_storm "same node" $spid -url "ws://127.0.0.1:$port/ws"
  stop $spid
fi

echo "== the Redis store" >&2
if [ $only_cluster = 1 ]; then
  echo "  (BENCH_SECTIONS=cluster)" >&2
elif command -v redis-server >/dev/null; then
  mkdir -p "$bin/redis"
  # redis-server runs beside the load tool, off the server's CPU.
  "${on_load[@]}" redis-server --port $rport --bind 127.0.0.1 --save "" --appendonly no --dir "$bin/redis" >"$bin/redis.log" 2>&1 &
  rpid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$rport) 2>/dev/null && break; sleep 0.1; done
  redis="redis://127.0.0.1:$rport/0"
  flushredis() { # empties redis-server: every load starts from the same store
    (exec 3<>/dev/tcp/127.0.0.1/$rport && printf 'FLUSHALL\r\n' >&3 && read -r -t 10 _ <&3)
  }
  # The comparison's loads with each store, interleaved as there: every
  # load's first repetition with memory then Redis, then the second ones.
  [ $only_storm = 1 ] && reps=0
  for rep in $(seq "$reps"); do
    for l in u100 u1000 p1000; do
      [ $l = p1000 ] && [ $pace = 0 ] && continue
      case $l in
        u100) n=100 runs=20 rate= ;;
        u1000) n=1000 runs=2 rate= ;;
        p1000) n=1000 runs=2 rate=20000 ;;
      esac
      for store in memory redis; do
        extra=(); [ $store = redis ] && extra=(--store redis --redis-url "$redis")
        flushredis
        start_baton --sim-delay 0 "${extra[@]}"
        measure_also=(--also "redis=$rpid") # redis-server's own CPU per event (idle with the memory store)
        measure section=redis store=$store load=$l rep=$rep -- "$loadbin" -url "ws://127.0.0.1:$port/ws" -quiet -json \
          -sessions $n -runs $runs -mix tasks=1 -ramp 1s -ack-every 50 ${rate:+-pace $rate} | say "$store $l #$rep"
        measure_also=()
        stop $spid
      done
    done
  done
  flushredis
  # Two nodes on one Redis, every drop resumed on the other node; sets
  # apid and bpid.
  start_pair() {
    start_baton --sim-delay 20ms --store redis --redis-url "$redis"
    apid=$spid
    "${on_server[@]}" "$baton" "${limits[@]}" --addr 127.0.0.1:$port2 --sim-delay 20ms --retry-base 5ms --store redis --redis-url "$redis" \
      --log-format json 2>>"$bin/baton.log" >/dev/null &
    bpid=$!
    waithealth $port2
  }
  start_pair
  if grep -q -- '-storm' <<<"$("$loadbin" -h 2>&1 || true)"; then
    echo "== a resume storm of $storm sessions after a kill -9 of their node (takeover)" >&2
    run_storm "takeover" $bpid -url "ws://127.0.0.1:$port/ws" -url "ws://127.0.0.1:$port2/ws" -resume-elsewhere -storm-kill $apid
    wait $apid 2>/dev/null || true
    stop $bpid
    flushredis
    if [ $only_storm = 0 ]; then # fresh nodes for the two-node load
      start_pair
    fi
  fi
  [ $only_storm = 1 ] && { stop $rpid; apid=; }
  [ -n "$apid" ] && measure section=twonode -- "$loadbin" -url "ws://127.0.0.1:$port/ws" -url "ws://127.0.0.1:$port2/ws" -resume-elsewhere -quiet -json \
    -sessions 200 -runs 5 -drop-rate 120 -ack-every 20 | say "two nodes (server: the first)"
  [ -n "$apid" ] && stop $apid $bpid
  [ $only_storm = 0 ] && go test -run '^$' -bench 'OpenRing1000|Writer' -benchmem -count 1 ./redisstore/ | grep -E '^Benchmark' >"$bin/redisbench.txt" || true
  [ -n "$apid" ] && stop $rpid
else
  echo "  redis-server is missing: not measured" >&2
  meta redis_skipped "redis-server is missing"
fi

echo "== a Redis Cluster: one master against three" >&2
if [ $only_redis = 1 ] || [ $only_storm = 1 ]; then
  :
elif ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "  redis-server or redis-cli is missing: not measured" >&2
  meta cluster_skipped "redis-server or redis-cli is missing"
else
  cport=${BENCH_CLUSTER_PORT:-18490}
  cports=($cport $((cport + 1)) $((cport + 2)))
  for p in "${cports[@]}"; do
    if (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then
      echo "bench/run.sh: 127.0.0.1:$p is in use; set BENCH_CLUSTER_PORT" >&2
      exit 1
    fi
  done
  # Redis runs beside the load tool, off Baton's CPU, as in the Redis
  # store's section: one plain redis-server, then a cluster of three
  # masters without replicas (replication is another cost, the same on
  # both sides; the nodes run with --redis-replicas 0).
  cpids=() caddrs=()
  for p in "${cports[@]}"; do
    mkdir -p "$bin/cluster/$p"
    "${on_load[@]}" redis-server --port $p --bind 127.0.0.1 --save "" --appendonly no --dir "$bin/cluster/$p" \
      --cluster-enabled yes --cluster-config-file nodes.conf >"$bin/cluster/$p.log" 2>&1 &
    cpids+=($!) caddrs+=(127.0.0.1:$p)
  done
  mkdir -p "$bin/single"
  "${on_load[@]}" redis-server --port $rport --bind 127.0.0.1 --save "" --appendonly no --dir "$bin/single" >"$bin/single.log" 2>&1 &
  rpid=$!
  for p in "${cports[@]}" $rport; do
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
  done
  timeout 60 redis-cli --cluster create "${caddrs[@]}" --cluster-replicas 0 --cluster-yes >"$bin/cluster/create.log" 2>&1
  for _ in $(seq 300); do
    ok=0
    for p in "${cports[@]}"; do redis-cli -p $p cluster info 2>/dev/null | grep -q 'cluster_state:ok' && ok=$((ok + 1)); done
    [ $ok = 3 ] && break
    sleep 0.1
  done
  [ $ok = 3 ] || { echo "bench/run.sh: the Redis Cluster is not ok after 30 s" >&2; exit 1; }
  curl_="redis://127.0.0.1:$cport?addr=127.0.0.1:${cports[1]}&addr=127.0.0.1:${cports[2]}"
  meta cluster_masters 3 cluster_redis "$(redis-server --version | cut -d' ' -f3)"
  flushall() { for p in "$@"; do redis-cli -p "$p" FLUSHALL >/dev/null; done; }
  for rep in $(seq "$reps"); do
    for l in u100 u1000; do
      case $l in
        u100) n=100 runs=20 ;;
        u1000) n=1000 runs=2 ;;
      esac
      for redis in single cluster; do
        if [ $redis = single ]; then
          flushall $rport
          url="redis://127.0.0.1:$rport/0" also=(--also "redis=$rpid")
        else
          flushall "${cports[@]}"
          url=$curl_ also=()
          for i in 0 1 2; do also+=(--also "master$((i + 1))=${cpids[$i]}"); done
        fi
        start_baton --sim-delay 0 --store redis --redis-url "$url" --redis-replicas 0
        python3 bench/measure.py --pid $spid "${also[@]}" --timeout 300 --tag section=cluster --tag redis=$redis --tag load=$l --tag rep=$rep -- \
          "${on_load[@]}" "$loadbin" -url "ws://127.0.0.1:$port/ws" -quiet -json -sessions $n -runs $runs -mix tasks=1 -ramp 1s -ack-every 50 |
          tee -a "$results" |
          python3 -c 'import json,sys; r=json.load(sys.stdin); a=r.get("also_cpu_us_per_event", {}); print("  %s: %d events, %.0f/s, Baton %.2f µs/event, Redis %s µs/event, %d violations" % (sys.argv[1], r["events"], r["events_per_sec"], r["server_cpu_us_per_event"], " ".join("%s %.2f" % kv for kv in sorted(a.items())), r["violation_count"]))' "$redis $l #$rep" >&2
        stop $spid
      done
    done
  done
  stop "${cpids[@]}" $rpid
fi

if [ $only_redis = 0 ] && [ $only_storm = 0 ] && [ $only_cluster = 0 ]; then
echo "== the JavaScript client and go benchmarks" >&2
node web/testdata/bench.mjs >"$bin/jsbench.txt" 2>&1 || echo "node is missing: not measured" >"$bin/jsbench.txt"
go test -run '^$' -bench 'ResumeFullRing|Emit|Append|Since1000|Ack$|AppendFrame|Scheduler50|AgentRound|Event$|EventParallel' \
  -benchmem -count 1 ./orchestrator/ ./buffer/ ./wsproto/ ./solver/ ./metrics/ | grep -E '^Benchmark' >"$bin/gobench.txt" || true
fi

if [ $only_storm = 1 ]; then # the report needs every section: only the storms' results
  grep '"section": "storm"' "$results" || true
  [ -n "${BENCH_KEEP:-}" ] && cp "$results" "$BENCH_KEEP"
  exit 0
fi
meta date "$(date -u +%Y-%m-%d)" nproc "$(nproc)" cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  mem "$(free -g | awk '/Mem:/ {print $2}') GiB" go "$(go version | cut -d' ' -f3)" kernel "$(uname -r)" \
  minutes "$(( ($(date +%s) - began + 30) / 60 ))"
if ! python3 bench/report.py "$bin" >"$bin/report.md"; then
  kept=$(mktemp /tmp/bench-results.XXXXXX)
  cp "$results" "$kept"
  echo "bench/run.sh: the report failed; $report is unchanged, the results are in $kept" >&2
  exit 1
fi
mv "$bin/report.md" "$report"
[ -n "${BENCH_KEEP:-}" ] && cp "$results" "$BENCH_KEEP"
echo "wrote $report in $(( $(date +%s) - began )) s" >&2
