#!/usr/bin/env bash
# bench/layers.sh: how long materialising a layer takes, and what it writes,
# next to a plain `tar -x` of the same tarball; how long mounting it takes
# (EROFS loop mount, overlays on top); what 20 overlays on one layer write.
# A benchmark, not a test: `make check` never runs it.  Needs root.
# See bench/README for the columns.
set -euo pipefail
export LC_ALL=C

prog=layers.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

N=${BENCH_N:-5}
CACHE=${BENCH_CACHE:-/var/tmp/dsec-bench}
OVERLAYS=${BENCH_OVERLAYS:-20}
READ_FILES=${BENCH_READ_FILES:-1000}
MIN_MB=${BENCH_MIN_MB:-300}
MIRROR=${BENCH_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BULK_PKGS=${BENCH_BULK_PKGS:-python3 git gcc g++ make libc6-dev}
DROP_CACHES=${BENCH_DROP_CACHES:-1}
DEFER_RM=${BENCH_DEFER_RM:-1}
BIN=${DSEC_BIN:-$top}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $N =~ ^[1-9][0-9]*$ ]] || die "BENCH_N must be a positive integer"
[[ $OVERLAYS =~ ^[1-9][0-9]*$ ]] || die "BENCH_OVERLAYS must be a positive integer"
if [[ $(id -u) -ne 0 ]]; then
  die "needs root (loop and overlay mounts, chroot'ed extraction, debootstrap); run: sudo $0"
fi
for b in dsec-pull dsec-layer; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
for c in tar zstd mount umount losetup findmnt fincore jq mkfs.erofs; do
  command -v "$c" >/dev/null || die "missing tool: $c"
done
grep -qw erofs /proc/filesystems || modprobe erofs 2>/dev/null ||
  die "the kernel has no EROFS support"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null ||
  die "the kernel has no overlayfs support"

# ---------------------------------------------------------------- cleanup
# Everything this script mounts, loop devices it caused, and its temporary
# directories are recorded here, and undone on any exit (error, Ctrl-C).
MOUNTS=()     # mount points, in mount order
LOOPS=()      # "DEV BACKING-FILE" of loop devices made by `mount -o loop`
TMPDIRS=()

