#!/usr/bin/env bash
# bench/density.sh [N [P]]: N idle sandboxes (default 200) created by P
# parallel creators (default 4), all alive at once; then prints creates/s,
# p50/p99 create latency, the busy CPU per create (and the host's kdamond
# threads' share of it), host memory per sandbox (MemAvailable drop / N,
# kernel included), audit coverage (records whose masked-file audit is on),
# an exec check on a sample (BENCH_SAMPLE, default 20: each opens a masked
# /proc file, which must come back as a "masked" event) and the removal
# time.  The issue's goal is `bench/density.sh 5000 4` on a quiet machine.
#
# A benchmark, not a test: `make check` never runs it.  Needs root.
# Everything it makes is private to it (a DSEC_ROOT/DSEC_RUN of its own
# under BENCH_DIR) and is removed on any exit, error or signal.
#
# Knobs: BENCH_VIA=create|serve (P `dsec-run create` loops, or one
# `dsec-run serve` with P creates in flight), BENCH_SAMPLE=20,
# BENCH_SLABS=1 (also the slab caches that grew most, per sandbox),
# BENCH_LAT=FILE (every create's line "US STATUS ID START_US", in the
# order they started: latency and start in microseconds from the first
# start, ID "-" where none came back; to see when slow creates cluster),
# BENCH_SPEC (the spec, JSON; default {"image":"busybox:density",
# "resources":{"memory_mb":64}}: the image is the busybox rootfs of
# examples/, pulled under that name), BENCH_DIR=/var/tmp, DSEC_BIN=<tree>
# (where dsec-run, dsec-pull, dsec-layer and dsec-reap are; default this
# tree).
set -euo pipefail
export LC_ALL=C

prog=density.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
N=${1:-200}
P=${2:-4}
VIA=${BENCH_VIA:-create}
SAMPLE=${BENCH_SAMPLE:-20}
SPEC=${BENCH_SPEC:-'{"image":"busybox:density","resources":{"memory_mb":64}}'}
BIN=${DSEC_BIN:-$top}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer (usage: $prog [N [P]])"
[[ $P =~ ^[1-9][0-9]*$ ]] || die "P must be a positive integer (usage: $prog [N [P]])"
[[ $SAMPLE =~ ^[0-9]+$ ]] || die "BENCH_SAMPLE must be a number"
[[ $VIA == create || $VIA == serve ]] || die "BENCH_VIA is create or serve"
((BASH_VERSINFO[0] >= 5)) || die "needs bash 5 (EPOCHREALTIME)"
[[ $(id -u) -eq 0 ]] || die "needs root; run: sudo $0"
for b in dsec-run dsec-pull dsec-layer dsec-reap; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
for c in jq awk sort xargs; do
  command -v "$c" >/dev/null || die "missing tool: $c"
done
SPEC=$(jq -ce 'objects' <<<"$SPEC") || die "BENCH_SPEC is not a JSON object"

# ---------------------------------------------------------------- cleanup
WORK=$(mktemp -d "${BENCH_DIR:-/var/tmp}/dsec-density.XXXXXX")
chmod 711 "$WORK"
mkdir -m 711 "$WORK/run"
mkdir "$WORK/lat"
# the programs are copied: a rebuild during the run cannot mix two builds
mkdir "$WORK/bin"
cp "$BIN/dsec-run" "$BIN/dsec-pull" "$BIN/dsec-layer" "$BIN/dsec-reap" "$WORK/bin/"
DSEC=$WORK/bin/dsec-run
export PATH="$WORK/bin:$PATH"
export DSEC_ROOT=$WORK/root DSEC_RUN=$WORK/run
unset DSEC_STORE DSEC_DEBUG DSEC_LOG_FORMAT
KIDS=()

