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
#     device or temporary file behind, and verify is clean.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run

setup_file() {
  local d="$BATS_FILE_TMPDIR"
  busybox_tar >/dev/null
  run_file_setup
  # the store every crash starts from: busybox:1 (with its EROFS image)
  DSEC_ROOT="$d/pristine" DSEC_RUN="$d/pristine-run" \
    dsec-pull --name busybox:1 "tar:$(busybox_tar)" >/dev/null
  rm -rf "$d/pristine-run"
  # what the pulls and the layer create import
  mkdir -p "$d/tree/sub"
  echo one >"$d/tree/a"
  echo two >"$d/tree/sub/b"
  tar -C "$d/tree" -czf "$d/tree.tar.gz" .
  python3 "$BATS_TEST_DIRNAME/helpers/mkoci.py" "$d/oci" --tag v1 >/dev/null
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  PATH="$BATS_FILE_TMPDIR/bin:$PATH"
  SB_IDS="$BATS_TEST_TMPDIR/sandbox-ids"
  : >"$SB_IDS"
  BG_PIDS=()
  unset DSEC_CRASH_AT DSEC_CRASH_LIST
}

teardown() {
  unset DSEC_CRASH_AT DSEC_CRASH_LIST
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# sb_pids [ENV]: as helpers/run.bash's (the dsec processes whose
# environment has the line ENV, a trailing * matching a prefix), with one
# grep over every environment instead of a read loop per process: this
# file asks after each of its hundred crashes.
sb_pids() {
  local want=${1:-DSEC_ROOT=$DSEC_ROOT} f p comm
  local -a found
  if [[ $want == *'*' ]]; then
    mapfile -t found < <(grep -lzF -e "${want%\*}" /proc/[0-9]*/environ \
      2>/dev/null)
  else
    mapfile -t found < <(grep -lzxF -e "$want" /proc/[0-9]*/environ \
      2>/dev/null)
  fi
  for f in "${found[@]}"; do
    p=${f#/proc/}
    p=${p%/environ}
    read -r comm 2>/dev/null <"/proc/$p/comm" || continue
    case $comm in
      dsec-supervise | dsec-init | dsec-run | dsec-vm | qemu-system-x86)
        echo "$p"
        ;;
    esac
  done
}

# crash_env N: a fresh DSEC_ROOT (a copy of the pristine store) and
# DSEC_RUN for run N, and its files: $IT (the run's directory), $POINTS.
crash_env() {
  IT="$BATS_TEST_TMPDIR/$1"
  mkdir -p "$IT"
  export DSEC_ROOT="$IT/root"
  export DSEC_RUN="$DSEC_FILE_RUN/$BATS_TEST_NUMBER-$1"
  mkdir -p "$DSEC_ROOT"
  mkdir -m 711 "$DSEC_RUN"
  cp -a "$BATS_FILE_TMPDIR/pristine/store" "$DSEC_ROOT/store"
  POINTS="$IT/points"
  : >"$POINTS"
}

# crashing AT CMD...: CMD under the crash points (AT empty: listed only).
crashing() {
  DSEC_CRASH_LIST="$POINTS" DSEC_CRASH_AT="${1:-0}" "${@:2}"
}

# The preparations (run under the crash points too: a supervisor they
# start keeps its environment) and the operations.  A sandbox's id is in
# $IT/id, the answer of its exec of seq 1 in $IT/answer.
prep_none() { :; }

CMD1='echo one >>/f; cat /f'
CMD2='echo two >>/f; cat /f'

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

sb_id() { cat "$IT/id"; }

op_create() { dsec-run create --image busybox:1; }
op_exec() { dsec-run exec --seq 2 "$(sb_id)" -- sh -c "$CMD2"; }
op_checkpoint() { dsec-run checkpoint "$(sb_id)"; }
op_suspend() { dsec-run suspend --release "$(sb_id)"; }
op_resume() { dsec-run resume "$(sb_id)"; }
op_fork() { dsec-run fork "$(sb_id)"; }
op_rm() { dsec-run rm "$(sb_id)"; }
op_pull_tar() {
  dsec-pull --name crash/tar:1 "tar:$BATS_FILE_TMPDIR/tree.tar.gz"
}
op_pull_oci() { dsec-pull --name crash/oci:1 "oci:$BATS_FILE_TMPDIR/oci:v1"; }
op_layer_create() {
  dsec-layer create --dir "$BATS_FILE_TMPDIR/tree" --name crash/layer@1
}

# sb_running ID: the sandbox is listed as running.
sb_running() { [ "$(sb_state "$1")" = running ]; }

# replays ID SEQ CMD STDOUT: the trajectory of ID records SEQ with that
# stdout (a JSON string), and, the sandbox running, `sh -c CMD` at the same seq is
# answered from it.
replays() {
  local id=$1 seq=$2 cmd=$3 want=$4 traj res
  traj="$DSEC_ROOT/sandboxes/$id/trajectory.jsonl"
  jq -e -s --argjson s "$seq" --argjson o "$want" \
    'any(.[]; .type == "exec" and .seq == $s and .result.stdout == $o)' \
    "$traj" >/dev/null || {
    echo "seq $seq (answered '$want') is not in $traj: $(cat "$traj" 2>&1)" >&2
    return 1
  }
  sb_running "$id" || return 0
  res=$(dsec-run exec --seq "$seq" "$id" -- sh -c "$cmd") || {
    echo "replay of seq $seq in $id failed: $res" >&2
    return 1
  }
  jq -e --argjson o "$want" '.replayed == true and .stdout == $o' <<<"$res" \
    >/dev/null || {
    echo "seq $seq in $id did not replay: $res" >&2
    return 1
  }
}

# leftovers_only: stdin (dsec-layer verify's output) finds only what a
# crash leaves unseen.
leftovers_only() {
  jq -e -s 'map(select(.type == "finding")) |
    all(.what == "tmp" or .what == "rootfs" or
        (.what == "layer" and (.problem | test("import cut short"))))' \
    >/dev/null
}

# nothing_left: no process, cgroup, mount, loop device or temporary file
# of this run.
nothing_left() {
  local left
  left=$(sb_pids)
  [ -z "$left" ] || { echo "processes left: $left" >&2; return 1; }
  left=$(sb_cgroups)
  [ -z "$left" ] || { echo "cgroups left: $left" >&2; return 1; }
  left=$(grep -e "$DSEC_ROOT" -e "$DSEC_RUN" /proc/self/mountinfo || true)
  [ -z "$left" ] || { echo "mounts left: $left" >&2; return 1; }
  left=$(losetup -a 2>/dev/null | grep -F "$DSEC_ROOT/" || true)
  [ -z "$left" ] || { echo "loop devices left: $left" >&2; return 1; }
  left=$(find "$DSEC_ROOT" "$DSEC_RUN" \( -name '*.tmp-*' -o -name '.trash-*' \
    -o -name '.tmp-*' \) 2>/dev/null; find "$(store_dir)/tmp" -mindepth 1)
  [ -z "$left" ] || { echo "temporary files left: $left" >&2; return 1; }
}

# settle: waits (10 s at most) until no sandbox is being created: a
# supervisor told "go" before its creator was killed boots on alone.
settle() {
  local i
  for ((i = 0; i < 100; i++)); do
    dsec-run ps --all | jq -e -s 'all(.state != "creating")' >/dev/null &&
      return 0
    sleep 0.1
  done
  echo "sandboxes still creating: $(dsec-run ps --all)" >&2
  return 1
}

# after_crash OP PREP WHAT STATUS: the checks (see the top of the file);
# WHAT names the crash in messages.
after_crash() {
  local op=$1 prep=$2 what=$3 status=$4 out="$IT/out" err="$IT/err" id=
  local st ids
  settle || { echo "$what" >&2; return 1; }
  if [ "$prep" != prep_none ]; then
    id=$(sb_id)
    # the exec of seq 1 was answered before the operation began
    if [ -d "$DSEC_ROOT/sandboxes/$id" ]; then
      replays "$id" 1 "$CMD1" "$(jq -c .stdout "$IT/answer")" || {
        echo "$what" >&2
        return 1
      }
    fi
  fi
  if [ "$op" = op_exec ] && [ "$status" -eq 0 ]; then
    # answered: recorded before
    replays "$id" 2 "$CMD2" "$(jq -c .stdout "$out")" || {
      echo "$what" >&2
      return 1
    }
  fi
  # the same command again
  st=0
  "$op" >"$IT/out2" 2>"$IT/err2" || st=$?
  settle || { echo "$what" >&2; return 1; }
  if [ "$st" -ne 0 ]; then
    if [ "$st" -gt 3 ] && [ "$st" -ne 125 ] || ! [ -s "$IT/err2" ]; then
      echo "$what: the rerun failed ($st) without saying why: $(cat "$IT/err2")" >&2
      return 1
    fi
    echo "$what: rerun: $(head -c 300 "$IT/err2")" >>"$BATS_TEST_TMPDIR/reruns"
  fi
  # a resume cut short by a kill is resumed by the next one: nothing was
  # lost (a kill of a booting supervisor leaves it released, as does one
  # of the acting resume)
  if [ "$op" = op_resume ] && ! sb_running "$id"; then
    echo "$what: $id is $(sb_state "$id") after the rerun: $(cat "$IT/err2")" >&2
    return 1
  fi
  # what the crash left is unseen
  dsec-layer verify >"$IT/verify" 2>/dev/null || true
  leftovers_only <"$IT/verify" || {
    echo "$what: the store is damaged: $(cat "$IT/verify")" >&2
    return 1
  }
  # the live sandboxes go as a user removes them; the rest is the reaper's
  sb_track
  ids=$(dsec-run ps --all | jq -r 'select(.state == "running" or
    .state == "suspended") | .id')
  if [ -n "$ids" ]; then
    # shellcheck disable=SC2086
    dsec-run rm --force $ids >/dev/null || {
      echo "$what: rm --force $ids failed" >&2
      return 1
    }
  fi
  # (not into the layers' mounts, read-only)
  find "$DSEC_ROOT" "$DSEC_RUN" -xdev -exec touch -h -d '2 minutes ago' {} + \
    2>/dev/null || true
  dsec-reap >"$IT/reap" 2>"$IT/reap.err" || {
    echo "$what: dsec-reap failed: $(cat "$IT/reap.err")" >&2
    return 1
  }
  jq -e -s 'all(.action != "failed")' "$IT/reap" >/dev/null || {
    echo "$what: dsec-reap: $(cat "$IT/reap")" >&2
    return 1
  }
  dsec-layer verify >"$IT/verify2" 2>&1 || {
    echo "$what: not consistent after the reap: $(cat "$IT/verify2")" >&2
    return 1
  }
  nothing_left || {
    echo "$what: after $(cat "$IT/reap")" >&2
    return 1
  }
}

# crash_all OP PREP: enumerates OP's points after PREP, then kills at
# each one in turn (see above).
crash_all() {
  local op=$1 prep=$2 p m n k line st
  crash_env enum
  "$prep" "" || { echo "preparation failed" >&2; return 1; }
  p=$(wc -l <"$POINTS")
  crashing "" "$op" >"$IT/out" || { echo "$op failed uncrashed" >&2; return 1; }
  m=$(wc -l <"$POINTS")
  cp "$POINTS" "$BATS_TEST_TMPDIR/enumerated"
  [ "$m" -gt "$p" ] || { echo "$op reached no crash point" >&2; return 1; }
  after_crash "$op" "$prep" "$op uncrashed" 0 || return
  rm -rf "$DSEC_RUN" "$IT"
  for ((n = p + 1; n <= m; n++)); do
    # the point as its process sees it: the Kth time it reaches it (the
    # processes of a run may come in either order)
    line=$(sed -n "${n}p" "$BATS_TEST_TMPDIR/enumerated")
    k=$(head -n "$n" "$BATS_TEST_TMPDIR/enumerated" | grep -cxF -e "$line")
    crash_env "$n"
    "$prep" "$line#$k" || { echo "preparation failed at $n" >&2; return 1; }
    st=0
    crashing "$line#$k" "$op" >"$IT/out" 2>"$IT/err" || st=$?
    [ "$(grep -cxF -e "$line" "$POINTS")" -ge "$k" ] || {
      echo "point $n ($line #$k) was not reached: $(cat "$POINTS")" >&2
      return 1
    }
    after_crash "$op" "$prep" "killed at point $n ($line #$k), $op exit $st" \
      "$st" || return
    rm -rf "$DSEC_RUN" "$IT"
  done
  echo "# $op: $((m - p)) crash points: $(sed -n "$((p + 1)),${m}p" \
    "$BATS_TEST_TMPDIR/enumerated" | awk '{print $1}' | sort | uniq -c |
    awk '{printf "%s %s, ", $1, $2}')" >&3
}

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