cleanup() {
  local rc=$? i dev back cur
  trap - EXIT INT TERM HUP
  set +e
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    [[ -n ${MOUNTS[i]} ]] || continue
    if mountpoint -q "${MOUNTS[i]}"; then
      umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" ||
        log "cannot unmount ${MOUNTS[i]}"
    fi
  done
  for i in "${LOOPS[@]}"; do
    dev=${i%% *} back=${i#* }
    # detach only if it still points at our image (autoclear usually did it)
    cur=$(losetup -nO BACK-FILE "$dev" 2>/dev/null | sed 's/[[:space:]]*$//')
    if [[ -n $cur && $cur == "$back"* ]]; then
      losetup -d "$dev" || log "cannot detach $dev"
    fi
  done
  for ((i = ${#TMPDIRS[@]} - 1; i >= 0; i--)); do
    # --one-file-system: never descend into something still mounted
    [[ -e ${TMPDIRS[i]} ]] && rm -rf --one-file-system "${TMPDIRS[i]}"
  done
  exit "$rc"
}
# shellcheck source=bench/traps.sh
. "$here/traps.sh"

# mount_rec MOUNTPOINT MOUNT-ARGS...: records first, so an interrupt between
# the mount and the bookkeeping still unmounts it
mount_rec() {
  local mp=$1
  shift
  MOUNTS+=("$mp")
  mount "$@" "$mp"
}

umount_rec() {
  local mp=$1 i
  umount "$mp"
  for i in "${!MOUNTS[@]}"; do
    [[ ${MOUNTS[i]} == "$mp" ]] && MOUNTS[i]=
  done
  return 0
}

# ---------------------------------------------------------------- measuring
now_us() { local t=${EPOCHREALTIME/./}; echo "$t"; }

DEV_STAT=
dev_sectors() {
  if [[ -n $DEV_STAT ]]; then
    awk '{ print $7 }' "$DEV_STAT"
  else
    echo 0
  fi
}

# Runs "$@" (stdout discarded) in a child bash and prints the net data bytes
# the command and every process it started dirtied: write_bytes minus
# cancelled_write_bytes of /proc/<bash>/io, which includes all reaped
# descendants.  Data only: no journal, no inode tables.
run_io() {
  bash -c '"$@" >/dev/null || exit
    while read -r k v; do
      case $k in write_bytes:) w=$v ;; cancelled_write_bytes:) c=$v ;; esac
    done </proc/$$/io
    echo $((w - c))' _ "$@"
}

# sample NAME CMD...: one timed run, with a sync before (nothing of earlier
# runs is left to write back) and after (the run's own writes reach the
# device).  Records "us proc_bytes dev_bytes" in $RES/NAME.
sample() {
  local name=$1 t0 t1 s0 s1 wb
  shift
  sync
  s0=$(dev_sectors)
  t0=$(now_us)
  wb=$(run_io "$@")
  t1=$(now_us)
  sync
  s1=$(dev_sectors)
  echo "$((t1 - t0)) $wb $(((s1 - s0) * 512))" >>"$RES/$name"
}

# time_only NAME CMD...: wall time of CMD alone, no syncs around it
time_only() {
  local name=$1 t0 t1
  shift
  t0=$(now_us)
  "$@"
  t1=$(now_us)
  echo "$((t1 - t0)) - -" >>"$RES/$name"
}

# quantile NAME COLUMN Q: nearest-rank quantile of one column of $RES/NAME
quantile() {
  local col=$2 q=$3
  awk -v c="$col" '$c != "-" { print $c }' "$RES/$1" | sort -n |
    awk -v q="$q" '{ v[NR] = $1 } END {
      if (NR == 0) { print "-"; exit }
      r = int(q * NR); if (r < q * NR) r++; if (r < 1) r = 1; print v[r] }'
}

human_bytes() {
  local b=$1
  [[ $b == - ]] && { echo -; return; }
  awk -v b="$b" 'BEGIN {
    split("B KiB MiB GiB TiB", u); i = 1
    if (b < 0) { s = "-"; b = -b } else s = ""
    while (b >= 1024 && i < 5) { b /= 1024; i++ }
    printf(i == 1 ? "%s%d %s" : "%s%.1f %s", s, b, u[i]) }'
}

human_time() {
  local us=$1
  [[ $us == - ]] && { echo -; return; }
  awk -v u="$us" 'BEGIN {
    if (u >= 1e6) printf("%.2f s", u / 1e6)
    else if (u >= 1e3) printf("%.1f ms", u / 1e3)
    else printf("%d us", u) }'
}

# --------------------------------------------------------------- the rootfs
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
TARBALL=$CACHE/$SUITE-minbase.tar.zst

