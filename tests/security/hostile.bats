#!/usr/bin/env bats
# Routes from a hostile sandbox (or a hostile image) to the host and to
# other sandboxes, each tried through the documented CLI and each
# blocked: host id ranges, per-user kernel limits, private directories,
# read-write mounts, socket families, core dumps, fncall calls' IPC,
# protected paths through symlinks, planted mask files, exclusive execs.
#
# Needs root (dsec-run create does), gcc with a static glibc, setpriv.

bats_require_minimum_version 1.5.0

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
load ../helpers/common
load helpers

setup_file() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  sec_setup_attack
}

teardown_file() {
  sec_teardown_file
}

setup() {
  require_root
  sec_setup
  BG=()
}

teardown() {
  local p
  for p in "${BG[@]}"; do
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  sec_teardown
}

# bg_exec OUT ARG...: dsec-run exec ARG... in the background, its answer
# in OUT.
bg_exec() {
  local out=$1
  shift
  dsec-run exec "$@" >"$out" 2>"$out.err" 3>&- &
  BG+=("$!")
}

# wait_for FILE PATTERN: up to 30 s for FILE to hold PATTERN.
wait_for() {
  for _ in $(seq 300); do
    grep -qs -- "$2" "$1" && return 0
    sleep 0.1
  done
  echo "$1 never held $2: $(cat "$1" 2>/dev/null)" >&2
  return 1
}

# as_nobody CMD...: CMD as an unprivileged host user.
as_nobody() {
  setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
}

# --- host ids ----------------------------------------------------------------

