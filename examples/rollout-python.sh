#!/bin/sh
# The Python rollout example end to end (examples/python/rollout.py, on the
# SDK in python/): 64 sandboxes, a trainer that dies with requests in
# flight and, started again, gets its commands' results from the
# trajectory instead of running them twice, then cleans up.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "rollout-python: needs root (dsec-run create)" >&2; exit 77; }
tmp=$(mktemp -d)
chmod 711 "$tmp"
export DSEC_ROOT="$tmp/root" DSEC_RUN="$tmp/run" DSEC_STORE="$tmp/root/store"
# whatever happens, no sandbox of ours is left, nor this host's mounts of
# their layers (dsec-reap unmounts those no sandbox uses)
trap 'dsec-run ps --all 2>/dev/null | jq -r .id | xargs -r dsec-run rm --force >/dev/null 2>&1 || true; dsec-reap >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
"$here/mkrootfs-busybox.sh" "$tmp/busybox.tar.gz"
dsec-pull --name busybox:rollout "tar:$tmp/busybox.tar.gz" >/dev/null

python3 "$here/python/rollout.py" busybox:rollout "$tmp/state" >"$tmp/first"
python3 "$here/python/rollout.py" busybox:rollout "$tmp/state" --resume \
  >"$tmp/second"
cat "$tmp/first" "$tmp/second"
n=${ROLLOUT_SANDBOXES:-64}

# the first life answered steps 1 and 2 everywhere, and sent step 3
jq -s -e --argjson n "$n" '[.[] | select(.type == "step")] | length == 2 * $n' \
  "$tmp/first" >/dev/null
# the second life's steps 1 and 2 were replayed, with the first life's
# outputs (step 1 prints random bytes)
jq -s -e '[.[] | select(.type == "step" and .seq <= 2)] | all(.replayed)' \
  "$tmp/second" >/dev/null
jq -s -c '[.[] | select(.type == "step") | {index, seq, stdout}] | sort' \
  "$tmp/first" >"$tmp/a"
jq -s -c '[.[] | select(.type == "step" and .seq <= 2) | {index, seq, stdout}]
  | sort' "$tmp/second" >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b"
# nothing ran twice: every sandbox's log is 1, 2, 3, once each
jq -s -e --argjson n "$n" '[.[] | select(.type == "log")]
  | length == $n and all(.stdout == "1\n2\n3\n")' "$tmp/second" >/dev/null
# and the second life removed every sandbox
jq -s -e '.[] | select(.type == "done") | .left == 0' "$tmp/second" >/dev/null
[ -z "$(dsec-run ps --all)" ]
# (step 3 was replayed where the first life's request had run; those still
# running when it was sent again were waited for)
stats=$(jq -s -r '[.[] | select(.type == "step" and .seq == 3)]
  | "\(map(select(.replayed)) | length) replayed, \(map(select(.waited > 0))
     | length) waited for"' "$tmp/second")
echo "rollout-python: $n sandboxes; steps 1-2 replayed; step 3: $stats; nothing ran twice"
