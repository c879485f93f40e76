#!/usr/bin/env bash
# bench/burst.sh: the image burst at this machine's scale.  N distinct
# images (a shared Debian base with python3, plus a distinct task layer of
# BENCH_TASK_MB of incompressible files each) times M sandboxes each,
# created in one burst through one `dsec-run serve`, three ways:
#
#   erofs    on demand: the store holds each layer's EROFS image already;
#            the first sandbox of a layer on this host mounts it, the
#            others clone that mount (what dsec-run does now)
#   dir      extraction: each layer extracted into the store at its first
#            sandbox (DSEC_LAYER_FORMAT=dir, the fallback)
#   eager    the baseline: untar each image into a directory, then crun M
#            containers on it
#
# For each: bytes written (data the processes wrote, and what the disk saw),
# create latency p50/p99 from the burst's start, time until all run.  Then
# the first sandbox of the large image (cold: nothing mounted, the image's
# pages not cached) against a later one, each to a first `python3` exec;
# and what a fresh pull writes, converting included, against the image's
# uncompressed size.  A benchmark, not a test.  Needs root.  See
# bench/README.
set -euo pipefail
export LC_ALL=C

prog=burst.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

N=${BENCH_IMAGES:-8}
M=${BENCH_PER_IMAGE:-4}
TASK_MB=${BENCH_TASK_MB:-50}
CACHE=${BENCH_CACHE:-/var/tmp/dsec-burst}
PKGS=${BENCH_PKGS:-python3,git,gcc,g++,make,libc6-dev}
COLD_N=${BENCH_COLD_N:-3}
BIN=${DSEC_BIN:-$top}
MODES=${BENCH_MODES:-erofs dir eager}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (mounts, crun); run: sudo $0"
for b in dsec-pull dsec-layer dsec-run dsec-reap; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
for c in tar gzip jq crun python3 mkfs.erofs bc; do
  command -v "$c" >/dev/null || die "missing tool: $c"
done
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap"
  apt-get install -y -q mmdebstrap >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q mmdebstrap >/dev/null; }
fi
export PATH=$BIN:$PATH

mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
WORK=$(mktemp -d "$CACHE/run.XXXXXX")
export DSEC_ROOT=$WORK/root DSEC_RUN=$WORK/run
unset DSEC_STORE DSEC_LAYER_FORMAT DSEC_EROFS_COMPRESSION
CRUN_ROOT=$WORK/crun
export N M TASK_MB CACHE WORK CRUN_ROOT

# the eager baseline's containers (ids in $WORK/crun.ids) go
crun_clean() {
  local id
  [[ -f $WORK/crun.ids ]] || return 0
  while read -r id; do
    # gone already, or never made: nothing to do (not a failure)
    crun --root "$CRUN_ROOT" kill "$id" KILL 2>/dev/null || true
    crun --root "$CRUN_ROOT" delete --force "$id" 2>/dev/null || true
  done <"$WORK/crun.ids"
  rm -f "$WORK/crun.ids"
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  crun_clean
  if [[ -d $DSEC_ROOT/sandboxes ]]; then
    dsec-run ps --all 2>/dev/null | jq -r .id | xargs -r dsec-run rm --force >/dev/null 2>&1
  fi
  # the host's layer mounts (and their loop devices) go with the reaper
  dsec-reap >/dev/null 2>&1
  awk -v r="$DSEC_RUN/layers" 'index($2, r) == 1 { print $2 }' /proc/self/mounts |
    sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf --one-file-system "$WORK"
  exit "$rc"
}
# shellcheck source=bench/traps.sh
. "$here/traps.sh"

# ---------------------------------------------------------------- measuring
now_us() { local t=${EPOCHREALTIME/./}; echo "$t"; }
DEV=$(findmnt -no SOURCE -T "$CACHE" | sed 's|^/dev/||; s|\[.*||')
DEV_STAT=/sys/class/block/$DEV/stat
[[ -r $DEV_STAT ]] || DEV_STAT=
dev_bytes() { [[ -n $DEV_STAT ]] && awk '{ printf("%.0f\n", $7 * 512) }' "$DEV_STAT" || echo 0; }

# io CMD...: runs CMD (stdout to $WORK/io.out) in a child bash; prints the
# net data bytes it and its reaped descendants wrote (write_bytes minus
# cancelled_write_bytes).
io() {
  bash -c '"$@" >"$0" || exit
    while read -r k v; do
      case $k in write_bytes:) w=$v ;; cancelled_write_bytes:) c=$v ;; esac
    done </proc/$$/io
    echo $((w - c))' "$WORK/io.out" "$@"
}

