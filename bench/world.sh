#!/bin/bash
# Task-world benchmark (not a test): creating a world (an agent and one
# Redis database, ready when Redis takes connections) against creating the
# same two containers one by one and starting Redis by hand (exec
# redis-server --daemonize, then exec redis-cli ping until PONG); and fork
# of the world against fork of a lone sandbox holding the same data
# (Redis with BENCH_KEYS keys, appendonly).  Prints one table with p50/p99
# and the ratios, all from one run.
#
#   sudo bench/world.sh          (BENCH_N=20 repetitions by default)
#
# The image is tests/helpers/mkworld-image.sh's (busybox + Redis from
# Debian's archive), cached in BENCH_CACHE (default ~/.cache/dsec-tests).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench/world.sh: needs root" >&2; exit 1; }
N=${BENCH_N:-20}
KEYS=${BENCH_KEYS:-1000}
BIN=$(pwd)
export PATH="$BIN:$PATH"
cache=${BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsec-tests}
work=$(mktemp -d /tmp/dsec-bench-world.XXXXXX)
chmod 711 "$work"
export DSEC_ROOT="$work/root" DSEC_RUN="$work/run" DSEC_STORE="$work/root/store"
cleanup() {
  local ids
  ids=$(dsec-run ps --all 2>/dev/null | jq -r '.id, (.services // [] | .[].id)' || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || dsec-run rm --force $ids >/dev/null 2>&1 || true
  dsec-reap >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

tar=$(tests/helpers/mkworld-image.sh "$(pwd)" "$cache")
dsec-pull --name world:bench "tar:$tar" >/dev/null
dsec-layer materialise world:bench >/dev/null

. bench/lib.sh

redis=(redis-server --bind 0.0.0.0 --protected-mode no --dir /data
  --appendonly yes --appendfsync always --save "")
spec=$(jq -nc --argjson cmd "$(printf '%s\n' "${redis[@]}" | jq -R . | jq -sc .)" \
  '{image: "world:bench", services: [{name: "db", image: "world:bench",
    cmd: $cmd, ready: {tcp: 6379, timeout_s: 60}}]}')

# fill ID [--service db]: BENCH_KEYS keys into the database
fill() {
  local id=$1; shift
  dsec-run exec "$@" "$id" -- sh -c \
    "i=0; while [ \$i -lt $KEYS ]; do echo \"SET k\$i v\$i\"; i=\$((i+1)); done | redis-cli >/dev/null" >/dev/null
}

# one by one: the agent, the database's container, Redis started by hand
by_hand() {
  local a d
  a=$(dsec-run create --image world:bench | jq -r .id)
  d=$(dsec-run create --image world:bench | jq -r .id)
  dsec-run exec "$d" -- "${redis[@]}" --daemonize yes >/dev/null
  until dsec-run exec "$d" -- redis-cli ping | jq -e '.stdout == "PONG\n"' >/dev/null; do
    sleep 0.01
  done
  echo "$a $d"
}

wc_=() hc_=()
for ((i = 0; i < N; i++)); do
  # turn by turn, so that the machine's load weighs on both alike
  t=$(date +%s%N)
  w=$(dsec-run create --spec <(echo "$spec") | jq -r .id)
  wc_+=("$(us "$t")")
  dsec-run rm "$w" >/dev/null
  t=$(date +%s%N)
  ids=$(by_hand)
  hc_+=("$(us "$t")")
  # shellcheck disable=SC2086
  dsec-run rm $ids >/dev/null
done
stat "world create (agent + redis, ready)" "${wc_[@]}"; w50=$P50 w99=$P99
stat "same, one by one (+ redis by hand)" "${hc_[@]}"; h50=$P50 h99=$P99
ratio_row "world / one by one" "$w50" "$w99" "$h50" "$h99"

# fork: a world with the data against a lone sandbox with the same data
w=$(dsec-run create --spec <(echo "$spec") | jq -r .id)
fill "$w" --service db
lone=$(dsec-run create --image world:bench | jq -r .id)
dsec-run exec "$lone" -- "${redis[@]}" --daemonize yes >/dev/null
until dsec-run exec "$lone" -- redis-cli ping | jq -e '.stdout == "PONG\n"' >/dev/null; do
  sleep 0.01
done
fill "$lone"
wf=() lf=()
for ((i = 0; i < N; i++)); do
  t=$(date +%s%N)
  c=$(dsec-run fork "$w" | jq -r .id)
  wf+=("$(us "$t")")
  dsec-run rm "$c" >/dev/null
  t=$(date +%s%N)
  c=$(dsec-run fork "$lone" | jq -r .id)
  lf+=("$(us "$t")")
  dsec-run rm "$c" >/dev/null
done
# the children had the data: one more of each, checked
c=$(dsec-run fork "$w" | jq -r .id)
n=$(dsec-run exec --service db "$c" -- redis-cli dbsize | jq -r .stdout)
[ "$n" -eq "$KEYS" ] || { echo "bench/world.sh: the world's fork has $n keys, not $KEYS" >&2; exit 1; }
dsec-run rm "$c" >/dev/null
stat "fork of the world (ready again)" "${wf[@]}"; f50=$P50 f99=$P99
stat "fork of a lone sandbox, same data" "${lf[@]}"; l50=$P50 l99=$P99
ratio_row "world fork / lone fork" "$f50" "$f99" "$l50" "$l99"

printf '%-40s %10s %10s\n' "bench/world.sh (N=$N, $KEYS keys)" "p50 ms" "p99 ms"
printf '%s\n' "${rows[@]}"
