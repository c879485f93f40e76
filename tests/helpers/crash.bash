# Helpers of the crash tests (tests/crash.bats, tests/crash-serve.bats):
# see the top of crash.bats for what a test does and checks.  Load after
# helpers/run (sb_pids is replaced here).  A file may redefine the hooks
# crash_exec, crash_restart and crash_quiesce (below) to drive the
# operations some other way (crash-serve.bats: through dsec-run serve).

# crash_setup_file: the store every crash starts from, busybox:1 (with
# its EROFS image), and what the pulls and the layer create import.
crash_setup_file() {
  local d="$BATS_FILE_TMPDIR"
  busybox_tar >/dev/null
  run_file_setup
  DSEC_ROOT="$d/pristine" DSEC_RUN="$d/pristine-run" \
    dsec-pull --name busybox:1 "tar:$(busybox_tar)" >/dev/null
  rm -rf "$d/pristine-run"
  mkdir -p "$d/tree/sub"
  echo one >"$d/tree/a"
  echo two >"$d/tree/sub/b"
  tar -C "$d/tree" -czf "$d/tree.tar.gz" .
  python3 "$BATS_TEST_DIRNAME/helpers/mkoci.py" "$d/oci" --tag v1 >/dev/null
}

crash_setup() {
  common_setup
  require_root
  PATH="$BATS_FILE_TMPDIR/bin:$PATH"
  SB_IDS="$BATS_TEST_TMPDIR/sandbox-ids"
  : >"$SB_IDS"
  BG_PIDS=()
  unset DSEC_CRASH_AT DSEC_CRASH_LIST
}

crash_teardown() {
  unset DSEC_CRASH_AT DSEC_CRASH_LIST
  sb_teardown
}

# The hooks.  crash_exec ID SEQ CMD: execs `sh -c CMD` at SEQ in ID,
# printing the result record.  crash_restart: after a kill, before the
# checks (the serve tests start a new serve there).  crash_quiesce: once
# the checks through the operations' own channel are done, before the
# sandboxes are removed and the store reaped (the serve tests end their
# serve there: it is a process of the run).
crash_exec() { dsec-run exec --seq "$2" "$1" -- sh -c "$3"; }
crash_restart() { :; }
crash_quiesce() { :; }

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

# The preparations and operations are each file's (prep_X AT, op_Y),
# but for these.  A preparation runs under the crash points too (a
# supervisor it starts keeps its environment); a sandbox's id is in
# $IT/id, the answer of its exec of seq 1 in $IT/answer.
prep_none() { :; }

CMD1='echo one >>/f; cat /f'
CMD2='echo two >>/f; cat /f'

sb_id() { cat "$IT/id"; }