@test "each sandbox has a host id range of its own; rm frees it" {
  local a b base_a base_b n
  sb_create
  a=$SB
  sb_create
  b=$SB
  base_a=$(dsec-run inspect "$a" | jq -r .idmap.host_base)
  base_b=$(dsec-run inspect "$b" | jq -r .idmap.host_base)
  n=$(dsec-run inspect "$a" | jq -r .idmap.count)
  [ "$n" -eq 65536 ]
  [ "$base_a" -ge 65536 ]
  [ "$base_b" -ge 65536 ]
  # disjoint ranges
  [ $((base_a + n)) -le "$base_b" ] || [ $((base_b + n)) -le "$base_a" ]
  # the sandbox's root is the first id of its range, on the host
  [ "$(awk '/^Uid:/ {print $2}' "/proc/$(dsec-run inspect "$a" | jq -r .init_pid)/status")" = "$base_a" ]
  # the allocator's records name them
  grep -qx "$a" "$DSEC_ROOT"/ids/*
  grep -qx "$b" "$DSEC_ROOT"/ids/*
  run -0 dsec-run rm "$a"
  run -1 grep -qx "$a" "$DSEC_ROOT"/ids/*
  grep -qx "$b" "$DSEC_ROOT"/ids/*
}

@test "a sandbox cannot use up another sandbox's, or host root's, per-user kernel limits" {
  local hog
  sb_create
  hog=$SB
  # as many inotify instances as the first sandbox may have, held
  bg_exec "$BATS_TEST_TMPDIR/hog" --timeout=60 "$hog" -- "$ATTACK" inotify_hog 20
  for _ in $(seq 300); do
    dsec-run exec "$hog" -- test -e /tmp/inotify-held >/dev/null && break
    sleep 0.1
  done
  dsec-run exec "$hog" -- test -e /tmp/inotify-held >/dev/null
  sb_create
  attack inotify_one
  assert_blocked inotify_one
  # and host root still has its own
  run -0 --separate-stderr "$BATS_FILE_TMPDIR/attack" inotify_one
  [[ $output == "BLOCKED inotify_one: "* ]]
}

@test "dsec-reap frees the id range of a sandbox that is gone, and only that one" {
  local slot
  sb_create
  mkdir -p "$DSEC_ROOT/ids"
  # a range whose sandbox is gone (a crash), taken long ago
  echo sb-00000000deadbeef >"$DSEC_ROOT/ids/40000"
  touch -d '-5 minutes' "$DSEC_ROOT/ids/40000"
  # one being taken just now: its sandbox names it in a moment
  echo sb-00000000feedbeef >"$DSEC_ROOT/ids/40001"
  run -0 --separate-stderr dsec-reap --dry-run
  jq -e -s 'any(.[]; .what == "ids" and .id == "40000" and .action == "would remove" and .sandbox == "sb-00000000deadbeef")' <<<"$output"
  [ -e "$DSEC_ROOT/ids/40000" ]
  run -0 --separate-stderr dsec-reap
  jq -e -s 'any(.[]; .what == "ids" and .id == "40000" and .action == "removed")' <<<"$output"
  jq -e -s 'all(.[]; .what != "ids" or .id == "40000")' <<<"$output"
  [ ! -e "$DSEC_ROOT/ids/40000" ]
  [ -e "$DSEC_ROOT/ids/40001" ]
  # the live sandbox keeps its range
  slot=$(cat "$DSEC_ROOT/sandboxes/$SB/ids")
  [ "$(cat "$DSEC_ROOT/ids/$slot")" = "$SB" ]
  rm -f "$DSEC_ROOT/ids/40001"
}

# --- private directories -----------------------------------------------------

@test "root, run and store directories are private: no other user reaches a lock or a layer" {
  local layer hex
  sb_create
  [ "$(stat -c %a "$DSEC_ROOT")" = 700 ]
  [ "$(stat -c %a "$DSEC_RUN")" = 700 ]
  [ "$(stat -c %a "$DSEC_ROOT/store")" = 700 ]
  [ "$(stat -c %a "$DSEC_ROOT/sandboxes")" = 700 ]
  [ "$(stat -c %a "$DSEC_ROOT/store/locks/gc")" = 600 ]
  # what a local user tried: hang every create by holding the store's lock
  run as_nobody flock -n "$DSEC_ROOT/store/locks/gc" true
  [ "$status" -ne 0 ]
  [[ $output == *"Permission denied"* ]]
  # the layer's EROFS image (or, in the fallback, its extracted tree) and
  # this host's mount of it
  hex=$(cat "$BATS_FILE_TMPDIR/busybox.layer")
  layer=$DSEC_ROOT/store/layers/$hex/layer.erofs
  [ -e "$layer" ] || layer=$DSEC_ROOT/store/layers/$hex/rootfs/bin/busybox
  [ -e "$layer" ]
  run as_nobody stat "$layer"
  [ "$status" -ne 0 ]
  [[ $output == *"Permission denied"* ]]
  if [ -e "$DSEC_RUN/layers/$hex/mnt/bin/busybox" ]; then
    run as_nobody stat "$DSEC_RUN/layers/$hex/mnt/bin/busybox"
    [ "$status" -ne 0 ]
    [[ $output == *"Permission denied"* ]]
  fi
  run as_nobody ls "$DSEC_RUN/$SB"
  [ "$status" -ne 0 ]
  # and a sandbox still works
  assert_alive
}

# --- read-write mounts ---------------------------------------------------------

@test "a read-write mount: the sandbox writes as the directory's owner, never as root; set-id bits are refused" {
  local w=$BATS_TEST_TMPDIR/work
  mkdir -p "$w"
  echo "root's" >"$w/rootfile"
  chmod 0644 "$w/rootfile"
  chown 1000:1000 "$w"
  sb_create --mount "$w:/work"
  sb_exec sh -c 'echo new >/work/new; mkdir /work/dir; echo x >/work/dir/f'
  [ "$(stat -c %u:%g "$w/new")" = 1000:1000 ]
  [ "$(stat -c %u:%g "$w/dir")" = 1000:1000 ]
  [ "$(stat -c %u:%g "$w/dir/f")" = 1000:1000 ]
  # root's files there stay root's: not writable, not removable by chown
  run --separate-stderr dsec-run exec "$SB" -- sh -c 'echo changed >>/work/rootfile'
  [ "$(jq -r .exit_code <<<"$output")" -ne 0 ]
  [ "$(cat "$w/rootfile")" = "root's" ]
  # no setuid or setgid file of the owner's lands on the host: not by
  # chmod, nor made so by open (tar extracts a set-user-ID member so; the
  # image's busybox has no install)
  echo x >"$BATS_TEST_TMPDIR/sh"
  tar --mode=4755 -C "$BATS_TEST_TMPDIR" -cf "$w/suid.tar" sh
  for how in 'chmod 4755 /work/new' 'chmod 2755 /work/new' 'chmod u+s /work/dir/f' \
    'tar -C /work -xf /work/suid.tar'; do
    run --separate-stderr dsec-run exec "$SB" -- sh -c "$how"
    # refused: a command that did not run (126, 127) or dsec's failure
    # (124, 125) tried nothing
    case $(jq -r .exit_code <<<"$output") in
      0 | 12[4-7] | null)
        echo "'$how': $output" >&2
        return 1
        ;;
    esac
  done
  [ -z "$(find "$w" -perm /6000)" ]
  assert_event "$SB" '.type == "denied" and (.syscall | test("chmod"))'
  # the mount is nosuid: a set-user-ID root binary mounted in gains nothing
  sb_exec sh -c 'grep " /work " /proc/self/mountinfo'
  jq -e '.stdout | test("nosuid") and test("nodev")' <<<"$output"
}

@test "a read-write mount of a directory of root's is refused (exit 3); read-only it is fine" {
  local w=$BATS_TEST_TMPDIR/pub
  mkdir -p "$w"
  chmod 0777 "$w"
  run -3 --separate-stderr dsec-run create --image busybox --mount "$w:/pub"
  [[ $stderr == *"owned by root"* ]]
  chown 1000:0 "$w"
  run -3 --separate-stderr dsec-run create --image busybox --mount "$w:/pub"
  [ -z "$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
  sb_create --mount "$w:/pub:ro"
  sb_exec ls /pub
}

# --- system interfaces ----------------------------------------------------------

@test "socket families other than unix, inet, inet6 and netlink route are refused" {
  sb_create
  attack sockfam
  assert_blocked sockfam
  assert_event "$SB" '.type == "denied" and .syscall == "socket" and .errno == 97'
}

@test "no core dumps: RLIMIT_CORE is 0 and cannot be raised" {
  sb_create
  sb_exec sh -c 'grep "^Max core file size" /proc/self/limits'
  jq -e '.stdout | test("size +0 +0 ")' <<<"$output"
  run --separate-stderr dsec-run exec "$SB" -- sh -c 'ulimit -c unlimited'
  [ "$(jq -r .exit_code <<<"$output")" -ne 0 ]
}

# fncall_create: an fncall sandbox with the attack program (its root is
# read-only: the mount point comes in a layer).
fncall_create() {
  mkdir -p "$BATS_TEST_TMPDIR/opt/opt/attack"
  dsec-layer create --dir "$BATS_TEST_TMPDIR/opt" --name test/opt@1 >/dev/null
  sb_create --backend fncall --layer test/opt@1
}

@test "fncall: a call finds neither the SysV shared memory nor the /dev/shm files of an earlier one" {
  fncall_create
  run -0 --separate-stderr dsec-run exec "$SB" -- "$ATTACK" shm put
  jq -e '.stdout == "PUT\n"' <<<"$output"
  attack shm get
  assert_blocked shm
}

# --- protect and masks ----------------------------------------------------------

@test "protect: a path through a symbolic link is refused (exit 3) and nothing is left" {
  local l=$BATS_TEST_TMPDIR/layer
  mkdir -p "$l/opt/grader"
  echo answer >"$l/opt/grader/secret"
  ln -s opt/grader "$l/grader"
  dsec-layer create --dir "$l" --name test/linked@1 >/dev/null
  run -3 --separate-stderr dsec-run create --image busybox --layer test/linked@1 \
    --protect /grader/secret
  [[ $stderr == *"symbolic link /grader"* ]]
  [ -z "$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null)" ] || {
    ls "$DSEC_ROOT/sandboxes" >&2
    return 1
  }
  # the real path is protected
  sb_create --layer test/linked@1 --protect /opt/grader/secret
  run --separate-stderr dsec-run exec "$SB" -- sh -c 'echo forged >/grader/secret'
  [ "$(jq -r .exit_code <<<"$output")" -ne 0 ]
  sb_exec cat /opt/grader/secret
  jq -e '.stdout == "answer\n"' <<<"$output"
}

@test "an image whose /dev is a link or a file is refused (3): the masks never go elsewhere" {
  local l=$BATS_TEST_TMPDIR/devlink t n=0
  for t in proc tmp / file; do
    n=$((n + 1))
    rm -rf "$l"
    mkdir -p "$l"
    if [ "$t" = file ]; then
      echo not-a-directory >"$l/dev"
    else
      ln -s "$t" "$l/dev"
    fi
    dsec-layer create --dir "$l" --name "test/devlink@$n" >/dev/null
    run -3 --separate-stderr dsec-run create --image busybox \
      --layer "test/devlink@$n"
    [[ $stderr == *"/dev is not a directory"* ]]
  done
  # nothing was left running
  [ -z "$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "mask files an image plants are not the masks" {
  local l=$BATS_TEST_TMPDIR/layer i
  mkdir -p "$l/dev/.dsec" "$l/.dsec-masks"
  for i in $(seq 0 40); do
    echo planted >"$l/dev/dsec-mask-$i"
    echo planted >"$l/dev/.dsec/$i"
    echo planted >"$l/.dsec-masks/$i"
  done
  dsec-layer create --dir "$l" --name test/planted@1 >/dev/null
  sb_create --layer test/planted@1
  sb_exec sh -c 'cat /proc/kallsyms /proc/timer_list /proc/keys /proc/sched_debug; echo end'
  jq -e '.stdout == "end\n"' <<<"$output"
  assert_event "$SB" '.type == "masked" and .path == "/proc/kallsyms"'
}

# gconv_module DIR: a glibc converter module in DIR/gconv, and the
# gconv-modules file that makes it the cheapest way between UTF-8 and
# ASCII (the C locale's).  Loaded, it leaves /gconv-ran in its root.
gconv_module() {
  mkdir -p "$1/gconv"
  cat >"$1/gconv.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void ran(void)
{
  close(open("/gconv-ran", O_CREAT | O_WRONLY, 0644));
}
int gconv_init(void *step) { return 1; }
int gconv(void) { return 1; }
C
  gcc -shared -fPIC -o "$1/gconv/PLANTED.so" "$1/gconv.c"
  printf 'module %s %s PLANTED 1\n' 'UTF-8//' 'ANSI_X3.4-1968//' \
    'ANSI_X3.4-1968//' 'UTF-8//' 'INTERNAL' 'ANSI_X3.4-1968//' \
    'ANSI_X3.4-1968//' 'INTERNAL' >"$1/gconv/gconv-modules"
}

@test "a gconv module a sandbox or an image plants is not loaded by a checkpoint or an extraction" {
  # libarchive converts pax names with iconv, and glibc reads its
  # converters' configuration from the root of the moment: the
  # checkpoint's reader works chrooted in the sandbox's upper directory,
  # an extraction in the layer it unpacks
  local d=$BATS_TEST_TMPDIR/planted gc=/usr/lib/x86_64-linux-gnu/gconv
  gconv_module "$d"
  sb_create --mount "$d/gconv:/opt/gconv:ro"
  sb_exec sh -c "mkdir -p $gc && cp /opt/gconv/* $gc/ && echo x >/ünïcode-$(printf 'n%.0s' $(seq 120))"
  run -0 dsec-run checkpoint "$SB"
  sb_exec sh -c 'test -e /gconv-ran && echo ran || echo clean'
  jq -e '.stdout == "clean\n"' <<<"$output"

  mkdir -p "$d/tree$gc" "$d/tree/z"
  cp "$d/gconv/"* "$d/tree$gc/"
  echo x >"$d/tree/z/ünïcode-$(printf 'n%.0s' $(seq 120))"
  run -0 dsec-layer create --dir "$d/tree" --name test/gconv@1
  run -0 dsec-layer materialise test/gconv@1
  local path
  path=$(jq -r .path <<<"$output")
  [ -f "$path/z/ünïcode-$(printf 'n%.0s' $(seq 120))" ]
  [ ! -e "$path/gconv-ran" ]
}

# --- exclusive execs ----------------------------------------------------------

@test "exclusive: processes an earlier exec left running cannot see, signal or reach it" {
  sb_create
  # the agent leaves a watcher: it looks for the grader's processes by
  # their command line and environment, and tries to take them over (the
  # mark is put together at run time: its own command line lacks it)
  sb_exec sh -c '
    (n=0; end=$(( $(date +%s) + 30 )); mark=GRADER; mark=$mark-MARK
     while [ "$(date +%s)" -lt "$end" ]; do
       n=$((n + 1))
       for p in /proc/[0-9]*; do
         if grep -qs "$mark" "$p/cmdline" "$p/environ"; then
           echo "${p#/proc/}" >>/tmp/found
           echo forged >"$p/fd/1" 2>/dev/null
           echo forged >"$p/fd/0" 2>/dev/null
           kill -9 "${p#/proc/}" 2>/dev/null
         fi
       done
       # renamed into place: a reader never finds it empty
       echo "$n" >/tmp/rounds.new && mv /tmp/rounds.new /tmp/rounds
     done) </dev/null >/dev/null 2>&1 &'
  run -0 --separate-stderr dsec-run exec --exclusive --env SECRET=GRADER-MARK "$SB" -- \
    sh -c 'sleep 4; echo "graded GRADER-MARK"'
  jq -e '.exit_code == 0 and .stdout == "graded GRADER-MARK\n"' <<<"$output"
  sb_exec sh -c 'cat /tmp/rounds; cat /tmp/found 2>/dev/null; true'
  # the watcher found nothing
  jq -e '(.stdout | split("\n") | length) == 2' <<<"$output"
  # while a plain exec is found, and killed, the same way: the watcher was
  # there all along
  run --separate-stderr dsec-run exec --env SECRET=GRADER-MARK "$SB" -- sh -c 'sleep 5; echo plain'
  jq -e '.exit_code == 137' <<<"$output"
}

@test "exclusive: a concurrent kill -9 -1 does not reach it, and it sees only its own processes" {
  sb_create
  # it says it runs, then waits (60 s at most) until the kill is done
  bg_exec "$BATS_TEST_TMPDIR/x" --exclusive "$SB" -- sh -c '
    touch /tmp/exclusive-up
    i=0
    while [ ! -e /tmp/killed ]; do
      i=$((i + 1))
      [ $i -lt 600 ] || exit 99
      sleep 0.1
    done
    ps -o pid,comm; echo alive'
  for _ in $(seq 300); do
    dsec-run exec "$SB" -- test -e /tmp/exclusive-up >/dev/null && break
    sleep 0.1
  done
  dsec-run exec "$SB" -- test -e /tmp/exclusive-up >/dev/null ||
    { echo "the exclusive exec did not start" >&2; false; }
  sb_exec sh -c 'kill -9 -1; touch /tmp/killed'
  wait "${BG[0]}"
  jq -e '.exit_code == 0 and (.stdout | test("alive"))' "$BATS_TEST_TMPDIR/x"
  # its process 1 is its own reaper, not the sandbox's init; the command
  # is process 2
  jq -e '.stdout | test("dsec-init") | not' "$BATS_TEST_TMPDIR/x"
  jq -e '.stdout | test("\n +1 dsec-call\n +2 sh\n")' "$BATS_TEST_TMPDIR/x"
}

@test "exclusive: no capabilities, denials recorded, protect holds, masks, timeout" {
  sb_create --protect /etc
  attack --exclusive caps
  assert_blocked caps
  attack --exclusive keyctl
  assert_blocked keyctl
  assert_event "$SB" '.type == "denied" and .syscall == "keyctl"'
  run --separate-stderr dsec-run exec --exclusive "$SB" -- sh -c 'echo x >/etc/passwd'
  [ "$(jq -r .exit_code <<<"$output")" -ne 0 ]
  attack --exclusive masked /proc/kallsyms
  assert_blocked masked
  run -124 --separate-stderr dsec-run exec --exclusive --timeout 1 "$SB" -- sleep 30
  jq -e '.timed_out == true' <<<"$output"
  assert_alive
}

@test "exclusive: fncall accepts it, a request with a wrong type is bad input" {
  fncall_create
  run -0 --separate-stderr dsec-run exec --exclusive "$SB" -- echo ok
  jq -e '.stdout == "ok\n"' <<<"$output"
  run -3 --separate-stderr dsec-run exec "$SB" --requests - <<<'{"cmd":["true"],"exclusive":"yes"}'
  jq -e '.type == "error"' <<<"$output"
}
