# Helpers for tests/dsec-run.bats: a store holding busybox:1, sandboxes
# created through dsec-run, and the cleanup every test must do.  The
# cgroup tree (/sys/fs/cgroup/*/dsec/) is shared with other users, so the
# cleanup only ever touches this test's sandboxes: those listed under its
# DSEC_ROOT, and processes whose environment names its DSEC_ROOT.

# run_file_setup: a directory for the file's DSEC_RUNs, outside
# BATS_RUN_TMPDIR: bats makes that 0700, and the sandbox's root (an
# unprivileged host uid) must traverse every directory above its root
# file system.
# The programs are copied first, under the lock builds take, so that a
# rebuild while the file runs does not pull them from under the tests.
run_file_setup() {
  local bin="$BATS_FILE_TMPDIR/bin" p
  mkdir -p "$bin"
  for p in dsec-run dsec-vm dsec-agent dsec-pull dsec-layer; do
    if command -v flock >/dev/null; then
      flock /tmp/dsec-make.lock cp "$DSEC_BUILDDIR/$p" "$bin/$p"
    else
      cp "$DSEC_BUILDDIR/$p" "$bin/$p"
    fi
    # (dsec-agent runs only as a guest's PID 1)
    [ "$p" = dsec-agent ] || "$bin/$p" --version >/dev/null
  done
  PATH="$bin:$PATH"
  export PATH
  DSEC_FILE_RUN=$(mktemp -d "${TMPDIR:-/tmp}/dsec-run-bats.XXXXXX")
  chmod 711 "$DSEC_FILE_RUN"
  export DSEC_FILE_RUN
}

# run_setup: busybox:1 pulled into the test's store (after common_setup),
# and the test's DSEC_RUN.
run_setup() {
  SB_IDS="$BATS_TEST_TMPDIR/sandbox-ids"
  : >"$SB_IDS"
  BG_PIDS=()
  DSEC_RUN="$DSEC_FILE_RUN/$BATS_TEST_NUMBER"
  mkdir -m 711 "$DSEC_RUN"
  export DSEC_RUN
  dsec-pull --name busybox:1 "tar:$(busybox_tar)" >/dev/null
}

# bg CMD...: runs CMD in the background (fd 3 closed, so bats does not wait
# for it), remembering its pid for sb_teardown; $BG is the pid.
bg() {
  "$@" 3>&- &
  BG=$!
  BG_PIDS+=("$BG")
}

# sb_track: remembers every sandbox of this store, listed or only on disk.
sb_track() {
  {
    ls "$DSEC_ROOT/sandboxes" 2>/dev/null | grep '^sb-' || true
    dsec-run ps --all 2>/dev/null | jq -r '.id' 2>/dev/null || true
  } >>"$SB_IDS"
  sort -u -o "$SB_IDS" "$SB_IDS"
}

# sb_create [CREATE OPTION]...: creates a busybox sandbox and prints its id.
sb_create() {
  local rec
  rec=$(dsec-run create --image busybox:1 "$@") || return
  jq -r '.id' <<<"$rec" | tee -a "$SB_IDS"
}

# sb_pids [ENV]: pids of the dsec processes (supervisors, inits, dsec-run
# clients) whose environment holds the line ENV (default: this test's
# DSEC_ROOT=...; a trailing * matches a prefix).  Zombies are left out:
# their environ cannot be read.
sb_pids() {
  local want=${1:-DSEC_ROOT=$DSEC_ROOT} p comm
  for p in /proc/[0-9]*; do
    read -r comm 2>/dev/null <"$p/comm" || continue
    case $comm in
      dsec-supervise | dsec-init | dsec-run | dsec-vm | qemu-system-x86) ;;
      *) continue ;;
    esac
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | env_has "$want"; then
      echo "${p#/proc/}"
    fi
  done
}

# env_has PATTERN: a line of stdin matches the glob PATTERN.
env_has() {
  local line
  while IFS= read -r line; do
    # shellcheck disable=SC2053
    [[ $line == $1 ]] && return 0
  done
  return 1
}

