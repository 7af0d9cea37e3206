#!/usr/bin/env bash
# profile.sh: CPU per proxied request and a flame graph of the router under wrk.
#
# Starts N sglang-mock workers (--speedup 0, KV events on), one router in front of them, drives
# it with wrk (random 32-token /generate, benches/wrk/random32.lua), reads the router's CPU
# ticks and context switches (all its threads) around the measured run and, with PERF=1,
# records `perf record -g --call-graph dwarf` of the router during a second run and folds it
# into an SVG with inferno (`cargo install inferno`).
#
# usage: BIN=target/release MODE=kv OUT=/tmp/prof crates/kvrouter/benches/wrk/profile.sh
#   MODE     router --mode (kv, least-load, round-robin, ...)          default kv
#   WORKERS  number of worker URLs the router is given                     default 4
#   MOCKS    mock processes behind them (default WORKERS); when fewer, each mock listens on
#            0.0.0.0 and URL i is 127.0.0.(1 + i / MOCKS) on mock i % MOCKS, so 1,000 workers
#            need no 1,000 processes (every alias of a mock also gets its KV events)
#   EVENTS=0 mocks publish no KV events (KV mode then routes on its predicted layer alone);
#            use it with MOCKS < WORKERS, where each alias would get every event of its mock
#   PROMPT_LEN  random prompt tokens per request (random32.lua reads it)   default 32
#   CONNS    wrk connections / THREADS wrk threads / SECS per run         32 / 2 / 8
#   PERF=1   also record and render $OUT/flame-$MODE.svg
#   STAT=1   also count the router's syscalls, futex calls and epoll waits per request
#            (perf stat on tracepoints, during the measured run)
#   EXTRA    extra router flags
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-target/release}; MODE=${MODE:-kv}; OUT=${OUT:-/tmp/kvrouter-profile}
WORKERS=${WORKERS:-4}; CONNS=${CONNS:-32}; THREADS=${THREADS:-2}; SECS=${SECS:-8}
mkdir -p "$OUT"; T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
wait_line() { local n=0; until grep -q "listening on" "$1" 2>/dev/null; do sleep 0.05; n=$((n + 1)); [ $n -lt 600 ] || { echo "no listening line in $1" >&2; cat "${1%.out}.err" >&2; exit 1; }; done; sed -n 's/.*listening on //p' "$1" | head -1; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# context switches (voluntary + involuntary) of all the router's threads
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s }'; }

MOCKS=${MOCKS:-$WORKERS}; HOST=127.0.0.1; [ "$MOCKS" -lt "$WORKERS" ] && HOST=0.0.0.0
export PROMPT_LEN=${PROMPT_LEN:-32}
events=(--kv-events-config '{"publisher":"zmq","endpoint":"tcp://*:0","topic":"kv-events"}')
[ "${EVENTS:-1}" = 0 ] && events=()
urls=(); ports=()
for i in $(seq 1 "$MOCKS"); do
  "$BIN/sglang-mock" --host "$HOST" --port 0 --worker-threads 1 --page-size 16 --speedup 0 \
    --max-total-tokens 1048576 --seed "$i" \
    "${events[@]}" \
    >"$T/m$i.out" 2>"$T/m$i.err" &
  pids+=($!)
done
for i in $(seq 1 "$MOCKS"); do ports+=("$(wait_line "$T/m$i.out" | sed 's/.*://')"); done
for i in $(seq 0 $((WORKERS - 1))); do urls+=("http://127.0.0.$((1 + i / MOCKS)):${ports[$((i % MOCKS))]}"); done
# shellcheck disable=SC2086
"$BIN/router" --mode "$MODE" --page-size 16 --host 127.0.0.1 --port 0 --log-level warn \
  ${EXTRA:-} --worker-urls "${urls[@]}" >"$T/r.out" 2>"$T/r.err" &
RP=$!; pids+=($RP)
R=$(wait_line "$T/r.out")
healthy() { curl -sf "$R/readiness" | sed -n 's/.*"healthy_workers": *\([0-9]*\).*/\1/p'; }
until [ "$(healthy)" = "$WORKERS" ]; do sleep 0.2; done

run() { wrk -t"$THREADS" -c"$CONNS" -d"$1" --latency -s "$HERE/random32.lua" "$R"; }
run 2s >/dev/null   # warm-up: pooled upstream connections, allocator
EVENTS_STAT=raw_syscalls:sys_enter,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait
if [ "${STAT:-0}" = 1 ]; then
  perf stat -x, -e "$EVENTS_STAT" -p "$RP" -o "$T/stat" & SP=$!
fi
t0=$(ticks $RP); s0=$(switches $RP)
res=$(run "${SECS}s")
t1=$(ticks $RP); s1=$(switches $RP)
n=$(echo "$res" | sed -n 's/^ *\([0-9]*\) requests in.*/\1/p')
rps=$(echo "$res" | sed -n 's/^Requests\/sec: *//p')
hz=$(getconf CLK_TCK)
us=$(awk -v t=$((t1 - t0)) -v n="$n" -v hz="$hz" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
cs=$(awk -v s=$((s1 - s0)) -v n="$n" 'BEGIN { printf "%.2f", s / n }')
sc=""
if [ "${STAT:-0}" = 1 ]; then
  kill -INT "$SP"; wait "$SP" || true
  # syscalls, futex calls and epoll waits per request
  sc=$(awk -F, -v n="$n" '/sys_enter/ { split($3, e, ":"); name = e[2]; sub(/^sys_enter_?/, "", name);
       printf " %s_per_req=%.2f", (name == "" ? "syscalls" : name), $1 / n }' "$T/stat")
fi
echo "mode=$MODE workers=$WORKERS mocks=$MOCKS events=${EVENTS:-1} prompt=$PROMPT_LEN conns=$CONNS requests=$n req/s=$rps router_cpu_us_per_req=$us switches_per_req=$cs$sc load=$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"

if [ "${PERF:-0}" = 1 ]; then
  perf record -F 499 -g --call-graph dwarf,16384 -o "$OUT/perf-$MODE.data" -p "$RP" -- sleep 5 \
    2>"$OUT/perf-$MODE.log" &
  PP=$!
  run 5s >/dev/null
  wait $PP
  perf script -i "$OUT/perf-$MODE.data" 2>/dev/null | inferno-collapse-perf >"$OUT/folded-$MODE.txt"
  inferno-flamegraph --title "router --mode $MODE under wrk -c$CONNS" <"$OUT/folded-$MODE.txt" \
    >"$OUT/flame-$MODE.svg"
  echo "flame graph: $OUT/flame-$MODE.svg"
fi
