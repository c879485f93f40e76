#!/usr/bin/env bats
# Crash tests: kill -9 at every durable step of create, exec with seq,
# checkpoint, suspend --release, resume, fork, rm, pull (tar: and oci:)
# and layer create.  The programs call dsec_crash_point() at each temp
# write, fsync and rename, fork/exec and record (libcommon/crash.h); with
# DSEC_CRASH_LIST set every point reached is listed, with DSEC_CRASH_AT=N
# the process reaching point N raises SIGKILL on itself there: the acting
# program, the supervisor or a program one of them started (dsec-layer
# under a checkpoint), whichever reaches it.
#
# Each test runs its operation once to enumerate the points (after the
# same preparation, whose points come first), then once per point, each
# time from a copy of one store, killing there, and checks:
#   - every exec answered before (and the operation's own, when it was
#     answered) is in the trajectory and replays ("replayed": true);
#   - the same command run again succeeds, or fails saying why (a
#     diagnostic on stderr, a status of 1-3 or dsec's own 125), never by a
#     signal;
#   - dsec-layer verify finds no damage, only what a crash leaves unseen
#     (temporary files, a layer whose import was cut short, an extracted
#     tree without its completion marker);
#   - once the live sandboxes are removed and a minute has passed (the
#     files are dated back: the reaper leaves younger leftovers to their
#     writers), one dsec-reap leaves no process, cgroup, mount, loop
#     device, network namespace or temporary file behind, and verify is
#     clean (helpers/crash.bash: netns_note, netns_left).
# The same through dsec-run serve: crash-serve.bats.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run
load helpers/crash

setup_file() {
  crash_setup_file
}

teardown_file() {
  sb_file_teardown
}

setup() {
  crash_setup
}

teardown() {
  crash_teardown
}

# The preparations and the operations, through the command line (see
# helpers/crash.bash).
prep_sandbox() {
  local id
  id=$(crashing "$1" dsec-run create --image busybox:1 | jq -r .id) || return
  echo "$id" >"$IT/id"
  echo "$id" >>"$SB_IDS"
  crashing "$1" dsec-run exec --seq 1 "$id" -- sh -c "$CMD1" >"$IT/answer"
}

prep_released() {
  prep_sandbox "$1" || return
  crashing "$1" dsec-run suspend --release "$(cat "$IT/id")" >/dev/null
}

op_create() { dsec-run create --image busybox:1; }
op_exec() { dsec-run exec --seq 2 "$(sb_id)" -- sh -c "$CMD2"; }
op_checkpoint() { dsec-run checkpoint "$(sb_id)"; }
op_suspend() { dsec-run suspend --release "$(sb_id)"; }
op_resume() { dsec-run resume "$(sb_id)"; }
op_fork() { dsec-run fork "$(sb_id)"; }
op_rm() { rm_waited dsec-run rm "$(sb_id)"; }
op_pull_tar() {
  dsec-pull --name crash/tar:1 "tar:$BATS_FILE_TMPDIR/tree.tar.gz"
}
op_pull_oci() { dsec-pull --name crash/oci:1 "oci:$BATS_FILE_TMPDIR/oci:v1"; }
op_layer_create() {
  dsec-layer create --dir "$BATS_FILE_TMPDIR/tree" --name crash/layer@1
}


# With network "proxy" (the spec's one mode besides "none", which every
# sandbox above has): the sandbox's init is in a network namespace of its
# own, listening on its 127.0.0.1:3128 for the supervisor, which holds
# that socket and runs the proxy in threads (no process, no veth, no
# named namespace).  The preparation's sandbox has been refused by its
# proxy once (an event, a proxy thread run).
PROXY_SPEC='{"image":"busybox:1","network":{"mode":"proxy","allow":[]}}'

prep_proxy() {
  local id
  id=$(crashing "$1" dsec-run create --spec - <<<"$PROXY_SPEC" | jq -r .id) ||
    return
  echo "$id" >"$IT/id"
  echo "$id" >>"$SB_IDS"
  crashing "$1" dsec-run exec --seq 1 "$id" -- sh -c "$CMD1" >"$IT/answer" ||
    return
  crashing "$1" dsec-run exec "$id" -- sh -c \
    'wget -q -O- http://127.0.0.1:22/ 2>&1; true' | jq -e '.stdout | test("403")' \
    >/dev/null
}

op_create_proxy() { dsec-run create --spec - <<<"$PROXY_SPEC"; }

# A task world: its service (busybox's httpd) joins the agent's network
# namespace (the supervisor opens the agent's, and its init enters it);
# the agent is in proxy mode, which the service shares.
WORLD_SPEC='{"image":"busybox:1","network":{"mode":"proxy","allow":[]},
  "services":[{"name":"web","image":"busybox:1",
    "cmd":["httpd","-f","-p","8080","-h","/"],"ready":{"tcp":8080}}]}'

prep_world() {
  local id
  id=$(crashing "$1" dsec-run create --spec - <<<"$WORLD_SPEC" | jq -r .id) ||
    return
  echo "$id" >"$IT/id"
  echo "$id" >>"$SB_IDS"
  crashing "$1" dsec-run exec --seq 1 "$id" -- sh -c "$CMD1" >"$IT/answer"
}

op_create_world() { dsec-run create --spec - <<<"$WORLD_SPEC"; }

# --- tests -------------------------------------------------------------------

@test "crash: the crash points list themselves and kill where told" {
  crash_env one
  DSEC_CRASH_LIST="$POINTS" dsec-layer create --dir "$BATS_FILE_TMPDIR/tree" \
    >/dev/null
  grep -qx 'dsec-layer blob linked' "$POINTS"
  : >"$POINTS"
  run -137 env DSEC_CRASH_LIST="$POINTS" DSEC_CRASH_AT=2 \
    dsec-layer create --dir "$BATS_FILE_TMPDIR/tree"
  [ "$(wc -l <"$POINTS")" -eq 2 ]
  run -137 env DSEC_CRASH_AT='blob linked' \
    dsec-layer create --dir "$BATS_FILE_TMPDIR/tree"
  run -0 dsec-layer create --dir "$BATS_FILE_TMPDIR/tree"
}

@test "crash: create" { crash_all op_create prep_none; }
@test "crash: exec with seq" { crash_all op_exec prep_sandbox; }
@test "crash: checkpoint" { crash_all op_checkpoint prep_sandbox; }
@test "crash: suspend --release" { crash_all op_suspend prep_sandbox; }
@test "crash: resume" { crash_all op_resume prep_released; }
@test "crash: fork" { crash_all op_fork prep_sandbox; }
@test "crash: rm" { crash_all op_rm prep_sandbox; }
@test "crash: pull tar:" { crash_all op_pull_tar prep_none; }
@test "crash: pull oci:" { crash_all op_pull_oci prep_none; }
@test "crash: layer create" { crash_all op_layer_create prep_none; }
@test "crash: create with network proxy" { crash_all op_create_proxy prep_none; }
@test "crash: rm with network proxy" { crash_all op_rm prep_proxy; }
@test "crash: create a world (a service in the agent's network)" {
  crash_all op_create_world prep_none
}
@test "crash: rm a world" { crash_all op_rm prep_world; }
