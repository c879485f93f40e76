#!/usr/bin/env bats
# protect (issue #4) and Landlock, attacked from inside container and
# fncall sandboxes: every route to change a protected file fails; with the
# read-only bind mount taken away from outside, Landlock alone still keeps
# the file's content; every process is in the sandbox's Landlock domain
# and its scopes hold; ordinary writes around a protected path still work;
# the record says what Landlock enforced, or why it could not.
#
# The image is busybox with a layer (dsec-ll@1) holding /opt/attack/attack
# and /grader: answer.txt (the file the tests protect), notes.txt and sub/.
#
# Needs root (dsec-run create does), gcc with a static glibc, python3.

bats_require_minimum_version 1.5.0

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
load ../helpers/common
load helpers

setup_file() {
  local l=$BATS_FILE_TMPDIR/layer
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  sec_setup_attack
  gcc -O2 -o "$BATS_FILE_TMPDIR/nolandlock" "$BATS_TEST_DIRNAME/nolandlock.c"
  # the kernel's Landlock ABI as a process outside any sandbox sees it (0:
  # none)
  python3 -c '
import ctypes
r = ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1)
print(max(r, 0))' >"$BATS_FILE_TMPDIR/abi"
  mkdir -p "$l/opt/attack" "$l/grader/sub"
  install -m 0755 "$BATS_FILE_TMPDIR/attack" "$l/opt/attack/attack"
  echo "the answer" >"$l/grader/answer.txt"
  echo "notes" >"$l/grader/notes.txt"
  echo "kept" >"$l/grader/sub/kept.txt"
  dsec-layer create --dir "$l" --name dsec-ll@1 >/dev/null
}

teardown_file() {
  sec_teardown_file
}

setup() {
  require_root
  sec_setup
  ABI=$(cat "$BATS_FILE_TMPDIR/abi")
  : >"$BATS_TEST_TMPDIR/pids"
}

teardown() {
  local pid
  # host helpers a test started (listeners, a process in the sandbox's
  # namespaces), by pid
  while read -r pid; do
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done <"$BATS_TEST_TMPDIR/pids"
  sec_teardown
}

need_landlock() {
  [ "$ABI" -gt 0 ] || skip "the kernel has no Landlock"
}

# A host directory to bind-mount on /grader, with answer.txt and sub/.
# (an unprivileged user's, as a read-write mount must be: the sandbox's
# root is its owner there, so only protect keeps it from writing)
host_grader() {
  G=$BATS_TEST_TMPDIR/grader
  mkdir -p "$G/sub"
  echo "host answer" >"$G/answer.txt"
  echo "host notes" >"$G/notes.txt"
  chown -R 1000:1000 "$G"
}

# umount_in PID PATH: unmounts PATH in the mount namespace of host process
# PID, from outside the sandbox (what a bug in the mount layer would
# leave).  Only host code runs: python setns()es, no image binary.
umount_in() {
  python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/%s/ns/mnt" % sys.argv[1], os.O_RDONLY)
if libc.setns(fd, 0x00020000) != 0:
    sys.exit("setns: " + os.strerror(ctypes.get_errno()))
if libc.umount2(sys.argv[2].encode(), 0) != 0:
    sys.exit("umount2 %s: %s" % (sys.argv[2], os.strerror(ctypes.get_errno())))
' "$1" "$2"
}

# --- the record --------------------------------------------------------------