human_bytes() {
  awk -v b="$1" 'BEGIN { split("B KiB MiB GiB", u); i = 1
    while (b >= 1024 && i < 4) { b /= 1024; i++ }
    printf(i == 1 ? "%d %s" : "%.1f %s", b, u[i]) }'
}

# drop_file_cache FILE...: the files' pages leave the page cache (only
# theirs: nothing else on the machine is disturbed)
drop_file_cache() {
  python3 - "$@" <<'PY'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
}

# ---------------------------------------------------------------- the images
BASE=$CACHE/base.tar
if [[ ! -s $BASE ]]; then
  log "mmdebstrap --variant=minbase --include=$PKGS bookworm (a few minutes)"
  # (mmdebstrap writes a tarball for a name ending in .tar)
  mmdebstrap --quiet --variant=minbase --include="$PKGS" --mode=root bookworm \
    "$CACHE/base.tmp.tar" >&2
  mv "$CACHE/base.tmp.tar" "$BASE"
fi
if [[ ! -s $BASE.gz ]]; then
  gzip -c "$BASE" >"$BASE.gz.tmp"
  mv "$BASE.gz.tmp" "$BASE.gz"
fi
BASE_MB=$(( $(tar -tvf "$BASE" | awk '{ s += $3 } END { print int(s) }') >> 20 ))
log "base image: $BASE_MB MiB of files, $(human_bytes "$(stat -c %s "$BASE.gz")") gzip'd"

mkdir -p "$CACHE/tasks"
for ((i = 0; i < N; i++)); do
  t=$CACHE/tasks/task-$i.tar
  [[ -s $t ]] && continue
  d=$(mktemp -d "$WORK/task.XXXXXX")
  mkdir -p "$d/task/data"
  for ((k = 0; k < TASK_MB; k++)); do
    head -c 1048576 /dev/urandom >"$d/task/data/blob-$k"
  done
  echo "task $i" >"$d/task/README"
  tar -C "$d" --numeric-owner -cf "$t.tmp" . && mv "$t.tmp" "$t"
  rm -rf "$d"
done

declare -A R
fresh_root() {
  dsec-run ps --all 2>/dev/null | jq -r .id | xargs -r dsec-run rm --force >/dev/null 2>&1 || true
  dsec-reap >/dev/null 2>&1 || true
  rm -rf --one-file-system "$DSEC_ROOT" "$DSEC_RUN"
  mkdir -p "$DSEC_ROOT" "$DSEC_RUN"
}