# rm_waited CMD...: runs CMD, an rm; when it succeeds, waits (10 s at
# most) for the store's supervisors that ran before it to exit: once rm
# has its answer a supervisor still notes its images' hot set, crash
# points that are the operation's (the points counted after it, and a
# point killed at, must all have been reached when it returns)
rm_waited() {
  local pids st=0 n p
  pids=$(cat "$DSEC_ROOT"/sandboxes/*/state.json 2>/dev/null |
    jq -r '.supervisor_pid // empty' 2>/dev/null)
  "$@" || st=$?
  ((st == 0)) || return "$st"
  for p in $pids; do
    for ((n = 0; n < 200; n++)); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.05
    done
  done
  return 0
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
  res=$(crash_exec "$id" "$seq" "$cmd") || {
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

# netns_note: adds to $IT/netns the network namespaces (net:[INODE])
# that this run's processes are in or hold open: those in its sandboxes'
# cgroups and its dsec processes (supervisors, inits, dsec-run), but for
# the host's own (this shell's).
netns_note() {
  local host p d
  host=$(readlink /proc/self/ns/net)
  sb_track
  {
    sb_pids
    for d in $(sb_cgroups); do
      cat "$d/cgroup.procs"
      find "$d" -mindepth 2 -name cgroup.procs -exec cat {} +
    done 2>/dev/null
  } | sort -u | while read -r p; do
    readlink "/proc/$p/ns/net"
    find "/proc/$p/fd" -lname 'net:\[*' -printf '%l\n'
  done 2>/dev/null | { grep -e '^net:\[' || true; } |
    { grep -vxF -e "$host" || true; } >>"$IT/netns"
  sort -u -o "$IT/netns" "$IT/netns"
}

# netns_left: the network namespaces netns_note saw that are still
# alive: a process of this run (its environment names DSEC_ROOT, or it
# is in a cgroup of its sandboxes) in one or holding one open, or one
# mounted under DSEC_ROOT, DSEC_RUN or /run/netns (an `ip netns` name)
# with a sandbox's id.  (A namespace's inode number is used again once
# it is gone: another's, on this host, is not this run's.)
netns_left() {
  local f ns p ids mp
  [ -s "$IT/netns" ] || return 0
  ids=$(sort -u "$SB_IDS" | paste -sd '|')
  find /proc/[0-9]*/ns/net /proc/[0-9]*/task/[0-9]*/ns/net /proc/[0-9]*/fd \
    -lname 'net:\[*' -printf '%p %l\n' 2>/dev/null |
    while read -r f ns; do
      grep -qxF -e "$ns" "$IT/netns" || continue
      p=${f#/proc/}
      p=${p%%/*}
      if grep -qxzF -e "DSEC_ROOT=$DSEC_ROOT" "/proc/$p/environ" 2>/dev/null ||
        { [ -n "$ids" ] &&
          grep -qE -e "/dsec/($ids)(/|\$)" "/proc/$p/cgroup" 2>/dev/null; }; then
        echo "$ns: $f ($(cat "/proc/$p/comm" 2>/dev/null))"
      fi
    done
  grep -e ' - nsfs ' /proc/self/mountinfo | awk '{ print $4, $5 }' |
    while read -r ns mp; do
      grep -qxF -e "$ns" "$IT/netns" || continue
      case $mp in
        "$DSEC_ROOT"/* | "$DSEC_RUN"/* | /run/netns/*sb-*)
          echo "$ns: mounted on $mp"
          ;;
      esac
    done
}

# nothing_left: no process, cgroup, mount, loop device, network
# namespace or temporary file of this run.
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
  left=$(netns_left)
  [ -z "$left" ] || { echo "network namespaces left: $left" >&2; return 1; }
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

# answer_kept OP STATUS ID: what OP answered ($IT/out, STATUS 0) holds
# after the kill: a created or forked sandbox is listed, a removed one is
# not, an answered checkpoint is in the store and in the trajectory.
answer_kept() {
  local op=$1 status=$2 id=$3 sb d
  [ "$status" -eq 0 ] || return 0
  case $op in
    op_create* | op_fork)
      for sb in $(jq -r 'select(.type == "sandbox") | .id' "$IT/out"); do
        [ -n "$(sb_state "$sb")" ] || {
          echo "$sb, answered, is not listed: $(cat "$IT/out")" >&2
          return 1
        }
      done
      ;;
    op_rm)
      if [ -n "$(sb_state "$id")" ] || [ -e "$DSEC_ROOT/sandboxes/$id" ]; then
        echo "$id, answered removed, is $(sb_state "$id")" >&2
        return 1
      fi
      ;;
    op_checkpoint)
      d=$(jq -r .layer.digest "$IT/out")
      dsec-layer inspect "$d" >/dev/null || {
        echo "checkpoint $d, answered, is not in the store" >&2
        return 1
      }
      jq -e -s --arg d "$d" 'any(.[]; .type == "checkpoint" and .layer == $d)' \
        "$DSEC_ROOT/sandboxes/$id/trajectory.jsonl" >/dev/null || {
        echo "checkpoint $d, answered, is not in the trajectory" >&2
        return 1
      }
      ;;
  esac
}

# after_crash OP PREP WHAT STATUS: the checks (see the top of the file);
# WHAT names the crash in messages.
after_crash() {
  local op=$1 prep=$2 what=$3 status=$4 out="$IT/out" err="$IT/err" id=
  local st ids
  crash_restart || { echo "$what" >&2; return 1; }
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
  answer_kept "$op" "$status" "$id" || { echo "$what" >&2; return 1; }
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
  netns_note
  # a resume cut short by a kill is resumed by the next one: nothing was
  # lost (a kill of a booting supervisor leaves it released, as does one
  # of the acting resume)
  if [ "$op" = op_resume ] && ! sb_running "$id"; then
    echo "$what: $id is $(sb_state "$id") after the rerun: $(cat "$IT/err2")" >&2
    return 1
  fi
  # a suspend --release that was answered left the sandbox released: it
  # resumes, with its trajectory
  if [ "$op" = op_suspend ] && [ "$status" -eq 0 ]; then
    st=$(sb_state "$id")
    [ "$st" = suspended ] || {
      echo "$what: $id, answered released, is $st: $(dsec-run inspect "$id")" >&2
      return 1
    }
    op_resume >"$IT/resumed" 2>&1 || {
      echo "$what: $id, answered released, does not resume: $(cat "$IT/resumed")" >&2
      return 1
    }
    settle || { echo "$what" >&2; return 1; }
    replays "$id" 1 "$CMD1" "$(jq -c .stdout "$IT/answer")" || {
      echo "$what: after the resume" >&2
      return 1
    }
  fi
  # what the crash left is unseen
  dsec-layer verify >"$IT/verify" 2>/dev/null || true
  leftovers_only <"$IT/verify" || {
    echo "$what: the store is damaged: $(cat "$IT/verify")" >&2
    return 1
  }
  crash_quiesce || { echo "$what" >&2; return 1; }
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
  # their files are removed after rm has answered
  removals_done || { echo "$what: a remover did not end" >&2; return 1; }
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
  netns_note
  crashing "" "$op" >"$IT/out" || { echo "$op failed uncrashed" >&2; return 1; }
  netns_note
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
    netns_note
    st=0
    crashing "$line#$k" "$op" >"$IT/out" 2>"$IT/err" || st=$?
    netns_note
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