@test "landlock: inspect says which ABI and rights protect is enforced with" {
  need_landlock
  run -0 --separate-stderr dsec-run create --image busybox --layer dsec-ll@1 \
    --protect /grader/answer.txt
  SB=$(jq -r .id <<<"$output")
  echo "$SB" >>"$BATS_TEST_TMPDIR/sandboxes"
  echo "$SB" >>"$BATS_FILE_TMPDIR/all-sandboxes"
  jq -e '.landlock_unavailable == null' <<<"$output"
  run -0 sb_inspect
  echo "$output" | jq -c .landlock >&2
  jq -e --argjson abi "$ABI" '
    .landlock_unavailable == null and
    .landlock.abi == $abi and .landlock.rules == "protect" and
    .landlock.applied == "init" and
    .landlock.protect == ["/grader/answer.txt"] and
    (.landlock.handled | index("write_file") != null) and
    (.landlock.handled | index("make_reg") != null) and
    ((.landlock.handled | index("refer") != null) == ($abi >= 2)) and
    ((.landlock.handled | index("truncate") != null) == ($abi >= 3)) and
    ((.landlock.handled | index("ioctl_dev") != null) == ($abi >= 5)) and
    (.landlock.scoped | sort) == (if $abi >= 6 then ["abstract_unix_socket", "signal"] else [] end) and
    (.landlock.missing | sort) == ([if $abi < 2 then "refer" else empty end,
                                   if $abi < 3 then "truncate" else empty end,
                                   if $abi < 5 then "ioctl_dev" else empty end,
                                   if $abi < 6 then "signal", "abstract_unix_socket" else empty end] | sort)
  ' <<<"$output"
}

@test "landlock: fncall makes its rules per call; without protect only the scopes" {
  need_landlock
  sb_create --backend fncall --layer dsec-ll@1 --protect /grader/answer.txt
  run -0 sb_inspect
  jq -e '.landlock.rules == "protect" and .landlock.applied == "call" and
         .landlock.protect == ["/grader/answer.txt"]' <<<"$output"
  sb_create
  run -0 sb_inspect
  jq -e --argjson abi "$ABI" '
    .landlock.rules == (if $abi >= 6 then "scopes" else "none" end) and
    .landlock.handled == [] and .landlock.protect == [] and
    .landlock.applied == "init"' <<<"$output"
}

# --- every route to a protected file -------------------------------------------

@test "protect: no route changes a protected image file (container)" {
  sb_create --layer dsec-ll@1 --protect /grader/answer.txt
  attack protect /grader/answer.txt
  assert_blocked protect
  sb_exec cat /grader/answer.txt
  jq -e '.stdout == "the answer\n"' <<<"$output"
}

@test "protect: no route changes a protected image file (fncall)" {
  sb_create --backend fncall --layer dsec-ll@1 --protect /grader/answer.txt
  attack protect /grader/answer.txt
  assert_blocked protect
}

@test "protect: no route changes a file in a protected directory, nothing is made in it" {
  sb_create --layer dsec-ll@1 --protect /grader
  attack protect /grader/answer.txt
  assert_blocked protect
  attack protect /grader/sub/kept.txt
  assert_blocked protect
  run -1 --separate-stderr dsec-run exec "$SB" -- sh -c 'touch /grader/new || touch /grader/sub/new || mkdir /grader/d'
  jq -e '.stderr | contains("Read-only file system")' <<<"$output"
}

@test "protect: no route changes a protected file of a bind mount; the host file stays (container, fncall)" {
  local sum b
  host_grader
  sum=$(sha256sum <"$G/answer.txt")
  for b in container fncall; do
    sb_create --backend "$b" --layer dsec-ll@1 --mount "$G:/grader" --protect /grader/answer.txt
    attack protect /grader/answer.txt
    assert_blocked protect
    [ "$(sha256sum <"$G/answer.txt")" = "$sum" ]
    [ ! -e "$G/.protect-side" ]
    [ ! -e "$G/.protect-link" ]
  done
}

# --- Landlock alone ------------------------------------------------------------
# The read-only bind of the protected file is unmounted from outside the
# sandbox: only Landlock is left to refuse writes to its content.

