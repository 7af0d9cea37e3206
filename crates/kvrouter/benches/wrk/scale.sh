#!/usr/bin/env bash
# scale.sh: router CPU per request as the fleet grows (8, 64, 512, 1,000 worker URLs on 8 mock
# processes, see MOCKS in profile.sh; no KV events, see EVENTS) and as prompts grow (1k, 8k, 32k, 128k tokens, 8 workers),
# for least-load and KV mode. Appends one line per point to $OUT/summary.txt.
# usage: BIN=target/release OUT=/tmp/scale crates/kvrouter/benches/wrk/scale.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export BIN=${BIN:-target/release} OUT=${OUT:-/tmp/kvrouter-scale} SECS=${SECS:-6}
for mode in least-load kv; do
  for n in 8 64 512 1000; do
    MODE=$mode WORKERS=$n MOCKS=8 EVENTS=0 PROMPT_LEN=32 "$HERE/profile.sh"
  done
  for len in 1024 8192 32768 131072; do
    MODE=$mode WORKERS=8 MOCKS=8 PROMPT_LEN=$len CONNS=8 THREADS=2 "$HERE/profile.sh"
  done
done
