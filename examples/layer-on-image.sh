#!/bin/sh
# Makes a layer from a small directory, composes it on a busybox image and
# prints the environment's layers bottom to top (where each comes from,
# the reference that brought it, its digest).  No network: the image is
# built from the local busybox-static.  Uses dsec-pull, dsec-layer and jq
# from PATH.
#   examples/layer-on-image.sh
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
dsec-pull --name busybox@example "tar:$work/busybox.tar.gz" >/dev/null

# the task's files: what the sandbox sees on top of busybox
mkdir -p "$work/task/etc" "$work/task/work"
printf 'Welcome to the hello task.\n' >"$work/task/etc/motd"
printf '#!/bin/sh\necho hello from the task layer\n' >"$work/task/work/run.sh"
chmod 755 "$work/task/work/run.sh"
dsec-layer create --dir "$work/task" --name task/hello@v1 >"$work/layer.json"

dsec-layer compose busybox@example task/hello@v1 >"$work/env.json"
# the new layer must be the top one
jq -e --slurpfile layer "$work/layer.json" \
  '.layers[-1].digest == $layer[0].digest' "$work/env.json" >/dev/null
jq -er '.layers[] | "\(.from)\t\(.ref)\t\(.digest)"' "$work/env.json"
