#!/bin/sh
# Imports a busybox rootfs into a throw-away store and prints the image's
# digest and its number of layers.  No network: the rootfs is built from
# the local busybox-static by mkrootfs-busybox.sh.  Uses dsec-pull and jq
# from PATH.
#   examples/import-busybox.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' HUP INT TERM

# a store of our own, whatever the caller's environment says
DSEC_ROOT=$work/root
export DSEC_ROOT
unset DSEC_STORE

"$here/mkrootfs-busybox.sh" "$work/busybox.tar.gz"
dsec-pull --name busybox@example "tar:$work/busybox.tar.gz" >"$work/image.json"
jq -er '"digest: \(.digest)", "layers: \(.layers | length)"' "$work/image.json"