# sb_cgroups [IDS-FILE]...: cgroup directories left of the sandboxes
# listed in the files (default: this test's).
sb_cgroups() {
  local id
  [ $# -gt 0 ] || set -- "${SB_IDS-}"
  cat "$@" 2>/dev/null | sort -u | while read -r id; do
    [ -n "$id" ] || continue
    ls -d /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null || true
  done
}

# sb_alive PID: PID is a live process (a zombie is dead).
sb_alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "${st%% *}" != Z ] && [ "${st%% *}" != X ]
}

# sb_dead PID: PID is no live process (`! sb_alive` would not fail a test).
sb_dead() {
  if sb_alive "$1"; then
    echo "process $1 ($(cat "/proc/$1/comm" 2>/dev/null)) is alive" >&2
    return 1
  fi
}

# sb_wait_dead PID [TENTHS]: polls (10 s unless told) until PID is no live
# process.
sb_wait_dead() {
  local i
  for ((i = 0; i < ${2:-100}; i++)); do
    sb_alive "$1" || return 0
    sleep 0.1
  done
  sb_dead "$1"
}

# sb_rm_all: dsec-run rm --force every sandbox of this store.
sb_rm_all() {
  local ids rc=0
  sb_track
  ids=$(cat "$SB_IDS")
  [ -z "$ids" ] && return 0
  # shellcheck disable=SC2086
  dsec-run rm --force $ids >/dev/null || rc=$?
  return $rc
}

# sb_assert_clean: no cgroup dir and no process of this test's sandboxes.
sb_assert_clean() {
  local left procs p
  left=$(sb_cgroups)
  procs=$(sb_pids)
  [ -z "$left" ] && [ -z "$procs" ] && return 0
  [ -z "$left" ] || echo "cgroups left behind: $left" >&2
  for p in $procs; do
    echo "process left behind: $p $(cat "/proc/$p/comm" 2>/dev/null)" >&2
  done
  return 1
}

