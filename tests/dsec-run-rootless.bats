#!/usr/bin/env bats
# dsec-run as a user who is not root: an unprivileged user namespace, no
# cgroups unless delegated (said in limits_unavailable), no disk limits.

bats_require_minimum_version 1.5.0
load helpers/common

setup() {
  common_setup
  require_root # to switch to the test user
  command -v setpriv >/dev/null || skip "needs setpriv (util-linux)"
  [ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] ||
    skip "user namespaces are disabled here"
  # a home of its own for nobody, reachable by it
  RL=$(mktemp -d /tmp/dsec-rootless.XXXXXX)
  chmod 755 "$RL"
  cp "$(busybox_tar)" "$RL/busybox.tar.gz"
  chown -R 65534:65534 "$RL"
}

teardown() {
  [ -n "${RL:-}" ] || return 0
  local ids
  ids=$(as_nobody dsec-run ps --all 2>/dev/null | jq -r .id || true)
  # shellcheck disable=SC2086
  [ -z "$ids" ] || as_nobody dsec-run rm --force $ids >/dev/null 2>&1 || true
  rm -rf "$RL"
}

# as_nobody CMD...: runs CMD as uid/gid 65534 with dsec's directories in $RL
as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i PATH="$PATH" HOME="$RL" XDG_DATA_HOME="$RL/data" \
    XDG_RUNTIME_DIR="$RL/run" LC_ALL=C "$@"
}

@test "rootless: pull, run a command as root inside, remove" {
  run -0 --separate-stderr as_nobody dsec-pull --name bb:1 "tar:$RL/busybox.tar.gz"
  # the store is the user's, under XDG_DATA_HOME
  [ -d "$RL/data/dsec/store/blobs/sha256" ]
  run -0 --separate-stderr as_nobody dsec-run run --rm --image bb:1 -- \
    sh -c 'id -u; echo hi > /tmp/f; cat /tmp/f; cat /proc/self/uid_map'
  jq -e '.exit_code == 0' <<<"$output"
  jq -e '.stdout | startswith("0\nhi\n")' <<<"$output"
  # inside, root is the user outside: the only id mapped
  jq -e '.stdout | test("0 +65534 +1")' <<<"$output"
  run -0 --separate-stderr as_nobody dsec-run ps --all
  [ -z "$output" ]
}

@test "rootless: limits without a delegated cgroup are reported, not silently dropped" {
  run -0 --separate-stderr as_nobody dsec-pull --name bb:1 "tar:$RL/busybox.tar.gz"
  run -0 --separate-stderr as_nobody dsec-run create --image bb:1 --memory 64
  jq -e '.state == "running" and (.limits_unavailable | type == "string")' <<<"$output"
  # erofs cannot be mounted without root: the layers are directories, said
  jq -e '.layer_format == "dir" and (.erofs_unavailable | test("rootless"))' <<<"$output"
  [[ $stderr == *"not applied"* ]]
  local id
  id=$(jq -r .id <<<"$output")
  run -0 --separate-stderr as_nobody dsec-run exec "$id" -- echo still-works
  jq -e '.stdout == "still-works\n"' <<<"$output"
  run -0 --separate-stderr as_nobody dsec-run rm "$id"
  # nothing of it is left in the user's directories
  [ -z "$(ls -A "$RL/data/dsec/sandboxes")" ]
}

@test "rootless: a disk limit and another user are refused" {
  run -0 --separate-stderr as_nobody dsec-pull --name bb:1 "tar:$RL/busybox.tar.gz"
  run -1 --separate-stderr as_nobody dsec-run create --image bb:1 --disk 10
  [[ $stderr == *"disk limit needs root"* ]]
  run -3 --separate-stderr as_nobody dsec-run create --image bb:1 --user 1000:1000
  [[ $stderr == *"0:0"* ]]
}

@test "rootless: the sandbox cannot see or signal the user's other processes" {
  run -0 --separate-stderr as_nobody dsec-pull --name bb:1 "tar:$RL/busybox.tar.gz"
  as_nobody sleep 60 &
  local outside=$!
  run -0 --separate-stderr as_nobody dsec-run run --rm --image bb:1 -- \
    sh -c "ls /proc | grep -c '^[0-9]'; kill -9 $outside; echo rc=\$?"
  kill -0 "$outside" # still alive
  kill "$outside" 2>/dev/null || true
  # only the sandbox's own few processes are there (init, sh, ls, grep)
  jq -e '.stdout | split("\n")[0] | tonumber <= 5' <<<"$output"
  jq -e '.stdout | test("rc=[1-9]")' <<<"$output"
}

@test "rootless: opens of masked files are recorded, without the opener's pid" {
  # an unprivileged fanotify group (FAN_REPORT_FID, inode marks): the
  # kernel gives it no pid of other processes
  run -0 --separate-stderr as_nobody dsec-pull --name bb:1 "tar:$RL/busybox.tar.gz"
  run -0 --separate-stderr as_nobody dsec-run create --image bb:1
  local id
  id=$(jq -r .id <<<"$output")
  jq -e 'has("audit_unavailable") | not' <<<"$output"
  run -0 --separate-stderr as_nobody dsec-run exec "$id" -- cat /proc/kpagecgroup /proc/timer_list
  jq -e '.exit_code == 0 and .stdout == ""' <<<"$output"
  run -0 --separate-stderr as_nobody dsec-run events "$id"
  jq -e -s 'any(.[]; .type == "masked" and .path == "/proc/kpagecgroup" and .pid == null)
    and any(.[]; .type == "masked" and .path == "/proc/timer_list" and .first)' <<<"$output"
  run -0 --separate-stderr as_nobody dsec-run rm "$id"
}
