#!/bin/sh
# The Python rollout example end to end: a trainer that dies mid-rollout
# and, started again, gets its commands' results replayed from the
# trajectory instead of running them twice.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "rollout-python: needs root (dsec-run create)" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export DSEC_ROOT="$tmp/root" DSEC_RUN="$tmp/run" DSEC_STORE="$tmp/root/store"
"$here/mkrootfs-busybox.sh" "$tmp/busybox.tar.gz"
dsec-pull --name busybox:rollout "tar:$tmp/busybox.tar.gz" >/dev/null

python3 "$here/python/rollout.py" busybox:rollout >"$tmp/first"
id=$(sed -n 's/.*"type": "sandbox", "id": "\([^"]*\)".*/\1/p' "$tmp/first")
trap 'dsec-run rm --force "$id" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
python3 "$here/python/rollout.py" busybox:rollout --resume "$id" >"$tmp/second"
cat "$tmp/first" "$tmp/second"

# the re-sent steps were replayed, with the first life's outputs
jq -s -e '[.[] | select(.type == "step")] | (.[3:] | all(.replayed))' \
  "$tmp/first" "$tmp/second" >/dev/null
jq -s -e '[.[] | select(.type == "step")] | .[0:3] | map(.stdout)' "$tmp/first" \
  >"$tmp/a"
jq -s -e '[.[] | select(.type == "step")] | .[0:3] | map(.stdout)' "$tmp/second" \
  >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b"
# and nothing ran twice: the counter is 1
jq -s -e '.[] | select(.type == "count") | .stdout == "1\n"' "$tmp/second" >/dev/null
echo "rollout-python: replayed, nothing ran twice"