# sb_rm_cgroups DIR...: kills what is in the cgroup directories (and
# those under them) and removes them, polling (10 s) while the killed
# processes are still leaving.
sb_rm_cgroups() {
  local i d p left
  for ((i = 0; i < 100; i++)); do
    left=
    for d in "$@"; do
      [ -d "$d" ] || continue
      for p in $(cat "$d"/cgroup.procs "$d"/*/cgroup.procs 2>/dev/null); do
        kill -9 "$p" 2>/dev/null || true
      done
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [ ! -d "$d" ] || left=1
    done
    [ -n "$left" ] || return 0
    sleep 0.1
  done
  echo "cgroups that cannot be removed: $*" >&2
  return 1
}

# sb_last_resort: after a failed cleanup, keep the shared tree clean all
# the same: kill what is in this test's cgroups and its own supervisors,
# and remove the cgroup directories.  Only ever this test's.
sb_last_resort() {
  local p
  for p in $(sb_pids); do
    kill -9 "$p" 2>/dev/null || true
  done
  # shellcheck disable=SC2046
  sb_rm_cgroups $(sb_cgroups) || true
}

# sb_teardown: rm --force everything, then check nothing is left; on a
# failure, clean up by hand and fail.
sb_teardown() {
  local ok=0 p
  for p in "${BG_PIDS[@]}"; do
    kill -9 "$p" 2>/dev/null || true
  done
  [ -n "${DSEC_ROOT-}" ] || return 0
  sb_rm_all || {
    echo "teardown: dsec-run rm --force failed" >&2
    ok=1
  }
  # rm --force waits for the supervisor; give stragglers a moment
  for _ in $(seq 50); do
    [ -z "$(sb_cgroups)$(sb_pids)" ] && break
    sleep 0.1
  done
  if ! sb_assert_clean; then
    sb_last_resort
    ok=1
  fi
  # its mounts live in the supervisors' namespaces, not here, but for
  # the host's mounts of layers (dsec-reap's to undo)
  layer_mounts_clean || ok=1
  rm -rf "$DSEC_RUN"
  return $ok
}

# sb_file_teardown: whatever a test of this file left (a teardown that
# could not run to its end): processes and cgroups, then the DSEC_RUNs.
sb_file_teardown() {
  local ok=0 p d
  [ -n "${DSEC_FILE_RUN-}" ] || return 0
  p=$(sb_pids "DSEC_RUN=$DSEC_FILE_RUN/*")
  d=$(sb_cgroups "$BATS_RUN_TMPDIR"/test/*/sandbox-ids)
  if [ -n "$p$d" ]; then
    echo "left by this file: processes $p; cgroups $d" >&2
    for p in $p; do kill -9 "$p" 2>/dev/null || true; done
    # shellcheck disable=SC2086
    sb_rm_cgroups $d || true
    ok=1
  fi
  for d in "$DSEC_FILE_RUN"/*; do
    layer_mounts_clean "$d" || ok=1
  done
  rm -rf "$DSEC_FILE_RUN"
  return $ok
}

# sb_state ID: the state ps --all reports for ID (empty if not listed).
sb_state() {
  dsec-run ps --all | jq -r --arg id "$1" 'select(.id == $id) | .state'
}

# sb_wait_state ID STATE [TENTHS]: polls ps --all until ID is in STATE.
sb_wait_state() {
  local i
  for ((i = 0; i < ${3:-100}; i++)); do
    [ "$(sb_state "$1")" = "$2" ] && return 0
    sleep 0.1
  done
  echo "sandbox $1 is $(sb_state "$1"), not $2" >&2
  return 1
}

# sb_procs_in ID: the command names of the sandbox's processes, from its
# own ps (init and the ps itself included).
sb_procs_in() {
  dsec-run exec "$1" -- ps -o comm | jq -r '.stdout' | tail -n +2
}

# sb_wait_proc ID NAME [COUNT]: polls (5 s) until COUNT (default 1)
# processes called NAME run in ID.
sb_wait_proc() {
  local i
  for ((i = 0; i < 50; i++)); do
    [ "$(sb_procs_in "$1" | grep -cx "$2")" -ge "${3:-1}" ] && return 0
    sleep 0.1
  done
  echo "fewer than ${3:-1} $2 in $1: $(sb_procs_in "$1" | tr '\n' ' ')" >&2
  return 1
}

# sb_wait_no_proc ID NAME [TENTHS]: polls until no NAME runs in ID.
sb_wait_no_proc() {
  local i
  for ((i = 0; i < ${3:-50}; i++)); do
    sb_procs_in "$1" | grep -qx "$2" || return 0
    sleep 0.1
  done
  echo "$2 still runs in $1: $(sb_procs_in "$1" | tr '\n' ' ')" >&2
  return 1
}

# held DIR: DIR exists and some process holds an flock on it (opened
# without O_CREAT: flock(1) given a path would create a file there once
# it is gone).
held() {
  local fd rc=1
  exec {fd}<"$1" || return 1
  flock -n "$fd" || rc=0
  exec {fd}<&-
  return $rc
} 2>/dev/null

# until_unlocked DIR...: waits (10 s at most) until no process holds an
# flock on any DIR (a remover has ended); fails if one still does.
until_unlocked() {
  local d i
  for d in "$@"; do
    for i in $(seq 100); do
      held "$d" || break
      sleep 0.1
    done
    ! held "$d" || return 1
  done
}

# removals_done: waits until the removers of the sandboxes rm removed
# (dsec-run rm returns before their files are gone) have ended.
removals_done() {
  local d
  for d in "$DSEC_ROOT"/removing/*.tmp-* "$DSEC_RUN"/removing/*.tmp-*; do
    [ -e "$d" ] || continue
    until_unlocked "$d" || return
  done
}

# sb_gone ID: the sandbox has no directory, run dir, cgroup or name left.
sb_gone() {
  local id=$1 left
  left=$(ls -d "$DSEC_ROOT/sandboxes/$id" "$DSEC_RUN/$id" \
    /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null || true)
  [ -z "$left" ] || { echo "left of $id: $left" >&2; return 1; }
}

# cg_file ID CONTROLLER FILE: path of FILE in the sandbox's CONTROLLER
# cgroup, from inspect.
cg_file() {
  local dir
  dir=$(dsec-run inspect "$1" | jq -r --arg c "$2" '.cgroup[$c].path')
  echo "$dir/$3"
}

# out_jq [JQ-OPTION]... FILTER: $output (stdout of the last `run`)
# satisfies `jq -e`; options come first, as jq takes them.
out_jq() {
  if ! jq -e "$@" <<<"$output" >/dev/null; then
    echo "jq -e $* failed on stdout: $output" >&2
    echo "stderr: ${stderr-}" >&2
    return 1
  fi
}
