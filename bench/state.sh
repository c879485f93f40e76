#!/bin/bash
# Rollout-state benchmark (not a test): checkpoint and resume latency
# against the size of the writable layer, fork of 1 to 16, claim latency
# from a warm pool, and an exec's round trip through `dsec-run serve`
# against one dsec-run process per exec.  Prints one table with p50/p99.
#
#   sudo bench/state.sh          (BENCH_N=10 repetitions by default)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench/state.sh: needs root" >&2; exit 1; }
N=${BENCH_N:-10}
BIN=$(pwd)
export PATH="$BIN:$PATH"
work=$(mktemp -d /tmp/dsec-bench-state.XXXXXX)
export DSEC_ROOT="$work/root" DSEC_RUN="$work/run" DSEC_STORE="$work/root/store"
pool_pid=
cleanup() {
  [ -z "$pool_pid" ] || { kill -TERM "$pool_pid" 2>/dev/null; wait "$pool_pid" 2>/dev/null || true; }
  local ids
  ids=$(dsec-run ps --all 2>/dev/null | jq -r .id || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || dsec-run rm --force $ids >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

examples/mkrootfs-busybox.sh "$work/bb.tar.gz"
dsec-pull --name busybox:bench "tar:$work/bb.tar.gz" >/dev/null
dsec-layer materialise busybox:bench >/dev/null

. bench/lib.sh

# checkpoint and resume (--release, then resume) against the layer's size
for mb in 0 16 64; do
  cps=() ress=()
  for i in $(seq "$N"); do
    id=$(dsec-run create --image busybox:bench | jq -r .id)
    [ "$mb" -eq 0 ] || dsec-run exec "$id" -- dd if=/dev/urandom of=/work/blob bs=1M count="$mb" >/dev/null 2>&1
    t=$(date +%s%N); dsec-run checkpoint "$id" >/dev/null; cps+=("$(us "$t")")
    dsec-run suspend --release "$id" >/dev/null
    t=$(date +%s%N); dsec-run resume "$id" >/dev/null; ress+=("$(us "$t")")
    dsec-run rm "$id" >/dev/null
  done
  stat "checkpoint, ${mb} MiB written" "${cps[@]}"
  stat "resume --release'd, ${mb} MiB" "${ress[@]}"
done

# fork of 1 to 16
for n in 1 4 16; do
  ts=()
  for i in $(seq "$(( N < 5 ? N : 5 ))"); do
    id=$(dsec-run create --image busybox:bench | jq -r .id)
    t=$(date +%s%N); dsec-run fork --count "$n" "$id" >"$work/fork.out"; ts+=("$(us "$t")")
    # shellcheck disable=SC2046
    dsec-run rm "$id" $(jq -r .id "$work/fork.out") >/dev/null
  done
  stat "fork --count $n" "${ts[@]}"
done

# claim from a warm pool: a process per create, and through serve
dsec-run pool --image busybox:bench --memory 64 --size 4 >/dev/null 2>&1 &
pool_pid=$!
ready() { ls "$DSEC_ROOT"/pools/*/ready 2>/dev/null | grep -c '^sb-' || true; }
claims=() plain=()
for i in $(seq "$N"); do
  for w in $(seq 100); do [ "$(ready)" -ge 1 ] && break; sleep 0.1; done
  t=$(date +%s%N); id=$(dsec-run create --image busybox:bench --memory 64 | jq -r .id); claims+=("$(us "$t")")
  dsec-run rm "$id" >/dev/null
  t=$(date +%s%N); id=$(dsec-run create --image busybox:bench --memory 32 | jq -r .id); plain+=("$(us "$t")")
  dsec-run rm "$id" >/dev/null
done
stat "create, claimed from a pool" "${claims[@]}"
stat "create, not pooled" "${plain[@]}"
kill -TERM "$pool_pid"; wait "$pool_pid" 2>/dev/null || true; pool_pid=

# exec round trip: serve vs one process per exec (the same sandbox)
id=$(dsec-run create --image busybox:bench | jq -r .id)
onep=()
for i in $(seq $((N * 10))); do
  t=$(date +%s%N); dsec-run exec "$id" -- true >/dev/null; onep+=("$(us "$t")")
done
stat "exec true, a dsec-run per exec" "${onep[@]}"
n=$((N * 100))
python3 - "$id" "$n" >"$work/serve.us" <<'PY'
import json, subprocess, sys, time
sid, n = sys.argv[1], int(sys.argv[2])
p = subprocess.Popen(["dsec-run", "serve"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True, bufsize=1)
for i in range(n):
    t = time.monotonic()
    p.stdin.write(json.dumps({"op": "exec", "rid": i, "id": sid, "cmd": ["true"]}) + "\n")
    p.stdin.flush()
    p.stdout.readline()
    print(int((time.monotonic() - t) * 1e6))
p.stdin.close(); p.wait()
PY
mapfile -t serve <"$work/serve.us"
stat "exec true, through serve" "${serve[@]}"

echo
echo "dsec rollout state: N=$N, $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
printf '%-40s %10s %10s\n' case "p50 ms" "p99 ms"
printf '%s\n' "${rows[@]}"