# ------------------------------------------------ pull + convert, once per store
fresh_root
sync
d0=$(dev_bytes)
t0=$(now_us)
R[pull_proc]=$(io dsec-pull --name base:1 "tar:$BASE.gz")
sync
R[pull_dev]=$(( $(dev_bytes) - d0 ))
R[pull_us]=$(( $(now_us) - t0 ))
R[pull_unc]=$(jq -r '.layers[0].digest' "$WORK/io.out" | xargs -I{} dsec-layer inspect {} | jq .uncompressed_size)
R[pull_blob]=$(du -sB1 "$DSEC_ROOT/store/blobs" | cut -f1)
R[pull_erofs]=$(find "$DSEC_ROOT/store/layers" -name layer.erofs -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')

# the task layers (their EROFS images made here, outside the bursts)
for ((i = 0; i < N; i++)); do
  dsec-layer create --tar "$CACHE/tasks/task-$i.tar" --name "task$i@1" >/dev/null
done

# ------------------------------------------------------------------- bursts
# burst NAME: N*M creates sent at once to one serve; per-create latency
# from the start, and the time the last one answered
burst() {
  local name=$1
  python3 - "$N" "$M" "$WORK/$name.lat" <<'PY'
import json, subprocess, sys, time
n, m, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
p = subprocess.Popen(["dsec-run", "serve"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
t0 = time.monotonic()
for i in range(n):
    for k in range(m):
        spec = {"image": "base:1", "layers": [f"task{i}@1"],
                "resources": {"memory_mb": 256}}
        p.stdin.write(json.dumps({"op": "create", "rid": f"{i}-{k}",
                                  "spec": spec}) + "\n")
p.stdin.flush()
lat, bad = [], 0
while len(lat) + bad < n * m:
    line = p.stdout.readline()
    if not line:
        break
    r = json.loads(line)
    if r.get("type") == "sandbox":
        lat.append(time.monotonic() - t0)
    else:
        bad += 1
        print(line.strip(), file=sys.stderr)
p.stdin.close()
p.wait()
with open(out, "w") as f:
    for v in lat:
        print(int(v * 1e6), file=f)
if bad:
    sys.exit(f"{bad} creates failed")
PY
}

# eager: untar each image into its own directory, then M crun containers
eager() {
  local i k b
  mkdir -p "$CRUN_ROOT"
  : >"$WORK/eager.lat"
  local t0
  t0=$(now_us)
  for ((i = 0; i < N; i++)); do
    b=$WORK/eager/$i
    mkdir -p "$b/rootfs"
    tar --numeric-owner -xpf "$BASE" -C "$b/rootfs" --exclude='./dev/*'
    tar --numeric-owner -xpf "$CACHE/tasks/task-$i.tar" -C "$b/rootfs"
    (cd "$b" && crun spec)
    jq '.process.args = ["sleep", "3600"] | .process.terminal = false |
      .root.readonly = true' "$b/config.json" >"$b/c.json"
    mv "$b/c.json" "$b/config.json"
    for ((k = 0; k < M; k++)); do
      echo "burst-$$-$i-$k" >>"$WORK/crun.ids"
      crun --root "$CRUN_ROOT" run -d --bundle "$b" "burst-$$-$i-$k" >/dev/null
      echo $(( $(now_us) - t0 )) >>"$WORK/eager.lat"
    done
  done
  sync
}

export BASE
export -f burst eager now_us

q() { sort -n "$1" | awk -v q="$2" '{ v[NR] = $1 } END { r = int(q * NR); if (r < q * NR) r++; if (r < 1) r = 1; printf("%.0f", v[r] / 1000) }'; }

for mode in $MODES; do
  dsec-run ps --all 2>/dev/null | jq -r .id | xargs -r dsec-run rm --force >/dev/null 2>&1 || true
  dsec-reap >/dev/null 2>&1 || true
  case $mode in
    erofs)
      # each layer's image in the store, nothing mounted, nothing cached
      for ((i = 0; i < N; i++)); do dsec-layer materialise --format erofs "task$i@1" >/dev/null; done
      drop_file_cache "$DSEC_ROOT"/store/layers/*/layer.erofs
      ;;
    dir)
      find "$DSEC_ROOT/store/layers" -mindepth 2 -maxdepth 2 -name rootfs -exec rm -rf {} +
      ;;
  esac
  sync
  d0=$(dev_bytes)
  t0=$(now_us)
  case $mode in
    erofs) R[${mode}_proc]=$(io burst "$mode") ;;
    dir) R[${mode}_proc]=$(DSEC_LAYER_FORMAT=dir io burst "$mode") ;;
    eager) R[${mode}_proc]=$(io eager) ;;
  esac
  R[${mode}_all]=$(( ($(now_us) - t0) / 1000 ))
  sync
  R[${mode}_dev]=$(( $(dev_bytes) - d0 ))
  R[${mode}_p50]=$(q "$WORK/$mode.lat" 0.5)
  R[${mode}_p99]=$(q "$WORK/$mode.lat" 0.99)
  if [[ $mode == eager ]]; then
    crun_clean
    rm -rf "$WORK/eager"
  fi
done

# ----------------------------------------- first sandbox against a later one
# create + a first `python3 -c 'import json'` of the large image (base +
# task0): cold (nothing mounted, the images' pages dropped) and warm
# first CASE: prints the ms to the exec's answer; the create's own ms go
# to $WORK/create.CASE
first() {
  local t0 id
  t0=$(now_us)
  id=$(dsec-run create --image base:1 --layer task0@1 | jq -r .id)
  echo $(( ($(now_us) - t0) / 1000 )) >>"$WORK/create.$1"
  dsec-run exec "$id" -- python3 -c 'import json, email' >/dev/null
  echo $(( ($(now_us) - t0) / 1000 ))
  dsec-run rm --force "$id" >/dev/null
}
cold=() warm=() dcold=() dwarm=() fresh=() fwarm=()
for ((r = 0; r < COLD_N; r++)); do
  # the first sandbox ever of the images: no hot set recorded yet (the
  # burst above made one, dropped here), then a later one
  dsec-run ps --all | jq -r .id | xargs -r dsec-run rm --force >/dev/null
  dsec-reap >/dev/null
  rm -f "$DSEC_ROOT"/store/layers/*/erofs.hot
  drop_file_cache "$DSEC_ROOT"/store/layers/*/layer.erofs
  fresh+=("$(first fresh)")
  keep=$(dsec-run create --image base:1 --layer task0@1 | jq -r .id)
  fwarm+=("$(first fwarm)")
  dsec-run rm --force "$keep" >/dev/null
  # a host whose cache is cold, the images' hot sets recorded (by the
  # run above: on a shared store, by any node)
  dsec-run ps --all | jq -r .id | xargs -r dsec-run rm --force >/dev/null
  dsec-reap >/dev/null
  drop_file_cache "$DSEC_ROOT"/store/layers/*/layer.erofs
  cold+=("$(first cold)")
  keep=$(dsec-run create --image base:1 --layer task0@1 | jq -r .id)
  warm+=("$(first warm)")
  dsec-run rm --force "$keep" >/dev/null
  # extraction: the first sandbox extracts, a later one finds the trees
  find "$DSEC_ROOT/store/layers" -mindepth 2 -maxdepth 2 -name rootfs -exec rm -rf {} +
  sync
  dcold+=("$(DSEC_LAYER_FORMAT=dir first dcold)")
  dwarm+=("$(DSEC_LAYER_FORMAT=dir first dwarm)")
done
med() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# -------------------------------------------------------------------- report
printf '\nburst: %d images x %d sandboxes; base %d MiB (python3 etc.), task layers %d MiB each; %s\n' \
  "$N" "$M" "$BASE_MB" "$TASK_MB" "$(uname -r)"
printf '%-8s %14s %14s %10s %10s %12s\n' mode "written(proc)" "written(disk)" "p50 ms" "p99 ms" "all ms"
for mode in $MODES; do
  printf '%-8s %14s %14s %10s %10s %12s\n' "$mode" "$(human_bytes "${R[${mode}_proc]}")" \
    "$(human_bytes "${R[${mode}_dev]}")" "${R[${mode}_p50]}" "${R[${mode}_p99]}" "${R[${mode}_all]}"
done
if [[ " $MODES " == *" eager "* && " $MODES " == *" erofs "* ]]; then
  awk -v a="${R[erofs_proc]}" -v b="${R[eager_proc]}" -v c="${R[erofs_dev]}" -v d="${R[eager_dev]}" \
    'BEGIN { printf("erofs/eager bytes written: %.2f%% (proc), %.2f%% (disk)\n", 100 * a / b, 100 * c / d) }'
fi
printf '\nfirst sandbox to a python3 exec, median of %d (ms): erofs cold %s, warm %s (%.2fx), the first ever (no hot set) %s, warm %s (%.2fx); extraction cold %s, warm %s (%.2fx)\n' \
  "$COLD_N" "$(med "${cold[@]}")" "$(med "${warm[@]}")" \
  "$(bc -l <<<"$(med "${cold[@]}") / $(med "${warm[@]}")")" \
  "$(med "${fresh[@]}")" "$(med "${fwarm[@]}")" \
  "$(bc -l <<<"$(med "${fresh[@]}") / $(med "${fwarm[@]}")")" \
  "$(med "${dcold[@]}")" "$(med "${dwarm[@]}")" \
  "$(bc -l <<<"$(med "${dcold[@]}") / $(med "${dwarm[@]}")")"
cmed() { mapfile -t v <"$WORK/create.$1"; med "${v[@]}"; }
printf 'the create alone (ms): erofs cold %s, warm %s (%.2fx), the first ever %s, warm %s (%.2fx)\n' \
  "$(cmed cold)" "$(cmed warm)" "$(bc -l <<<"$(cmed cold) / $(cmed warm)")" \
  "$(cmed fresh)" "$(cmed fwarm)" "$(bc -l <<<"$(cmed fresh) / $(cmed fwarm)")"
printf 'pull + convert of the base (tar.gz): %s written (proc), %s (disk), for %s uncompressed (%.2fx): blob %s, EROFS %s; %.1f s\n' \
  "$(human_bytes "${R[pull_proc]}")" "$(human_bytes "${R[pull_dev]}")" "$(human_bytes "${R[pull_unc]}")" \
  "$(bc -l <<<"${R[pull_proc]} / ${R[pull_unc]}")" "$(human_bytes "${R[pull_blob]}")" \
  "$(human_bytes "${R[pull_erofs]}")" "$(bc -l <<<"${R[pull_us]} / 1000000")"