@test "landlock: with the read-only bind undone from outside, Landlock alone keeps the content (container)" {
  local sum init
  need_landlock
  host_grader
  sum=$(sha256sum <"$G/answer.txt")
  sb_create --layer dsec-ll@1 --mount "$G:/grader" --protect /grader/answer.txt
  # first the mount answers (EROFS): protect_landlock then says UNEXPECTED,
  # so it tells the layers apart
  attack protect_landlock /grader/answer.txt
  [[ $verdict == "UNEXPECTED protect_landlock: "*EROFS* ]] || {
    echo "with the mount in place: $verdict" >&2
    false
  }
  init=$(sb_inspect | jq -r .init_pid)
  umount_in "$init" /grader/answer.txt
  attack protect_landlock /grader/answer.txt
  assert_blocked protect_landlock
  [ "$(sha256sum <"$G/answer.txt")" = "$sum" ]
}

@test "landlock: with the read-only bind undone from outside, Landlock alone keeps the content (fncall)" {
  local sum tag pid p out=$BATS_TEST_TMPDIR/call.json
  need_landlock
  host_grader
  sum=$(sha256sum <"$G/answer.txt")
  sb_create --backend fncall --layer dsec-ll@1 --mount "$G:/grader" --protect /grader/answer.txt
  # each call has a mount namespace of its own: this one waits until the
  # bind is gone from it, then attacks
  tag=dsec-ll-$$-$RANDOM
  dsec-run exec --timeout=60 "$SB" -- sh -c '
    i=0
    while grep -q " /grader/answer.txt " /proc/self/mountinfo; do
      i=$((i + 1)); [ $i -lt 300 ] || exit 99; sleep 0.1
    done
    exec /opt/attack/attack protect_landlock /grader/answer.txt' "$tag" >"$out" 2>&1 3>&- &
  echo $! >>"$BATS_TEST_TMPDIR/pids"
  pid=
  for _ in $(seq 200); do
    for p in $(pgrep -f -- "$tag"); do
      [ "$(cat /proc/"$p"/comm 2>/dev/null)" = sh ] && pid=$p
    done
    [ -n "$pid" ] && break
    sleep 0.05
  done
  [ -n "$pid" ] || { echo "the call did not start" >&2; false; }
  umount_in "$pid" /grader/answer.txt
  wait "$(tail -1 "$BATS_TEST_TMPDIR/pids")" || true
  output=$(cat "$out")
  status=$(jq -r .exit_code <<<"$output")
  verdict=$(jq -r '.stdout | split("\n")[0]' <<<"$output")
  details=$(jq -r .stderr <<<"$output")
  assert_blocked protect_landlock
  [ "$(sha256sum <"$G/answer.txt")" = "$sum" ]
}

# --- the domain and its scopes -------------------------------------------------

@test "landlock: every exec and its children are in the sandbox's domain (container, fncall)" {
  need_landlock
  sb_create --layer dsec-ll@1 --protect /grader/answer.txt
  attack landlock_domain
  assert_blocked landlock_domain
  # an exec's child: the shell runs the attack
  sb_exec sh -c '/opt/attack/attack landlock_domain'
  jq -e '.stdout | startswith("BLOCKED landlock_domain: in a Landlock domain of 1 layer")' <<<"$output"
  sb_create --backend fncall --layer dsec-ll@1 --protect /grader/answer.txt
  attack landlock_domain
  assert_blocked landlock_domain
  if [ "$ABI" -ge 6 ]; then
    # without protect: the scopes make the domain
    sb_create
    attack landlock_domain
    assert_blocked landlock_domain
  fi
}

@test "landlock: an abstract socket and a process outside the domain are out of reach (scopes)" {
  local init name tag hostpid
  need_landlock
  [ "$ABI" -ge 6 ] || skip "the kernel's Landlock ABI $ABI has no scopes"
  sb_create
  init=$(sb_inspect | jq -r .init_pid)
  name=dsec-ll-$$-$RANDOM
  tag=3600.$RANDOM
  # a listener in the sandbox's network namespace, outside the domain; it
  # checks that it can be reached at all
  python3 -u -c '
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/%s/ns/net" % sys.argv[1], os.O_RDONLY)
if libc.setns(fd, 0x40000000) != 0:
    sys.exit("setns: " + os.strerror(ctypes.get_errno()))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[2])
