#!/bin/bash
# What an agent harness does, measured (not a test): a session command's
# round trip against a plain exec of the same command, and cp of a large
# file in and out against crun exec with tar, in one run on one machine.
# Prints one table with p50/p99 (ms) and the ratios.
#
#   sudo bench/harness.sh        (BENCH_N=200 round trips, BENCH_CP_MB=1024,
#                                 BENCH_CP_N=3 copies each way by default)
#
# Both sides of each comparison run turn by turn in one loop, so the
# machine's load weighs on both alike.  `tar | dsec-run exec tar x` is
# not a peer here: exec's stdin is a JSON string (UTF-8 text up to 64 MiB),
# which is why cp exists.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench/harness.sh: needs root" >&2; exit 1; }
N=${BENCH_N:-200}
CP_MB=${BENCH_CP_MB:-1024}
CP_N=${BENCH_CP_N:-3}
BIN=$(pwd)
export PATH="$BIN:$PATH"
command -v crun >/dev/null || apt-get install -y -q crun >/dev/null
work=$(mktemp -d /var/tmp/dsec-bench-harness.XXXXXX)
export DSEC_ROOT="$work/root" DSEC_RUN="$work/run"
unset DSEC_STORE
CRUN_ROOT=$work/crun
CTR=dsecbench-harness-$$
cleanup() {
  local ids
  set +e
  crun --root "$CRUN_ROOT" delete -f "$CTR" >/dev/null 2>&1
  ids=$(dsec-run ps --all 2>/dev/null | jq -r .id)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || dsec-run rm --force $ids >/dev/null 2>&1
  # the host's layer mounts and run/layers' bind mount go with the reaper
  dsec-reap >/dev/null 2>&1
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT INT TERM

. bench/lib.sh

examples/mkrootfs-busybox.sh "$work/bb.tar.gz"
dsec-pull --name busybox:bench "tar:$work/bb.tar.gz" >/dev/null
SB=$(dsec-run create --image busybox:bench | jq -er .id)

# ---- 1. a session command against a plain exec
for _ in 1 2 3 4 5; do
  dsec-run exec "$SB" -- true >/dev/null
  dsec-run exec --session bench "$SB" -- true >/dev/null
done
plain=() sess=()
for ((b = 0; b < 10; b++)); do
  for ((i = 0; i < (N + 9) / 10; i++)); do
    t=$(date +%s%N); dsec-run exec "$SB" -- true >/dev/null; plain+=("$(us "$t")")
  done
  for ((i = 0; i < (N + 9) / 10; i++)); do
    t=$(date +%s%N); dsec-run exec --session bench "$SB" -- true >/dev/null; sess+=("$(us "$t")")
  done
done
stat "exec true (dsec-run exec)" "${plain[@]}"; P50p=$P50 P99p=$P99
stat "session command true" "${sess[@]}"; P50s=$P50 P99s=$P99
ratio_row "session / exec" "$P50s" "$P99s" "$P50p" "$P99p"
# the same with a shell built in: cd, a variable (what a session keeps)
plain=() sess=()
for ((i = 0; i < N / 2; i++)); do
  t=$(date +%s%N); dsec-run exec "$SB" -- sh -c 'cd /tmp && X=1 && echo $X' >/dev/null; plain+=("$(us "$t")")
  t=$(date +%s%N); dsec-run exec --session bench "$SB" -- 'cd /tmp && X=1 && echo $X' >/dev/null; sess+=("$(us "$t")")
done
stat "exec sh -c 'cd; X=1; echo'" "${plain[@]}"; P50p=$P50 P99p=$P99
stat "session 'cd; X=1; echo'" "${sess[@]}"; P50s=$P50 P99s=$P99
ratio_row "session / exec (sh -c)" "$P50s" "$P99s" "$P50p" "$P99p"

# ---- 2. cp of a large file, in and out, against crun exec with tar
head -c "${CP_MB}M" /dev/urandom >"$work/big"
mkdir -p "$work/bundle/rootfs" "$work/crun-data" "$work/out"
tar -C "$work/bundle/rootfs" -xzf "$work/bb.tar.gz"
(cd "$work/bundle" && crun spec)
# the container's data directory is on the same file system as dsec's
# writable layers
jq --arg d "$work/crun-data" '.process.terminal = false |
  .process.args = ["sleep", "1000000"] | .root.readonly = true |
  .mounts += [{"destination": "/data", "type": "bind", "source": $d,
               "options": ["rbind", "rw"]}]' \
  "$work/bundle/config.json" >"$work/c.json"
mv "$work/c.json" "$work/bundle/config.json"
mkdir -p "$CRUN_ROOT"
# crun 1.8 refuses a hybrid cgroup layout whose cgroup2 tree owns a
# controller: it starts with that tree hidden (its exec needs no such help)
unshare -m sh -c 'mount -t tmpfs none /sys/fs/cgroup/unified 2>/dev/null;
  exec crun --root "$1" run -d -b "$2" "$3"' sh "$CRUN_ROOT" "$work/bundle" "$CTR" \
  >/dev/null </dev/null
crunx() { crun --root "$CRUN_ROOT" exec "$@"; }
di=() ci=() do_=() co=()
for ((k = 0; k < CP_N; k++)); do
  sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
  t=$(date +%s%N); dsec-run cp "$work/big" "$SB:/tmp/big" >/dev/null; di+=("$(us "$t")")
  sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
  t=$(date +%s%N); tar -C "$work" -cf - big | crunx "$CTR" tar -xf - -C /data; ci+=("$(us "$t")")
  sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
  t=$(date +%s%N); dsec-run cp "$SB:/tmp/big" "$work/out/big.dsec" >/dev/null; do_+=("$(us "$t")")
  sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null || true
  t=$(date +%s%N); crunx "$CTR" tar -cf - -C /data big | tar -xf - -C "$work/out"; co+=("$(us "$t")")
  cmp -s "$work/big" "$work/out/big.dsec" || { echo "bench/harness.sh: cp out differs" >&2; exit 1; }
  rm -f "$work/out/big.dsec" "$work/out/big" "$work/crun-data/big"
  dsec-run exec "$SB" -- rm -f /tmp/big >/dev/null
done
stat "cp in ${CP_MB} MiB (dsec-run cp)" "${di[@]}"; A50=$P50 A99=$P99
stat "cp in (tar | crun exec tar x)" "${ci[@]}"; B50=$P50 B99=$P99
ratio_row "crun / dsec, in (>1: dsec faster)" "$B50" "$B99" "$A50" "$A99"
stat "cp out ${CP_MB} MiB (dsec-run cp)" "${do_[@]}"; A50=$P50 A99=$P99
stat "cp out (crun exec tar c | tar x)" "${co[@]}"; B50=$P50 B99=$P99
ratio_row "crun / dsec, out (>1: dsec faster)" "$B50" "$B99" "$A50" "$A99"

printf '%-40s %10s %10s\n' "case (load $(cut -d' ' -f1-3 /proc/loadavg))" p50 p99
printf '%s\n' "${rows[@]}"
