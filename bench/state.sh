#!/bin/bash
# Rollout-state benchmark (not a test): checkpoint and resume latency
# against the size of the writable layer, fork of 1 to 16, claim latency
# from a warm pool, and an exec's round trip through `dsec-run serve`
# against one dsec-run process per exec.  Prints one table with p50/p99.
#
#   sudo bench/state.sh          (BENCH_N=10 repetitions by default)
#
# With BENCH_OLD=DIR (a build tree of another commit), checkpoint and fork
# of a small and of a 100 MiB writable layer are measured first with both
# builds, turn by turn in one loop (each with a store of its own), with
# the ratios this build / BENCH_OLD; BENCH_ONLY_COMPARE=1 stops there.
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
  local ids impl
  ids=$(dsec-run ps --all 2>/dev/null | jq -r .id || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || dsec-run rm --force $ids >/dev/null 2>&1 || true
  # the host's layer mounts and run/layers' bind mount go with the reaper
  dsec-reap >/dev/null 2>&1 || true
  for impl in new old; do
    [ -d "$work/root-$impl" ] || continue
    ids=$(as "$impl" dsec-run ps --all 2>/dev/null | jq -r .id || true)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || as "$impl" dsec-run rm --force $ids >/dev/null 2>&1 || true
    as "$impl" dsec-reap >/dev/null 2>&1 || true
  done
  rm -rf --one-file-system "$work"
}
# as new|old CMD...: CMD with that build's programs and a store of its own
as() {
  local impl=$1 bin=$BIN
  shift
  [ "$impl" = new ] || bin=$BENCH_OLD
  PATH="$bin:$PATH" DSEC_ROOT="$work/root-$impl" DSEC_RUN="$work/run-$impl" \
    DSEC_STORE="$work/root-$impl/store" "$@"
}
trap cleanup EXIT INT TERM

examples/mkrootfs-busybox.sh "$work/bb.tar.gz"
dsec-pull --name busybox:bench "tar:$work/bb.tar.gz" >/dev/null
dsec-layer materialise busybox:bench >/dev/null

. bench/lib.sh

# checkpoint and fork: this build against BENCH_OLD, turn by turn
if [ -n "${BENCH_OLD:-}" ]; then
  [ -x "$BENCH_OLD/dsec-run" ] || { echo "bench/state.sh: no dsec-run in $BENCH_OLD" >&2; exit 1; }
  for impl in new old; do
    as "$impl" dsec-pull --name busybox:bench "tar:$work/bb.tar.gz" >/dev/null
    as "$impl" dsec-layer materialise busybox:bench >/dev/null
  done
  for mb in 0 100; do
    declare -A cks=() fks=()
    for i in $(seq "$N"); do
      for impl in new old; do
        id=$(as "$impl" dsec-run create --image busybox:bench | jq -r .id)
        if [ "$mb" -eq 0 ]; then
          as "$impl" dsec-run exec "$id" -- sh -c 'mkdir -p /work && echo hi >/work/small && rm /bin/vi' >/dev/null
        else
          as "$impl" dsec-run exec "$id" -- dd if=/dev/urandom of=/work/blob bs=1M count="$mb" >/dev/null 2>&1
        fi
        t=$(date +%s%N); as "$impl" dsec-run checkpoint "$id" >/dev/null; cks[$impl]+="$(us "$t") "
        t=$(date +%s%N); as "$impl" dsec-run fork "$id" >"$work/fork.out"; fks[$impl]+="$(us "$t") "
        # shellcheck disable=SC2046
        as "$impl" dsec-run rm "$id" $(jq -r .id "$work/fork.out") >/dev/null
      done
    done
    what=$([ "$mb" -eq 0 ] && echo "small layer" || echo "${mb} MiB layer")
    # shellcheck disable=SC2086
    { stat "checkpoint, $what: this build" ${cks[new]}; a50=$P50 a99=$P99
      stat "checkpoint, $what: BENCH_OLD" ${cks[old]}; b50=$P50 b99=$P99; }
    ratio_row "  ratio this / BENCH_OLD (p50, p99)" "$a50" "$a99" "$b50" "$b99"
    # shellcheck disable=SC2086
    { stat "fork, $what: this build" ${fks[new]}; a50=$P50 a99=$P99
      stat "fork, $what: BENCH_OLD" ${fks[old]}; b50=$P50 b99=$P99; }
    ratio_row "  ratio this / BENCH_OLD (p50, p99)" "$a50" "$a99" "$b50" "$b99"
    unset cks fks
  done
  if [ "${BENCH_ONLY_COMPARE:-0}" = 1 ]; then
    echo
    echo "dsec rollout state: N=$N, $(nproc) cores, $(uname -r), BENCH_OLD=$BENCH_OLD ($(git -C "$BENCH_OLD" rev-parse --short HEAD 2>/dev/null || echo ?)), $(date -u +%FT%TZ)"
    printf '%-40s %10s %10s\n' case "p50 ms" "p99 ms"
    printf '%s\n' "${rows[@]}"
    exit 0
  fi
fi

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
