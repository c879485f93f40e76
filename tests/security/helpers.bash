# Helpers for tests/security/*.bats: the attack binary, one store
# for the whole file, sandboxes that are always removed, host services to
# attack, and a snapshot of host state to compare at the end.
#
# Files under $BATS_FILE_TMPDIR:
#   attack, bin/attack    the attack program (bin/ is mounted at /opt/attack)
#   suid/busybox          busybox, set-user-ID root (for the --user test)
#   root/ run/            DSEC_ROOT and DSEC_RUN of every test of the file
#   all-sandboxes         every sandbox id the file created
#   busybox.layer         the digest (hex) of the image's layer
#   host-before           host state before the first attack (setup_file)
#   *.pid                 host services started by setup_file

ATTACK=/opt/attack/attack

sec_env() {
  export DSEC_ROOT="$BATS_FILE_TMPDIR/root"
  export DSEC_RUN="$BATS_FILE_TMPDIR/run"
  unset DSEC_STORE DSEC_LOG_FORMAT DSEC_DEBUG
}

# What the attacks must not change on the host.  Only global state that
# other programs running at the same time leave alone.
host_state() {
  local f
  for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/hostname \
    /proc/sys/kernel/domainname /proc/sys/kernel/core_uses_pid \
    /proc/sys/kernel/perf_event_paranoid /proc/sys/kernel/unprivileged_bpf_disabled \
    /proc/sys/kernel/kexec_load_disabled /proc/sys/vm/overcommit_memory \
    /proc/sys/kernel/printk /proc/sys/kernel/ctrl-alt-del \
    /proc/sys/kernel/sysrq; do
    [ -r "$f" ] && printf '%s=%s\n' "$f" "$(cat "$f")"
  done
  printf 'hostname=%s\n' "$(hostname)"
  # the busybox layer in the store: read-only to every sandbox.  Not its
  # erofs.hot (and its temporary file): the record of the image's pages in
  # the page cache, which a supervisor rewrites when a sandbox stops and
  # more of them were resident (dsec-layer(1)), so it changes with the
  # host's page cache, not with what a sandbox wrote
  (cd "$DSEC_ROOT/store/layers/$(cat "$BATS_FILE_TMPDIR/busybox.layer")" &&
    find . ! -name 'erofs.hot*' -print0 | LC_ALL=C sort -z |
    xargs -0 stat -c '%n %f %u %g %s' &&
    find . -type f ! -name 'erofs.hot*' -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum) |
    sha256sum | sed 's/^/layers=/' 
}

# The file's store with the busybox image, and the attack program in
# bin/ (both files of tests/security use it).
sec_setup_attack() {
  local d
  sec_env
  # the sandbox's root is an unprivileged host uid that must traverse
  # DSEC_RUN to reach its root file system: bats makes its directories 0700
  d=$BATS_FILE_TMPDIR
  while [ "$d" != / ] && [ "$d" != "${BATS_RUN_TMPDIR%/*}" ]; do
    chmod o+x "$d"
    d=${d%/*}
  done
  # the attack program, static so it runs in the busybox image
  gcc -static -O2 -o "$BATS_FILE_TMPDIR/attack" "$BATS_TEST_DIRNAME/attacks.c"
  mkdir -p "$BATS_FILE_TMPDIR/bin"
  install -m 0755 "$BATS_FILE_TMPDIR/attack" "$BATS_FILE_TMPDIR/bin/attack"
  chmod 0755 "$BATS_FILE_TMPDIR/bin"
  : >"$BATS_FILE_TMPDIR/all-sandboxes"

  dsec-pull --name busybox "tar:$(busybox_tar)" |
    jq -r '.layers[0].digest | ltrimstr("sha256:")' >"$BATS_FILE_TMPDIR/busybox.layer"
}

sec_setup_file() {
  local port
  sec_setup_attack
  mkdir -p "$BATS_FILE_TMPDIR/suid"
  chmod 0755 "$BATS_FILE_TMPDIR/suid"
  install -m 04755 -o root -g root /bin/busybox "$BATS_FILE_TMPDIR/suid/busybox"

  # a web server on the host's loopback; the sandbox must not reach it
  mkdir -p "$BATS_FILE_TMPDIR/www"
  echo "host secret" >"$BATS_FILE_TMPDIR/www/secret.txt"
  python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$BATS_FILE_TMPDIR/www" \
    >"$BATS_FILE_TMPDIR/http.log" 2>&1 </dev/null 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/http.pid"
  port=
  for _ in $(seq 100); do
    port=$(sed -n 's/^Serving HTTP on .* port \([0-9][0-9]*\).*/\1/p' "$BATS_FILE_TMPDIR/http.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "the host web server did not start" >&2; return 1; }
  echo "$port" >"$BATS_FILE_TMPDIR/http.port"
  # an abstract unix socket: abstract names belong to the network namespace
  echo "dsec-sec-$$" >"$BATS_FILE_TMPDIR/abstract.name"
  python3 -u -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[1])
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"host secret\n")
    c.close()