prepare_tarball() {
  local work rootfs mb bulk=
  if [[ -s $TARBALL && -s $TARBALL.info ]]; then
    log "using the cached rootfs tarball $TARBALL"
    return
  fi
  if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    apt-get install -y debootstrap >/dev/null ||
      { apt-get update >/dev/null && apt-get install -y debootstrap >/dev/null; }
  fi
  work=$(mktemp -d "$CACHE/prepare.XXXXXX")
  TMPDIRS+=("$work")
  rootfs=$work/rootfs
  log "debootstrap --variant=minbase $SUITE from $MIRROR (a few minutes)"
  if ! debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" \
    >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    die "debootstrap failed"
  fi
  mb=$(du -sxm "$rootfs" | cut -f1)
  log "minbase rootfs: $mb MiB"
  if ((mb < MIN_MB)); then
    # bulk of the kind an agent's image carries: an interpreter, a toolchain
    log "under $MIN_MB MiB: installing $BULK_PKGS in it"
    mount_rec "$rootfs/proc" -t proc proc
    chroot "$rootfs" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
      sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $BULK_PKGS && apt-get clean" \
      >>"$work/debootstrap.log" 2>&1 ||
      { tail -n 20 "$work/debootstrap.log" >&2; die "apt-get install in the rootfs failed"; }
    umount_rec "$rootfs/proc"
    bulk="minbase + $BULK_PKGS"
    rm -rf "$rootfs"/var/lib/apt/lists/*
    mb=$(du -sxm "$rootfs" | cut -f1)
    log "rootfs with $BULK_PKGS: $mb MiB"
  fi
  # numeric owners; no device nodes (dsec refuses them in a layer)
  log "packing $TARBALL"
  tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' \
    --exclude='./sys/*' -cf - . | zstd -q -T0 -3 -o "$TARBALL.tmp"
  local files; files=$(find "$rootfs" -xdev -type f | wc -l)
  printf 'rootfs_mib=%s\nfiles=%s\npackages=%s\n' "$mb" "$files" "$bulk" \
    >"$TARBALL.info"
  mv "$TARBALL.tmp" "$TARBALL"
  rm -rf --one-file-system "$work"
}

prepare_tarball

# ------------------------------------------------------------------ setup
RUN=$(mktemp -d "$CACHE/run.XXXXXX")
TMPDIRS+=("$RUN")
RES=$RUN/results
mkdir -p "$RES"
export DSEC_ROOT=$RUN/dsec
unset DSEC_STORE DSEC_RUN DSEC_DEBUG DSEC_LOG_FORMAT

majmin=$(stat -c '%Hd:%Ld' "$RUN")
if [[ -r /sys/dev/block/$majmin/stat ]]; then
  DEV_STAT=/sys/dev/block/$majmin/stat
  DEV_NAME=$(basename "$(readlink -f "/sys/dev/block/$majmin")")
else
  DEV_NAME="none (dev $majmin has no block stat; dev column is 0)"
fi
FSTYPE=$(findmnt -nro FSTYPE -T "$RUN")

# ext4 without a journal does not reuse an inode freed in the last 60 s
# (360 s while its table block is dirty): every create walks the inode
# bitmap past the trees the previous run deleted (fs/ext4/ialloc.c,
# recently_deleted()).  Back to back, that scan dominates both tar and dsec.
# So trees are moved aside rather than deleted between runs (removed at
# exit), and where dsec itself deletes a tree (the erofs build) the run
# waits BENCH_SETTLE seconds first.
FS_NOTE=
SETTLE=${BENCH_SETTLE:-0}
if [[ $FSTYPE == ext4 && $(cat "/sys/fs/ext4/$DEV_NAME/journal_task" 2>/dev/null) == "<none>" ]]; then
  FS_NOTE=" (no journal)"
  SETTLE=${BENCH_SETTLE:-61}
fi
[[ $SETTLE =~ ^[0-9]+$ ]] || die "BENCH_SETTLE must be a number of seconds"
LAST_RM=0
settle() {
  local wait=$((LAST_RM + SETTLE - $(date +%s)))
  if ((SETTLE > 0 && wait > 0)); then
    log "waiting ${wait}s for freed inodes to become reusable (BENCH_SETTLE)"
    sleep "$wait"
  fi
}
removed() { sync; LAST_RM=$(date +%s); }

TRASH=$RUN/trash
mkdir "$TRASH"
ntrash=0
# discard PATH: out of the way for the next run, without freeing inodes
discard() {
  if [[ $DEFER_RM == 1 ]]; then
    mv "$1" "$TRASH/$((++ntrash))"
  else
    rm -rf "$1"
    removed
  fi
}

tar_bytes=$(stat -c %s "$TARBALL")
raw_bytes=$(zstd -dc "$TARBALL" | wc -c)
if [[ $DEFER_RM == 1 ]]; then
  need=$(((3 * N + 4) * raw_bytes * 11 / 10))
  avail=$(($(df -B1 --output=avail "$RUN" | tail -n 1)))
  if ((avail < need)); then
    log "only $(human_bytes "$avail") free, $(human_bytes "$need") needed to keep trees until exit: deleting between runs"
    DEFER_RM=0
  fi
fi
rootfs_mib='?' files='?' packages=
while IFS='=' read -r k v; do
  case $k in
  rootfs_mib) rootfs_mib=$v ;;
  files) files=$v ;;
  packages) packages=$v ;;
  esac
done <"$TARBALL.info"
log "tarball $(human_bytes "$tar_bytes") zstd, $(human_bytes "$raw_bytes") tar," \
  "rootfs ${rootfs_mib} MiB in $files files"

log "dsec-pull tar:$TARBALL into $DSEC_ROOT"
t0=$(now_us)
pull_json=$("$BIN/dsec-pull" --keep-setuid "tar:$TARBALL")
pull_us=$(($(now_us) - t0))
LAYER=$(jq -r '.layers[0].digest' <<<"$pull_json")
[[ $LAYER == sha256:* ]] || die "no layer digest in dsec-pull's output"
LDIR=$DSEC_ROOT/store/layers/${LAYER#sha256:}
[[ -d $LDIR ]] || die "layer directory $LDIR not found"

LAYER_BIN=$BIN/dsec-layer
# whatever was deleted just before (the debootstrap tree, a previous run's
# cleanup) would weigh on the first runs
LAST_RM=$(date +%s)

# ------------------------------------------------------- extraction cases
log "tar -x, $N runs"
for ((i = 1; i <= N; i++)); do
  d=$RUN/tar-x
  mkdir "$d"
  settle
  sample tar_x tar --zstd --numeric-owner -xpf "$TARBALL" -C "$d"
  discard "$d"
done

log "tar -x + syncfs, $N runs"
for ((i = 1; i <= N; i++)); do
  d=$RUN/tar-x
  mkdir "$d"
  settle
  # shellcheck disable=SC2016
  sample tar_x_sync sh -c 'tar --zstd --numeric-owner -xpf "$1" -C "$2" && sync -f "$2"' _ "$TARBALL" "$d"
  discard "$d"
done

log "dsec-layer materialise (dir), $N runs"
for ((i = 1; i <= N; i++)); do
  [[ -e $LDIR/rootfs ]] && discard "$LDIR/rootfs"
  settle
  sample mat_dir "$LAYER_BIN" materialise "$LAYER"
  [[ -d $LDIR/rootfs ]] || die "materialise made no rootfs"
done

log "dsec-layer materialise --format erofs (extract + mkfs.erofs), $N runs"
for ((i = 1; i <= N; i++)); do
  [[ -e $LDIR/rootfs ]] && discard "$LDIR/rootfs"
  rm -f "$LDIR/layer.erofs"
  settle
  sample mat_erofs "$LAYER_BIN" materialise --format erofs "$LAYER"
  [[ -f $LDIR/layer.erofs ]] || die "materialise made no layer.erofs"
  # dsec deleted its temporary tree
  removed
done

log "dsec-layer materialise --format erofs with rootfs/ present (mkfs.erofs only), $N runs"
settle
"$LAYER_BIN" materialise "$LAYER" >/dev/null
for ((i = 1; i <= N; i++)); do
  rm -f "$LDIR/layer.erofs"
  sample mat_erofs_tree "$LAYER_BIN" materialise --format erofs "$LAYER"
done
IMG=$LDIR/layer.erofs
img_bytes=$(stat -c %s "$IMG")
tree_bytes=$(du -sxb "$LDIR/rootfs" | cut -f1)

# ------------------------------------------------------------------ mounts
EMNT=$RUN/erofs
mkdir "$EMNT"

# mount_erofs: `mount -o loop` makes an autoclear loop device; it is noted
# so that cleanup can detach it if the unmount did not
mount_erofs() {
  mount_rec "$EMNT" -t erofs -o ro,loop "$IMG"
  local dev
  dev=$(findmnt -nro SOURCE --mountpoint "$EMNT")
  [[ $dev == /dev/loop* ]] && LOOPS+=("$dev $IMG")
  return 0
}

log "mount -t erofs -o ro,loop, $N runs"
for ((i = 1; i <= N; i++)); do
  sync
  time_only erofs_mount mount_erofs
  umount_rec "$EMNT"
done

# file set read through every overlay: READ_FILES regular files spread
# evenly over the tree (relative paths, NUL-separated)
LIST=$RUN/files
(cd "$LDIR/rootfs" && find . -xdev -type f -size +0 -print0 | sort -z) >"$LIST.all"
nall=$(tr -cd '\0' <"$LIST.all" | wc -c)
awk -v RS='\0' -v ORS='\0' -v n="$nall" -v k="$READ_FILES" \
  'BEGIN { s = n / k; if (s < 1) s = 1; next_i = 0 }
   NR - 1 >= next_i { print; next_i += s }' "$LIST.all" >"$LIST"
nread=$(tr -cd '\0' <"$LIST" | wc -c)
read_bytes=$( (cd "$LDIR/rootfs" && xargs -0 stat -c %s <"$LIST") | awk '{ s += $1 } END { print s + 0 }')

read_set() { (cd "$1" && xargs -0 cat <"$LIST" >/dev/null); }

# cached bytes of the file set under DIR (fincore on the lower files)
cached_set() {
  (cd "$1" && xargs -0 fincore -bno RES <"$LIST") | awk '{ s += $1 } END { print s + 0 }'
}
meminfo_cached() { awk '$1 == "Cached:" { print $2 * 1024 }' /proc/meminfo; }

# stack LABEL LOWER: OVERLAYS overlays on LOWER, the file set read through
# each; times, page cache and what reached the disk
declare -A NOTE
stack() {
  local label=$1 lower=$2 i base s0 s1 c1 cN m1 mN i1 iN upper
  base=$RUN/ovl-$label
  mkdir "$base"
  if [[ $DROP_CACHES == 1 ]]; then
    sync
    echo 3 >/proc/sys/vm/drop_caches
  fi
  sync
  s0=$(dev_sectors)
  for ((i = 1; i <= OVERLAYS; i++)); do
    mkdir "$base/u$i" "$base/w$i" "$base/m$i"
    time_only "ovl_mount_$label" mount_rec "$base/m$i" -t overlay overlay \
      -o "lowerdir=$lower,upperdir=$base/u$i,workdir=$base/w$i"
  done
  for ((i = 1; i <= OVERLAYS; i++)); do
    if ((i == 1)); then
      time_only "ovl_read1_$label" read_set "$base/m$i"
      c1=$(cached_set "$lower")
      m1=$(meminfo_cached)
      i1=$(fincore -bno RES "$IMG")
    else
      time_only "ovl_readN_$label" read_set "$base/m$i"
    fi
  done
  cN=$(cached_set "$lower")
  mN=$(meminfo_cached)
  iN=$(fincore -bno RES "$IMG")
  sync
  s1=$(dev_sectors)
  upper=$(du -sxb "$base"/u* "$base"/w* | awk '{ s += $1 } END { print s + 0 }')
  NOTE[$label]="lower files cached: $(human_bytes "$c1") after overlay 1, $(human_bytes "$cN") after all $OVERLAYS; machine-wide page cache changed by $(human_bytes $((mN - m1))) while overlays 2..$OVERLAYS read them; uppers+workdirs (du): $(human_bytes "$upper"); device written during mount+read: $(human_bytes $(((s1 - s0) * 512)))"
  if [[ $label == erofs ]]; then
    NOTE[$label]+="; layer.erofs itself cached (the loop device reads it through the page cache, a second copy): $(human_bytes "$i1") after overlay 1, $(human_bytes "$iN") after all $OVERLAYS"
  fi
  echo "- - $(((s1 - s0) * 512))" >"$RES/ovl_stack_$label"
  echo "$upper" >"$RES/ovl_upper_$label"
  for ((i = OVERLAYS; i >= 1; i--)); do
    umount_rec "$base/m$i"
  done
}

log "$OVERLAYS overlays on the dir layer, $nread files ($(human_bytes "$read_bytes")) read through each"
stack dir "$LDIR/rootfs"

log "$OVERLAYS overlays on the erofs mount, the same files read through each"
mount_erofs
stack erofs "$EMNT"
umount_rec "$EMNT"

# ------------------------------------------------------------------ report
base_p50=$(quantile tar_x 1 0.5)
row() { # NAME LABEL
  local p50 p99 ratio wp wd
  p50=$(quantile "$1" 1 0.5)
  p99=$(quantile "$1" 1 0.99)
  ratio=$(awk -v a="$p50" -v b="$base_p50" 'BEGIN { if (a == "-") print "-"; else printf("%.2fx", a / b) }')
  wp=$(quantile "$1" 2 0.5)
  wd=$(quantile "$1" 3 0.5)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$(human_time "$p50")" \
    "$(human_time "$p99")" "$ratio" "$(human_bytes "$wp")" "$(human_bytes "$wd")"
}

{
  printf 'case\tp50\tp99\tvs tar -x\twritten (proc)\twritten (dev)\n'
  row tar_x "tar -x (zstd)"
  row tar_x_sync "tar -x (zstd) + syncfs"
  row mat_dir "materialise dir"
  row mat_erofs "materialise erofs (extract+mkfs)"
  row mat_erofs_tree "materialise erofs (rootfs/ present)"
  row erofs_mount "mount erofs ro,loop"
  row ovl_mount_dir "overlay mount on dir (x$OVERLAYS)"
  row ovl_mount_erofs "overlay mount on erofs (x$OVERLAYS)"
  row ovl_read1_dir "read set via overlay 1, dir (cold)"
  row ovl_readN_dir "read set via overlays 2..$OVERLAYS, dir"
  row ovl_read1_erofs "read set via overlay 1, erofs (cold)"
  row ovl_readN_erofs "read set via overlays 2..$OVERLAYS, erofs"
  row ovl_stack_dir "$OVERLAYS overlays on dir: mount+read"
  row ovl_stack_erofs "$OVERLAYS overlays on erofs: mount+read"
} >"$RUN/table"

echo
echo "dsec layer benchmark: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: nproc=$(nproc), kernel $(uname -r), $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf("%.0f GiB", $2 / 1048576) }' /proc/meminfo) RAM"
echo "store fs: $FSTYPE$FS_NOTE on $DEV_NAME ($CACHE); trees kept until exit: $( ((DEFER_RM)) && echo yes || echo no); settle: ${SETTLE}s"
echo "rootfs: debootstrap --variant=minbase $SUITE${packages:+ + ${packages#minbase + }}: ${rootfs_mib} MiB, $files files;" \
  "tarball $(human_bytes "$tar_bytes") zstd / $(human_bytes "$raw_bytes") tar;" \
  "rootfs/ $(human_bytes "$tree_bytes"); layer.erofs $(human_bytes "$img_bytes")"
echo "runs: N=$N per extraction/mount case (p99 = max when N < 100); dsec-pull import: $(human_time "$pull_us")"
echo
column -t -s $'\t' "$RUN/table"
echo
echo "dir:   ${NOTE[dir]}"
echo "erofs: ${NOTE[erofs]}"
echo "read set: $nread files, $(human_bytes "$read_bytes"), read with cat through each overlay"
echo "written (proc): write_bytes - cancelled_write_bytes of the command's process tree (data only)."
echo "written (dev): sectors written on $DEV_NAME between a sync before and a sync after (machine-wide, includes journal and metadata, noisy)."
