#!/usr/bin/env bash
# bench/create-cpu.sh [N [BLOCKS [K]]]: the CPU one `dsec-run create`
# costs the whole machine with N idle sandboxes alive (default 2000), two
# ways side by side: BLOCKS blocks (default 10) of K creates each (default
# 40, 4 at a time), alternating between way A and way B, so that the load,
# the disk and what the first creates left weigh on both alike.  Prints
# for each way the busy CPU time per create (/proc/stat: user, nice,
# system, irq, softirq) and creates/s.
#
# The ways are environments for dsec-run: BENCH_A (default empty, the
# defaults) and BENCH_B (default DSEC_MOUNT_NS=own, a mount namespace
# copied from the host's), each a list of NAME=VALUE words.  With
# BENCH_BASE=<tree>, way B runs that tree's dsec-run instead (a build of
# another commit, on the same store), with BENCH_B (then empty by
# default) as its environment.  A benchmark,
# not a test: `make check` never runs it.  Needs root.  Everything it
# makes is private to it (a DSEC_ROOT/DSEC_RUN of its own under
# BENCH_DIR, default /var/tmp) and is removed on any exit.
set -euo pipefail
export LC_ALL=C

prog=create-cpu.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
N=${1:-2000}
BLOCKS=${2:-10}
K=${3:-40}
A=${BENCH_A:-}
BASE=${BENCH_BASE:-}
if [[ -n $BASE ]]; then B=${BENCH_B:-}; else B=${BENCH_B-DSEC_MOUNT_NS=own}; fi
BIN=${DSEC_BIN:-$top}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

for v in "$N" "$BLOCKS" "$K"; do
  [[ $v =~ ^[0-9]+$ ]] || die "N, BLOCKS and K are numbers (usage: $prog [N [BLOCKS [K]]])"
done
((BLOCKS >= 2 && K >= 1)) || die "at least 2 blocks of 1 create"
[[ $(id -u) -eq 0 ]] || die "needs root; run: sudo $0"
for b in dsec-run dsec-pull dsec-reap; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
[[ -z $BASE || -x $BASE/dsec-run ]] || die "$BASE/dsec-run not found (BENCH_BASE)"
for w in $A $B; do
  [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]] || die "BENCH_A and BENCH_B are NAME=VALUE words: $w"
done

WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/dsec-create-cpu.XXXXXX")
chmod 711 "$WORK"
mkdir "$WORK/bin"
cp "$BIN/dsec-run" "$BIN/dsec-pull" "$BIN/dsec-reap" "$WORK/bin/"
DSEC=$WORK/bin/dsec-run
DSEC_B=$DSEC
if [[ -n $BASE ]]; then
  mkdir "$WORK/base"
  cp "$BASE/dsec-run" "$WORK/base/"
  DSEC_B=$WORK/base/dsec-run
fi
export DSEC_ROOT=$WORK/root DSEC_RUN=$WORK/run
unset DSEC_STORE DSEC_DEBUG DSEC_LOG_FORMAT DSEC_MOUNT_NS

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  "$DSEC" ps --all 2>/dev/null | jq -r .id 2>/dev/null |
    xargs -r -n 50 -P 4 "$DSEC" rm --force >/dev/null 2>&1
  "$WORK/bin/dsec-reap" --all >/dev/null 2>&1
  rm -rf --one-file-system "$WORK"
  exit "$rc"
}
# shellcheck source=bench/traps.sh
. "$here/traps.sh"

"$top/examples/mkrootfs-busybox.sh" "$WORK/bb.tar.gz" >/dev/null 2>&1 ||
  die "cannot build the busybox rootfs"
"$WORK/bin/dsec-pull" --name busybox:bench "tar:$WORK/bb.tar.gz" >/dev/null
echo '{"image":"busybox:bench","resources":{"memory_mb":64}}' >"$WORK/spec.json"

# creates K DSEC-RUN [NAME=VALUE...]: K creates, 4 at a time, by that
# dsec-run in that environment
creates() {
  local k=$1 run=$2
  shift 2
  seq "$k" | env "$@" xargs -P 4 -I{} "$run" create --spec "$WORK/spec.json" \
    >/dev/null 2>>"$WORK/err" || die "a create failed: $(tail -3 "$WORK/err")"
}
busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }

log "creating $N idle sandboxes"
((N == 0)) || creates "$N" "$DSEC"
hz=$(getconf CLK_TCK)
declare -A cpu=([A]=0 [B]=0) wall=([A]=0 [B]=0) made=([A]=0 [B]=0)
log "$BLOCKS blocks of $K creates, A ($A) and B ($B) in turn"
for ((i = 0; i < BLOCKS; i++)); do
  w=A
  ((i % 2 == 0)) || w=B
  c0=$(busy) t0=${EPOCHREALTIME/./}
  # (the ways are lists of words)
  # shellcheck disable=SC2086
  if [[ $w == A ]]; then creates "$K" "$DSEC" $A; else creates "$K" "$DSEC_B" $B; fi
  t1=${EPOCHREALTIME/./} c1=$(busy)
  cpu[$w]=$((cpu[$w] + c1 - c0))
  wall[$w]=$((wall[$w] + t1 - t0))
  made[$w]=$((made[$w] + K))
done

echo "# bench/create-cpu.sh $N $BLOCKS $K; $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
for w in A B; do
  env=$A
  [[ $w == A ]] || env=$B${BASE:+ (dsec-run of $BASE)}
  awk -v w="$w" -v env="${env:-(defaults)}" -v c="${cpu[$w]}" -v hz="$hz" \
    -v t="${wall[$w]}" -v n="${made[$w]}" 'BEGIN {
      printf("%s %-24s %6.2f ms CPU per create, %6.1f creates/s\n", w, env,
             c * 1000 / hz / n, n / (t / 1e6)) }'
done
