#!/bin/sh
# Installs every build and test dependency on Debian 12, builds dsec, and
# does its main job end to end on an image made here from Debian's
# busybox-static: import it into a store, run a command in a sandbox made
# from it, and print the result.
#
#   ./bootstrap.sh            as root (or with sudo available)
#   ./bootstrap.sh --no-deps  skip the package installation
set -eu
cd "$(dirname "$0")"

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

PACKAGES="build-essential autoconf automake libtool pkg-config
  libjansson-dev libarchive-dev libzstd-dev libseccomp-dev libcap-dev
  libcurl4-openssl-dev libssl-dev clang libclang-rt-14-dev
  bats jq git erofs-utils busybox-static docker-registry skopeo
  zstd xz-utils python3 strace util-linux e2fsprogs iproute2
  slurmctld slurmd munge slurm-client cpio glusterfs-server glusterfs-client"
# dsec-vm: QEMU and a guest kernel (without their recommends: no GUI, no
# firmware blobs, no AppArmor)
VM_PACKAGES="qemu-system-x86 linux-image-amd64"

if [ "${1:-}" != "--no-deps" ]; then
  missing=
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
      missing="$missing $p"
  done
  vm_missing=
  for p in $VM_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
      vm_missing="$vm_missing $p"
  done
  if [ -n "$missing$vm_missing" ]; then
    echo "bootstrap: installing$missing$vm_missing" >&2
    $SUDO apt-get update -q
  fi
  # shellcheck disable=SC2086
  [ -z "$missing" ] ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
  # shellcheck disable=SC2086
  [ -z "$vm_missing" ] ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
      --no-install-recommends $vm_missing
fi

[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure --prefix=/usr/local --localstatedir=/var
make -j"$(nproc)"

# The demo: a busybox image built here, imported into a private store, and
# a command run in a sandbox made from it, then in a microVM (both removed
# afterwards).
demo=$(mktemp -d)
export DSEC_ROOT="${DSEC_ROOT:-$demo/root}" DSEC_RUN="${DSEC_RUN:-$demo/run}"
# the host's mounts of the demo's layers (made by the first sandbox, kept
# for the next ones) go before the directory holding them; the script's
# status is the demo's, not the cleanup's
demo_cleanup() {
  local rc=$?
  if [ "$DSEC_RUN" = "$demo/run" ] &&
     awk -v d="$demo/run/layers" '$2 == d { f = 1 } END { exit !f }' /proc/self/mounts; then
    $SUDO umount -R -l "$demo/run/layers"
  fi
  rm -rf --one-file-system "$demo"
  exit "$rc"
}
trap demo_cleanup EXIT
examples/mkrootfs-busybox.sh "$demo/busybox.tar.gz"
./dsec-pull --name busybox:demo "tar:$demo/busybox.tar.gz"
./dsec-run run --rm --image busybox:demo -- \
  sh -c 'echo "hello from $(hostname), uid $(id -u), in $(uname -s)"'
# the same image in a microVM with a kernel of its own (QEMU; KVM when it
# works here, else emulated: a few seconds)
./dsec-vm run --rm --image busybox:demo -- \
  sh -c 'echo "hello from a VM running Linux $(uname -r)"'