' "$(cat "$BATS_FILE_TMPDIR/abstract.name")" \
    >"$BATS_FILE_TMPDIR/abstract.log" 2>&1 </dev/null 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/abstract.pid"
  for _ in $(seq 100); do
    grep -qs listening "$BATS_FILE_TMPDIR/abstract.log" && break
    sleep 0.1
  done
  grep -qs listening "$BATS_FILE_TMPDIR/abstract.log" ||
    { echo "the abstract socket's server did not start" >&2; return 1; }
}

sec_teardown_file() {
  local f pid id
  sec_env
  # whatever a test left (it should have removed its own)
  while read -r id; do
    [ -n "$id" ] && dsec-run rm --force "$id" >/dev/null 2>&1
  done <"$BATS_FILE_TMPDIR/all-sandboxes"
  for f in http abstract; do
    pid=$(cat "$BATS_FILE_TMPDIR/$f.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # the host's mounts of layers, dsec-reap's to undo
  layer_mounts_clean
}

sec_setup() {
  sec_env
  : >"$BATS_TEST_TMPDIR/sandboxes"
}

# Removes the test's sandboxes, then fails if any left a cgroup or a
# supervisor behind.
sec_teardown() {
  local id left=0 d
  while read -r id; do
    [ -n "$id" ] || continue
    dsec-run rm --force "$id" >/dev/null || left=1
  done <"$BATS_TEST_TMPDIR/sandboxes"
  while read -r id; do
    [ -n "$id" ] || continue
    for d in /sys/fs/cgroup/*/dsec/"$id" /sys/fs/cgroup/dsec/"$id"; do
      if [ -e "$d" ]; then
        echo "cgroup left behind: $d" >&2
        left=1
      fi
    done
    if [ -e "$DSEC_ROOT/sandboxes/$id" ] || [ -e "$DSEC_RUN/$id" ]; then
      echo "files of $id left behind" >&2
      left=1
    fi
  done <"$BATS_TEST_TMPDIR/sandboxes"
  return "$left"
}

# sb_create [CREATE OPTION]...: a sandbox of image $SB_IMAGE (busybox)
# with the attack program at /opt/attack; its id in $SB.
sb_create() {
  local out
  out=$(dsec-run create --image "${SB_IMAGE:-busybox}" \
    --mount "$BATS_FILE_TMPDIR/bin:/opt/attack:ro" "$@") || {
    echo "dsec-run create failed: $out" >&2
    return 1
  }
  SB=$(jq -r .id <<<"$out")
  echo "$SB" >>"$BATS_TEST_TMPDIR/sandboxes"
  echo "$SB" >>"$BATS_FILE_TMPDIR/all-sandboxes"
}

# attack [--EXEC-OPTION=VALUE]... NAME [ARG]...: runs the attack program
# in $SB.  Sets $status, $output (the exec result), $verdict (the
# program's verdict line) and $details (its stderr).
attack() {
  local opts=(--timeout=60)
  while [[ ${1-} == --* ]]; do
    opts+=("$1")
    shift
  done
  run --separate-stderr dsec-run exec "${opts[@]}" "$SB" -- "$ATTACK" "$@"
  verdict=$(jq -r '.stdout // "" | split("\n")[0]' <<<"$output" 2>/dev/null)
  details=$(jq -r '.stderr // ""' <<<"$output" 2>/dev/null)
}

# assert_blocked NAME: the last attack printed "BLOCKED NAME: ..." and
# exited 0; otherwise shows what got through.
assert_blocked() {
  if [ "$status" -eq 0 ] && [[ $verdict == "BLOCKED $1: "* ]]; then
    return 0
  fi
  {
    echo "attack $1 NOT blocked (exit $status): ${verdict:-no verdict}"
    echo "attack details:"
    echo "$details"
    echo "exec result: $output"
    echo "dsec-run stderr: ${stderr-}"
  } >&2
  return 1
}

# sb_exec CMD...: runs CMD in $SB; fails unless it exits 0.  $output is
# the exec result.
sb_exec() {
  run --separate-stderr dsec-run exec --timeout=30 "$SB" -- "$@"
  if [ "$status" -ne 0 ]; then
    echo "exec $* failed (exit $status): $output ${stderr-}" >&2
    return 1
  fi
}

# assert_alive: the sandbox still runs commands.
assert_alive() {
  sb_exec echo alive
  jq -e '.stdout == "alive\n" and .exit_code == 0' <<<"$output" >/dev/null || {
    echo "the sandbox no longer runs commands: $output" >&2
    return 1
  }
}

# assert_event ID FILTER: an event of sandbox ID satisfies the jq FILTER.
assert_event() {
  local events
  events=$(dsec-run events "$1")
  jq -e -s "any(.[]; $2)" <<<"$events" >/dev/null || {
    echo "no event matching '$2' in: $events" >&2
    return 1
  }
}

# The sandbox's record from inspect.
sb_inspect() {
  dsec-run inspect "$SB"
}