cleanup() {
  local rc=$? ids=() id pid comm d
  trap - EXIT INT TERM HUP
  set +e
  for pid in "${KIDS[@]}"; do
    kill "$pid" 2>/dev/null
  done
  for pid in "${KIDS[@]}"; do
    wait "$pid" 2>/dev/null
  done
  for d in "$DSEC_ROOT"/sandboxes/sb-*; do
    [[ -d $d ]] && ids+=("${d##*/}")
  done
  if ((${#ids[@]})); then
    log "cleanup: dsec-run rm --force ${#ids[@]} sandbox(es)"
    printf '%s\n' "${ids[@]}" | xargs -r -n 50 -P "$P" "$DSEC" rm --force >/dev/null 2>&1
    for id in "${ids[@]}"; do
      # a supervisor rm could not stop: ours by its state file, checked
      # by name before it is killed
      pid=$(jq -r '.supervisor_pid // 0' "$DSEC_ROOT/sandboxes/$id/state.json" 2>/dev/null)
      if [[ -n $pid && $pid != 0 ]]; then
        comm=$(cat "/proc/$pid/comm" 2>/dev/null)
        [[ $comm == dsec-supervise ]] && kill -KILL "$pid" 2>/dev/null
      fi
      for d in /sys/fs/cgroup/*/dsec/"$id" /sys/fs/cgroup/dsec/"$id"; do
        [[ -d $d ]] && rmdir "$d" 2>/dev/null
      done
    done
  fi
  # the host's layer mount and run/layers' bind mount go with the reaper
  "$WORK/bin/dsec-reap" >/dev/null 2>&1
  rm -rf --one-file-system "$WORK"
  exit "$rc"
}
# shellcheck source=bench/traps.sh
. "$here/traps.sh"

# now_us: microseconds (bash's clock: no process per reading)
now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
# pct FILE Q: nearest-rank quantile of the numbers in FILE
pct() {
  sort -n "$1" | awk -v q="$2" '{ v[NR] = $1 } END {
    if (NR == 0) { print 0; exit }
    i = int(q * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'
}

# ------------------------------------------------------------ the image
"$top/examples/mkrootfs-busybox.sh" "$WORK/bb.tar.gz" >/dev/null 2>&1 ||
  die "cannot build the busybox rootfs"
"$WORK/bin/dsec-pull" --name busybox:density "tar:$WORK/bb.tar.gz" >/dev/null
echo "$SPEC" >"$WORK/spec.json"
# one create and rm first: binaries, the layer and the slabs warm
id=$("$DSEC" create --spec "$WORK/spec.json" | jq -er .id)
"$DSEC" rm "$id" >/dev/null
sleep 1

# ------------------------------------------------------------ creates
log "creating $N sandboxes, $P at a time (via $VIA)"
mem0=$(meminfo MemAvailable)
slab0=$(meminfo Slab) pt0=$(meminfo PageTables) ks0=$(meminfo KernelStack)
pcpu0=$(meminfo Percpu) mnt0=$(wc -l </proc/self/mountinfo)
cp /proc/slabinfo "$WORK/slab0"
# the machine's busy CPU while creating, and the part of it the host's
# DAMON threads took (kdamond: not ours, but each of its access checks of
# a page walks every process that maps it, and every supervisor and init
# maps the same pages of dsec-run and libc)
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
kdamond_ticks() {
  local p t=0 f
  for p in $KDAMONDS; do
    read -ra f 2>/dev/null <"/proc/$p/stat" || continue
    t=$((t + f[13] + f[14]))
  done
  echo "$t"
}
KDAMONDS=$(pgrep '^kdamond' || true)
busy0=$(busy_ticks) kd0=$(kdamond_ticks)

# creator W: sandboxes W, W+P, ... each by one `dsec-run create`; one line
# "US STATUS ID START_US" per create in lat/W
creator() {
  local w=$1 i t0 t1 out rc
  for ((i = w; i < N; i += P)); do
    t0=$(now_us)
    rc=0
    out=$("$DSEC" create --spec "$WORK/spec.json" 2>>"$WORK/lat/$w.err") || rc=$?
    t1=$(now_us)
    if [[ $out =~ \"id\":\"(sb-[0-9a-f]+)\" ]]; then
      echo "$((t1 - t0)) $rc ${BASH_REMATCH[1]} $((t0 - T0))" >>"$WORK/lat/$w"
    else
      echo "$((t1 - t0)) $((rc ? rc : 1)) - $((t0 - T0))" >>"$WORK/lat/$w"
    fi
  done
}

# one `dsec-run serve`, P creates in flight: each request's latency is from
# its write to its answer
serve_creates() {
  local sent=0 got=0 line rid t spec=$SPEC
  local -a start=()
  coproc SERVE { exec "$DSEC" serve 2>>"$WORK/lat/serve.err"; }
  KIDS+=("$SERVE_PID")
  while ((sent < N && sent < P)); do
    start[sent]=$(now_us)
    printf '{"op":"create","rid":%d,"spec":%s}\n' "$sent" "$spec" >&"${SERVE[1]}"
    sent=$((sent + 1))
  done
  while ((got < N)) && IFS= read -r line <&"${SERVE[0]}"; do
    t=$(now_us)
    [[ $line =~ \"rid\":([0-9]+) ]] || continue
    rid=${BASH_REMATCH[1]}
    if [[ $line =~ \"id\":\"(sb-[0-9a-f]+)\" ]] && [[ $line != *'"type":"error"'* ]]; then
      echo "$((t - start[rid])) 0 ${BASH_REMATCH[1]} $((start[rid] - T0))" >>"$WORK/lat/0"
    else
      echo "$((t - start[rid])) 1 - $((start[rid] - T0))" >>"$WORK/lat/0"
      echo "$line" >>"$WORK/lat/serve.err"
    fi
    got=$((got + 1))
    if ((sent < N)); then
      start[sent]=$(now_us)
      printf '{"op":"create","rid":%d,"spec":%s}\n' "$sent" "$spec" >&"${SERVE[1]}"
      sent=$((sent + 1))
    fi
  done
  local wfd=${SERVE[1]}
  exec {wfd}>&-
  wait "$SERVE_PID" 2>/dev/null || true
}

T0=$(now_us)
if [[ $VIA == create ]]; then
  for ((w = 0; w < P && w < N; w++)); do
    creator "$w" &
    KIDS+=($!)
  done
  for pid in "${KIDS[@]}"; do
    wait "$pid" || true
  done
  KIDS=()
else
  serve_creates
  KIDS=()
fi
T1=$(now_us)
busy1=$(busy_ticks) kd1=$(kdamond_ticks)
cat "$WORK"/lat/[0-9]* >"$WORK/all"
[[ -n ${BENCH_LAT:-} ]] && sort -n -k4,4 "$WORK/all" >"$BENCH_LAT"
awk '$2 == 0 { print $1 }' "$WORK/all" >"$WORK/ok-us"
awk '$2 == 0 { print $3 }' "$WORK/all" >"$WORK/ids"
NOK=$(wc -l <"$WORK/ok-us")
NFAIL=$((N - NOK))
((NFAIL == 0)) || log "$NFAIL creates failed; first errors: $(cat "$WORK"/lat/*.err 2>/dev/null | sort | uniq -c | sort -rn | head -3)"

# ------------------------------------------------------------ memory
sleep 2 # what the creates left in flight (RCU frees, page cache) settles
mem1=$(meminfo MemAvailable)
slab1=$(meminfo Slab) pt1=$(meminfo PageTables) ks1=$(meminfo KernelStack)
pcpu1=$(meminfo Percpu)
cp /proc/slabinfo "$WORK/slab1"

# ------------------------------------------------------------ audit coverage
"$DSEC" ps >"$WORK/ps"
LISTED=$(wc -l <"$WORK/ps")
AUDIT_ON=$(jq -s '[.[] | select((.audit_unavailable // "") | startswith("masked") | not)] | length' "$WORK/ps")
AUDIT_WHY=$(jq -rs '[.[] | .audit_unavailable // empty] | group_by(.) |
  map("\(length)x \(.[0])") | join("; ")' "$WORK/ps")

# ------------------------------------------------------------ the sample
# SAMPLE sandboxes spread over the creation order, the last one among them:
# each answers an exec that opens /proc/kpagecgroup (masked), and the open
# must be its "masked" event; also the PSS of their supervisor and init
mapfile -t ids <"$WORK/ids"
pss_of() { awk '$1 == "Pss:" { print $2; exit }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
sample=()
if ((SAMPLE > 0 && NOK > 0)); then
  k=$((SAMPLE < NOK ? SAMPLE : NOK))
  for ((i = 1; i <= k; i++)); do
    sample+=("${ids[$((i * NOK / k - 1))]}")
  done
fi
EXEC_OK=0 MASKED_OK=0 PSS_SUP=0 PSS_INIT=0
for id in "${sample[@]}"; do
  out=$("$DSEC" exec --timeout 30 "$id" -- cat /proc/kpagecgroup 2>/dev/null) || true
  jq -e '.exit_code == 0' <<<"$out" >/dev/null 2>&1 && EXEC_OK=$((EXEC_OK + 1))
  "$DSEC" events "$id" 2>/dev/null | jq -e -s \
    'any(.[]; .type == "masked" and .path == "/proc/kpagecgroup")' >/dev/null 2>&1 &&
    MASKED_OK=$((MASKED_OK + 1))
  ins=$("$DSEC" inspect "$id" 2>/dev/null) || continue
  PSS_SUP=$((PSS_SUP + $(pss_of "$(jq -r .supervisor_pid <<<"$ins")")))
  PSS_INIT=$((PSS_INIT + $(pss_of "$(jq -r .init_pid <<<"$ins")")))
done

# ------------------------------------------------------------ removal
log "removing $NOK sandboxes, $P at a time"
R0=$(now_us)
RM_FAIL=0
if ((NOK > 0)); then
  chunk=$(((NOK + P * 4 - 1) / (P * 4)))
  xargs -r -n "$chunk" -P "$P" "$DSEC" rm <"$WORK/ids" >/dev/null 2>"$WORK/rm.err" || RM_FAIL=1
fi
R1=$(now_us)
LEFT=$(find "$DSEC_ROOT/sandboxes" -mindepth 1 -maxdepth 1 -name 'sb-*' 2>/dev/null | wc -l)

# ------------------------------------------------------------ the table
f() { awk "BEGIN { printf(\"$1\", $2) }"; }
ns=${#sample[@]}
{
  echo "# bench/density.sh $N $P (via $VIA; spec $SPEC)"
  echo "# $(nproc) CPUs, $(uname -r), $(awk '$1 == "MemTotal:" { printf("%.1f GiB", $2 / 1048576) }' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  printf '%-34s %s\n' "sandboxes created" "$NOK of $N ($NFAIL failed)"
  printf '%-34s %s\n' "creates/s" "$(f '%.1f' "$NOK / (($T1 - $T0) / 1e6)")"
  printf '%-34s %s\n' "create latency p50 / p99 (ms)" \
    "$(f '%.1f' "$(pct "$WORK/ok-us" 0.5) / 1000") / $(f '%.1f' "$(pct "$WORK/ok-us" 0.99) / 1000")"
  hz=$(getconf CLK_TCK)
  printf '%-34s %s\n' "busy CPU per create (ms)" \
    "$(f '%.2f' "($busy1 - $busy0) * 1000 / $hz / ($NOK + ($NOK == 0))") ($(f '%.0f' "($busy1 - $busy0) * 100 / $hz / (($T1 - $T0) / 1e6) / $(nproc)")% of the CPUs; host kdamond: $(f '%.0f' "($kd1 - $kd0) * 100 / ($busy1 - $busy0 + ($busy1 == $busy0))")% of that)"
  printf '%-34s %s\n' "host memory per sandbox (MiB)" \
    "$(f '%.2f' "($mem0 - $mem1) / 1024 / $N") (MemAvailable drop / N)"
  printf '%-34s %s\n' "  kernel: slab, percpu" \
    "$(f '%.0f' "($slab1 - $slab0) / $N") + $(f '%.0f' "($pcpu1 - $pcpu0) / $N") KiB"
  printf '%-34s %s\n' "  kernel: page tables, stacks" \
    "$(f '%.0f' "($pt1 - $pt0) / $N") + $(f '%.0f' "($ks1 - $ks0) / $N") KiB"
  ((ns == 0)) || printf '%-34s %s\n' "  PSS supervisor + init (sample)" \
    "$(f '%.0f' "$PSS_SUP / $ns") + $(f '%.0f' "$PSS_INIT / $ns") KiB"
  if [[ ${BENCH_SLABS:-0} == 1 ]]; then
    # the slab caches that grew most, per sandbox (objects x size)
    echo "  slab caches per sandbox (host mounts before: $mnt0; each sandbox's supervisor copies them):"
    awk -v n="$N" 'FNR == NR { if (FNR > 2) a[$1] = $2; next }
      FNR > 2 { d = ($2 - a[$1]) * $4; if (d > 0) printf("%10.1f KiB  %8.1f objects  %s\n", d / 1024 / n, ($2 - a[$1]) / n, $1) }' \
      "$WORK/slab0" "$WORK/slab1" | sort -rn | head -"${BENCH_SLABS_TOP:-15}" | sed 's/^/  /'
  fi
  printf '%-34s %s\n' "audit coverage (masked on)" "$AUDIT_ON of $LISTED${AUDIT_WHY:+ (off: $AUDIT_WHY)}"
  printf '%-34s %s\n' "exec check (sample)" "$EXEC_OK of $ns answered; $MASKED_OK of $ns recorded the masked open"
  printf '%-34s %s\n' "removal" "$(f '%.1f' "($R1 - $R0) / 1e6") s for $NOK ($(f '%.1f' "$NOK / (($R1 - $R0) / 1e6 + 1e-9)")/s); $LEFT left$( ((RM_FAIL == 0)) || echo ", some rm failed: $(head -c 200 "$WORK/rm.err")")"
}
((NFAIL == 0 && LEFT == 0 && EXEC_OK == ns)) || exit 1