s.listen(8)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect("\0" + sys.argv[2])
c.close()
s.accept()[0].close()
print("listening", flush=True)
while True:
    s.accept()[0].close()
' "$init" "$name" >"$BATS_TEST_TMPDIR/listener.log" 2>&1 </dev/null 3>&- &
  echo $! >>"$BATS_TEST_TMPDIR/pids"
  # a process in the sandbox's user and PID namespaces, as the sandbox's
  # root (so plain permissions would let the sandbox signal it), outside
  # the domain
  python3 -u -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
user = os.open("/proc/%s/ns/user" % sys.argv[1], os.O_RDONLY)
pid = os.open("/proc/%s/ns/pid" % sys.argv[1], os.O_RDONLY)
for fd, kind in ((user, 0x10000000), (pid, 0x20000000)):
    if libc.setns(fd, kind) != 0:
        sys.exit("setns: " + os.strerror(ctypes.get_errno()))
child = os.fork()
if child == 0:
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    os.execv("/bin/sleep", ["/bin/sleep", sys.argv[2]])
print(child, flush=True)
os.waitpid(child, 0)
' "$init" "$tag" >"$BATS_TEST_TMPDIR/sleeper.log" 2>&1 </dev/null 3>&- &
  echo $! >>"$BATS_TEST_TMPDIR/pids"
  for _ in $(seq 100); do
    grep -qs listening "$BATS_TEST_TMPDIR/listener.log" &&
      grep -qs '^[0-9]' "$BATS_TEST_TMPDIR/sleeper.log" && break
    sleep 0.1
  done
  cat "$BATS_TEST_TMPDIR/listener.log" "$BATS_TEST_TMPDIR/sleeper.log" >&2
  grep -q listening "$BATS_TEST_TMPDIR/listener.log"
  hostpid=$(head -1 "$BATS_TEST_TMPDIR/sleeper.log")
  [[ $hostpid =~ ^[0-9]+$ ]]
  echo "$hostpid" >>"$BATS_TEST_TMPDIR/pids"
  [ "$(awk '/^Uid:/ {print $2}' /proc/"$hostpid"/status)" = "$(sb_inspect | jq -r .idmap.host_base)" ]
  attack scope_unix "$name"
  assert_blocked scope_unix
  attack scope_signal "$tag"
  assert_blocked scope_signal
  kill -0 "$hostpid"
}

# --- ordinary use around a protected path --------------------------------------

@test "protect: writes around a protected path still work (container)" {
  local d=$BATS_TEST_TMPDIR/data
  mkdir -p "$d/sub"
  echo "data answer" >"$d/answer.txt"
  chown -R 1000:1000 "$d"
  sb_create --layer dsec-ll@1 --protect /grader/answer.txt --mount "$d:/data" \
    --protect /data/answer.txt --workdir /work
  # rules hold inodes: they must still match once the dentries are gone
  echo 2 >/proc/sys/vm/drop_caches
  sb_exec sh -ec '
    echo a >/tmp/f; mkdir -p /tmp/d/e; echo b >/tmp/d/e/f; mv /tmp/f /tmp/d/; rm -r /tmp/d
    echo x >/dev/null; echo y | cat >/dev/null
    (echo x >/dev/stdout; echo x >/proc/self/fd/1) | cat >/dev/null
    mkfifo /tmp/fifo; rm /tmp/fifo
    echo s >/dev/shm/s; rm /dev/shm/s
    echo r >/root/f; mkdir /root/d; echo r >/root/d/f; rm -r /root/d /root/f
    echo out >out.txt; cat out.txt >/dev/null; rm out.txt
    echo from-sandbox >/data/sub/f
    echo more >>/grader/notes.txt; echo more >>/grader/notes.txt
    echo new >/grader/sub/new.txt; mv /grader/sub/new.txt /grader/sub/renamed.txt
    rm /grader/sub/renamed.txt
    mv /grader/notes.txt /grader/notes2.txt; echo more >>/grader/notes2.txt
    mv /grader/notes2.txt /grader/notes.txt
    mv /data/sub /data/sub2; echo in >/data/sub2/in.txt; mv /data/sub2 /data/sub
    ln /grader/notes.txt /grader/made; mv /grader/made /grader/made2; rm /grader/made2
    mkdir /grader/dir; rmdir /grader/dir; ln -s answer.txt /grader/link; rm /grader/link
    cat /grader/answer.txt >/dev/null
    echo done'
  jq -e '.stdout == "done\n"' <<<"$output"
  [ "$(cat "$d/sub/f")" = from-sandbox ]
  [ "$(cat "$d/sub/in.txt")" = in ]
}

