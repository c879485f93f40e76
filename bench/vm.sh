#!/bin/bash
# dsec-vm benchmark (not a test).  Prints one table:
#
#  - boot to first exec of a microvm and of a vm (q35), side by side with
#    the floor: a bare QEMU booting the same kernel and initramfs with a
#    trivial /init that powers off at once (no disks, no agent, no exec);
#  - suspend and resume against the VM's memory size (with 64 MiB of it
#    written in the guest, so the snapshot is not only zero pages);
#  - fork --count 2;
#  - host memory (PSS of the QEMU processes) of BENCH_VMS idle VMs after
#    each wrote and freed 128 MiB in its page cache, with free page
#    reporting on (the default) and off;
#  - host memory of BENCH_VMS vm (q35) guests that each read the same
#    96 MiB layer, its layers on virtio-blk (each guest caches its own
#    copy) and with --pmem (DAX: the guests map the host's page cache).
#
# The accelerator (kvm or tcg) is printed with the table: under TCG every
# figure is that of an emulated CPU.
#
#   sudo bench/vm.sh                 (BENCH_N=5 repetitions, BENCH_VMS=8)
#
# With BENCH_OLD=DIR (a build tree of another commit), a microvm's
# checkpoint of a small and of a 100 MiB writable layer is measured first
# with both builds, turn by turn (each with a store of its own), with the
# ratios this build / BENCH_OLD; BENCH_ONLY_COMPARE=1 stops there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench/vm.sh: needs root" >&2; exit 1; }
N=${BENCH_N:-5}
VMS=${BENCH_VMS:-8}
BIN=$(pwd)
export PATH="$BIN:$PATH"
work=$(mktemp -d /tmp/dsec-bench-vm.XXXXXX)
export DSEC_ROOT="$work/root" DSEC_RUN="$work/run" DSEC_STORE="$work/root/store"
cleanup() {
  local ids impl
  ids=$(dsec-vm ps --all 2>/dev/null | jq -r .id || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || dsec-vm rm --force $ids >/dev/null 2>&1 || true
  for impl in new old; do
    [ -d "$work/root-$impl" ] || continue
    ids=$(as "$impl" dsec-vm ps --all 2>/dev/null | jq -r .id || true)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || as "$impl" dsec-vm rm --force $ids >/dev/null 2>&1 || true
  done
  rm -rf "$work"
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
dsec-layer materialise --format erofs busybox:bench >/dev/null

. bench/lib.sh
ratio() { bc -l <<<"$1/$2" | xargs printf '%.2fx'; }

# --- checkpoint: this build against BENCH_OLD, turn by turn ---------------
if [ -n "${BENCH_OLD:-}" ]; then
  [ -x "$BENCH_OLD/dsec-vm" ] || { echo "bench/vm.sh: no dsec-vm in $BENCH_OLD" >&2; exit 1; }
  for impl in new old; do
    as "$impl" dsec-pull --name busybox:bench "tar:$work/bb.tar.gz" >/dev/null
    # the first create builds the boot artefacts: not timed
    id=$(as "$impl" dsec-vm create --image busybox:bench | jq -r .id)
    as "$impl" dsec-vm rm "$id" >/dev/null
  done
  for mb in 0 100; do
    declare -A cks=()
    for i in $(seq "$N"); do
      for impl in new old; do
        id=$(as "$impl" dsec-vm create --image busybox:bench | jq -r .id)
        if [ "$mb" -eq 0 ]; then
          as "$impl" dsec-vm exec "$id" -- sh -c 'mkdir -p /work && echo hi >/work/small && rm /bin/vi' >/dev/null
        else
          as "$impl" dsec-vm exec --timeout 600 "$id" -- dd if=/dev/urandom of=/work/blob bs=1M count="$mb" >/dev/null 2>&1
        fi
        t=$(date +%s%N); as "$impl" dsec-vm checkpoint "$id" >/dev/null; cks[$impl]+="$(us "$t") "
        as "$impl" dsec-vm rm "$id" >/dev/null
      done
    done
    what=$([ "$mb" -eq 0 ] && echo "small layer" || echo "${mb} MiB layer")
    # shellcheck disable=SC2086
    { stat "microvm checkpoint, $what: this build" ${cks[new]}; a50=$P50 a99=$P99
      stat "microvm checkpoint, $what: BENCH_OLD" ${cks[old]}; b50=$P50 b99=$P99; }
    ratio_row "  ratio this / BENCH_OLD (p50, p99)" "$a50" "$a99" "$b50" "$b99"
    unset cks
  done
  if [ "${BENCH_ONLY_COMPARE:-0}" = 1 ]; then
    echo
    echo "dsec-vm: N=$N, $(nproc) cores, host $(uname -r), BENCH_OLD=$BENCH_OLD ($(git -C "$BENCH_OLD" rev-parse --short HEAD 2>/dev/null || echo ?)), $(date -u +%FT%TZ)"
    printf '%-40s %10s %10s\n' case "p50 ms" "p99 ms"
    printf '%s\n' "${rows[@]}"
    exit 0
  fi
fi

# --- boot to first exec, and the bare-QEMU floor -------------------------
# the first create builds the kernel and initramfs cache: not timed
id=$(dsec-vm create --image busybox:bench | jq -r .id)
accel=$(dsec-vm inspect "$id" | jq -r .accelerator)
guest=$(dsec-vm inspect "$id" | jq -r .kernel)
kernel_dir=$(dirname "$(ls "$DSEC_STORE"/vm/*/vmlinux | head -1)")
dsec-vm rm "$id" >/dev/null

mkdir -p "$work/floor/bin" "$work/floor/proc"
cp /bin/busybox "$work/floor/bin/busybox"
printf '#!/bin/busybox sh\n/bin/busybox poweroff -f\n' >"$work/floor/init"
chmod +x "$work/floor/init"
(cd "$work/floor" && find . | cpio -o -H newc 2>/dev/null) >"$work/floor.cpio"
floor_boot() {
  local machine=$1 acc
  [ "$accel" = kvm ] && acc=kvm || acc=tcg
  qemu-system-x86_64 -M "$machine" -accel "$acc" -m 512 -nodefaults \
    -no-user-config -nographic -no-reboot -serial null \
    -kernel "$kernel_dir/vmlinux" -initrd "$work/floor.cpio" \
    -append "console=ttyS0 quiet panic=-1 $(
      [ "$acc" = tcg ] && echo "tsc_early_khz=$(cut -d' ' -f1 "$DSEC_RUN/tsc_khz")")" \
    >/dev/null 2>&1 </dev/null
}
for backend in microvm vm; do
  ts=() fs=()
  machine=$([ "$backend" = vm ] && echo q35 || echo microvm)
  for i in $(seq "$N"); do
    t=$(date +%s%N)
    id=$(dsec-vm create --image busybox:bench --backend "$backend" | jq -r .id)
    dsec-vm exec "$id" -- true >/dev/null
    ts+=("$(us "$t")")
    dsec-vm rm "$id" >/dev/null
    t=$(date +%s%N); floor_boot "$machine"; fs+=("$(us "$t")")
  done
  stat "$backend: create + first exec" "${ts[@]}"
  a=$P50
  stat "$backend: bare QEMU boot to /init, off" "${fs[@]}"
  b=$P50
  rows+=("$(printf '%-40s %21s' "  ratio dsec / bare QEMU (p50)" "$(ratio "$a" "$b")")")
done

# --- exec round trip ------------------------------------------------------
id=$(dsec-vm create --image busybox:bench | jq -r .id)
ts=()
for i in $(seq $((N * 10))); do
  t=$(date +%s%N); dsec-vm exec "$id" -- true >/dev/null; ts+=("$(us "$t")")
done
stat "microvm: exec true" "${ts[@]}"
dsec-vm rm "$id" >/dev/null

# --- suspend and resume against memory size -------------------------------
for mem in 256 512 1024; do
  ss=() rs=() sz=0
  for i in $(seq "$N"); do
    id=$(dsec-vm create --image busybox:bench --memory "$mem" | jq -r .id)
    dsec-vm exec "$id" -- sh -c 'head -c 64m /dev/urandom > /dev/shm/blob' >/dev/null
    t=$(date +%s%N); sz=$(dsec-vm suspend "$id" | jq -r .snapshot_bytes); ss+=("$(us "$t")")
    t=$(date +%s%N); dsec-vm resume "$id" >/dev/null; rs+=("$(us "$t")")
    dsec-vm rm "$id" >/dev/null
  done
  stat "suspend, ${mem} MiB VM ($((sz >> 20)) MiB file)" "${ss[@]}"
  stat "resume, ${mem} MiB VM" "${rs[@]}"
done

# --- fork -------------------------------------------------------------------
ts=()
for i in $(seq "$N"); do
  id=$(dsec-vm create --image busybox:bench | jq -r .id)
  t=$(date +%s%N); dsec-vm fork --count 2 "$id" >"$work/fork.out"; ts+=("$(us "$t")")
  # shellcheck disable=SC2046
  dsec-vm rm "$id" $(jq -r .id "$work/fork.out") >/dev/null
done
stat "fork --count 2 (512 MiB VM)" "${ts[@]}"

# --- host memory of idle VMs: free page reporting on and off ---------------
pss_kib() {
  local total=0 p kb
  for p in $(dsec-vm ps | jq -r .id); do
    kb=$(awk '/^Pss:/ { print $2 }' "/proc/$(dsec-vm inspect "$p" | jq -r .qemu_pid)/smaps_rollup")
    total=$((total + kb))
  done
  echo "$total"
}
mem_rows=()
for fpr in 1 0; do
  ids=()
  for i in $(seq "$VMS"); do
    ids+=("$(DSEC_VM_FREE_PAGE_REPORTING=$fpr dsec-vm create --image busybox:bench --memory 512 | jq -r .id)")
  done
  for id in "${ids[@]}"; do
    # 128 MiB into the page cache, then freed
    dsec-vm exec "$id" -- sh -c 'head -c 128m /dev/zero > /tmp/big && sync && rm /tmp/big && echo 3 > /proc/sys/vm/drop_caches' >/dev/null
  done
  sleep 5 # reporting runs every 2 s in the guest
  kib=$(pss_kib)
  mem_rows+=("$(printf '%-40s %10d %10d' "$VMS idle VMs, free page reporting $([ "$fpr" = 1 ] && echo on || echo off)" "$((kib >> 10))" "$((kib / VMS >> 10))")")
  dsec-vm rm "${ids[@]}" >/dev/null
done

# --- one layer read by every VM: virtio-blk vs virtio-pmem with DAX --------
mkdir -p "$work/data/data"
for i in $(seq 12); do head -c 8m /dev/urandom >"$work/data/data/f$i"; done
dsec-layer create --dir "$work/data" --name bench/data@1 >/dev/null
for how in blk pmem; do
  ids=()
  for i in $(seq "$VMS"); do
    ids+=("$(dsec-vm create --image busybox:bench --layer bench/data@1 --backend vm \
      --memory 512 $([ "$how" = pmem ] && echo --pmem) | jq -r .id)")
  done
  for id in "${ids[@]}"; do
    dsec-vm exec "$id" -- sh -c 'cat /data/* > /dev/null' >/dev/null
  done
  sleep 3
  kib=$(pss_kib)
  mem_rows+=("$(printf '%-40s %10d %10d' "$VMS vm guests read 96 MiB, $how" "$((kib >> 10))" "$((kib / VMS >> 10))")")
  eval "pss_$how=$kib"
  dsec-vm rm "${ids[@]}" >/dev/null
done
mem_rows+=("$(printf '%-40s %21s' "  pmem+DAX vs virtio-blk (total)" \
  "$(bc -l <<<"($pss_pmem - $pss_blk) * 100 / $pss_blk" | xargs printf '%+.1f%%')")")

echo
echo "dsec-vm: accelerator $accel, N=$N, $(nproc) cores, host $(uname -r), guest $guest, $(date -u +%FT%TZ)"
printf '%-40s %10s %10s\n' case "p50 ms" "p99 ms"
printf '%s\n' "${rows[@]}"
printf '%-40s %10s %10s\n' "host memory (PSS of QEMU)" "total MiB" "per VM"
printf '%s\n' "${mem_rows[@]}"
