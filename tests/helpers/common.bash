# Shared setup for dsec's bats files.  Every test gets its own DSEC_ROOT
# and DSEC_RUN under BATS_TEST_TMPDIR, so tests never share a store and
# leave nothing behind when bats removes the directory.

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/.." && pwd)}"
: "${DSEC_BUILDDIR:=$DSEC_SRCDIR}"
export DSEC_SRCDIR DSEC_BUILDDIR
PATH="$DSEC_BUILDDIR:$PATH"
export LC_ALL=C

# Beware: bats 1.8's `run`, given flags (-N, --separate-stderr), calls
# bats_version_lt, whose loop variable i is not local: it sets the calling
# test's $i to 2.  A loop around `run` counts with another name.

common_setup() {
  export DSEC_ROOT="$BATS_TEST_TMPDIR/root"
  export DSEC_RUN="$BATS_TEST_TMPDIR/run"
  unset DSEC_STORE DSEC_LOG_FORMAT DSEC_DEBUG
}

# A busybox rootfs tarball, built once per file (BATS_FILE_TMPDIR).
busybox_tar() {
  local out="$BATS_FILE_TMPDIR/busybox.tar.gz"
  [ -f "$out" ] || "$DSEC_SRCDIR/examples/mkrootfs-busybox.sh" "$out" >&2
  echo "$out"
}

# kernel_at_least MAJOR MINOR: whether the running kernel is that or newer
kernel_at_least() {
  local r maj min
  r=$(uname -r)
  maj=${r%%.*}
  min=${r#*.}
  min=${min%%[!0-9]*}
  ((maj > $1 || (maj == $1 && min >= $2)))
}

require_root() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
}

# The store's directory of this test.
store_dir() {
  echo "${DSEC_STORE:-$DSEC_ROOT/store}"
}

# Fails unless no temporary file is left in the store.
assert_store_clean_tmp() {
  local left
  left=$(find "$(store_dir)/tmp" -mindepth 1 2>/dev/null | head -5)
  [ -z "$left" ] || { echo "left in store tmp: $left" >&2; return 1; }
}

# layer_mounts_clean [RUN]: what dsec-reap does for this test's host:
# unmounts the layer mounts under RUN/layers (default $DSEC_RUN), then
# checks that no loop device is left on a layer of this test's store
# (once its sandboxes are gone, a layer's loop device detaches itself).
layer_mounts_clean() {
  local run=${1:-${DSEC_RUN-}} mp left i
  [ -n "$run" ] || return 0
  for mp in $(awk -v r="$run/layers" 'index($2, r) == 1 { print $2 }' \
    /proc/self/mounts | sort -r); do
    umount -l "$mp" 2>/dev/null || true
  done
  [ -n "${DSEC_ROOT-}" ] || return 0
  for i in $(seq 50); do
    left=$(losetup -a 2>/dev/null | grep -F "$(store_dir)/layers/" || true)
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "loop devices left: $left" >&2
  return 1
}