@test "protect: writes around a protected path still work (fncall)" {
  sb_create --backend fncall --layer dsec-ll@1 --protect /grader/answer.txt --workdir /work
  sb_exec sh -ec '
    echo a >/tmp/f; cat /tmp/f >/dev/null; echo b >out.txt; cat out.txt >/dev/null
    echo x >/dev/null; (echo x >/dev/stdout) | cat >/dev/null
    echo s >/dev/shm/s; rm /dev/shm/s
    echo done'
  jq -e '.stdout == "done\n"' <<<"$output"
  # a call whose working directory is the protected file's parent: its
  # tmpfs covers the file, which is then not there to protect
  run -0 --separate-stderr dsec-run exec --workdir /grader "$SB" -- sh -ec 'echo c >f; cat f'
  jq -e '.stdout == "c\n"' <<<"$output"
}

@test "protect: a file made later directly in a protected path's parent is made, not written (the documented cost)" {
  need_landlock
  sb_create --layer dsec-ll@1 --protect /grader/answer.txt
  # open(O_CREAT) makes the file, then cannot open it for writing
  run -1 --separate-stderr dsec-run exec "$SB" -- sh -c 'echo x >/grader/fresh'
  jq -e '.stderr | contains("Permission denied")' <<<"$output"
  sb_exec test -f /grader/fresh
  # also beneath a directory made there later, and directly in /
  run -1 --separate-stderr dsec-run exec "$SB" -- sh -c 'mkdir /grader/new && echo x >/grader/new/f'
  jq -e '.stderr | contains("Permission denied")' <<<"$output"
  run -1 --separate-stderr dsec-run exec "$SB" -- sh -c 'echo x >/fresh'
  jq -e '.stderr | contains("Permission denied")' <<<"$output"
}

# --- without Landlock ------------------------------------------------------------

@test "landlock: a kernel without it (ENOSYS) or with it off (EOPNOTSUPP) is reported; protect holds by mounts" {
  local e want
  for e in ENOSYS EOPNOTSUPP; do
    run --separate-stderr "$BATS_FILE_TMPDIR/nolandlock" "$e" dsec-run create \
      --image busybox --layer dsec-ll@1 --mount "$BATS_FILE_TMPDIR/bin:/opt/attack:ro" \
      --protect /grader/answer.txt
    [ "$status" -ne 77 ] || skip "nolandlock does not know this architecture"
    [ "$status" -eq 0 ] || { echo "create: $output $stderr" >&2; false; }
    SB=$(jq -r .id <<<"$output")
    echo "$SB" >>"$BATS_TEST_TMPDIR/sandboxes"
    echo "$SB" >>"$BATS_FILE_TMPDIR/all-sandboxes"
    [ "$e" = ENOSYS ] && want="has no Landlock" || want="not enabled"
    jq -e --arg e "$e" --arg want "$want" \
      '.landlock_unavailable | contains($e) and contains($want)' <<<"$output"
    [[ $stderr == *"protect is enforced without Landlock"* ]]
    run -0 sb_inspect
    jq -e --arg e "$e" '.landlock == null and (.landlock_unavailable | contains($e))' <<<"$output"
    attack protect /grader/answer.txt
    assert_blocked protect
  done
}
