#!/usr/bin/env bash
# Profiles the tide server (SQLite) while the benchmark dispatches no-op
# jobs: perf samples the server process, then the report lists the tide and
# store functions by cumulative share of its CPU time.
# Usage: bench/profile.sh [JOBS per run, default 1500] [SECONDS sampled, default 10]
# Needs perf (Debian: linux-perf).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-1500}
secs=${2:-10}
command -v perf >/dev/null || { echo "bench/profile.sh: needs perf (Debian package linux-perf)" >&2; exit 1; }
out=$(mktemp -d)
TIDE_BENCH_JOBS=$jobs go test -count=1 -v -run '^TestBench$' ./bench >"$out/bench.out" 2>&1 &
bench=$!
# The first server the benchmark's test binary starts is the SQLite one, and
# it dispatches first.
pid=
for _ in $(seq 1200); do
  tb=$(pgrep -f -P "$bench" 'bench\.test' | head -1 || true)
  [ -n "$tb" ] && pid=$(pgrep -f -P "$tb" 'tide server' | head -1 || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "bench/profile.sh: the benchmark started no tide server; see $out/bench.out" >&2; exit 1; }
sleep 3 # past start-up and the warm nodes' boot, into the dispatch run
perf record -F 499 -g -p "$pid" -o "$out/perf.data" -- sleep "$secs" 2>/dev/null
perf report -i "$out/perf.data" --children --sort symbol --stdio -g none 2>/dev/null |
  grep -E '^ +[0-9.]+%' | grep -E 'tideml|modernc.org/sqlite\.\(|encoding/json\.(Unmarshal|Marshal)|gcBgMarkWorker$' | head -40 || true
wait "$bench" || true
echo "perf data and the benchmark's output: $out"
