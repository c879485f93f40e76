#!/usr/bin/env bats
# The security baseline of DESIGN.md, attacked from inside a container
# sandbox with the default spec (busybox image).  Each test runs one
# subcommand of tests/security/attacks.c in a sandbox of its own and
# asserts that the attack failed.
#
# Denial events are not recorded yet: the tests marked "EVENT:" should
# also assert, once they are, that events.jsonl holds the denial.
# Limits that are recorded today (timeout, output, memory) are asserted.
#
# Needs root (dsec-run create does), gcc with a static glibc, python3.

bats_require_minimum_version 1.5.0

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
load ../helpers/common
load helpers

setup_file() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  sec_setup_file
  # one sandbox before the attacks: materialises the image, proves that
  # sandboxes start at all
  local out
  out=$(dsec-run run --rm --image busybox -- true)
  jq -r '.id // empty' <<<"$out" >>"$BATS_FILE_TMPDIR/all-sandboxes"
  [ "$(jq -r .exit_code <<<"$out")" = 0 ] || {
    echo "a plain sandbox does not run: $out" >&2
    return 1
  }
  host_state >"$BATS_FILE_TMPDIR/host-before"
}

teardown_file() {
  sec_teardown_file
}

setup() {
  require_root
  sec_setup
}

teardown() {
  sec_teardown
}

# --- system calls the filter denies (EPERM) --------------------------------
# Each leaves a "denied" event naming the call.

@test "keyctl, add_key and request_key are denied" {
  sb_create
  attack keyctl
  assert_blocked keyctl
  assert_event "$SB" '.type == "denied" and .syscall == "keyctl" and .pid > 0'
}

@test "the filters are compiled once per host: a damaged file of the cache is compiled again, never installed" {
  local dir=$DSEC_RUN/seccomp f klen len i
  # the default spec's two: the plain filter and the audited one's
  # template (other tests of this file may have made others)
  local files=("$dir/filter-0.bpf" "$dir/filter-80000001.bpf")
  rm -rf "$dir"
  sb_create
  [ "$(stat -c %a "$dir")" = 700 ]
  for f in "${files[@]}"; do
    [ "$(stat -c %a "$f")" = 600 ]
    cp "$f" "$BATS_TEST_TMPDIR/${f##*/}"
    # every instruction (after the 24 bytes of the header and the key)
    # made "return ALLOW": a filter that lets everything through
    klen=$(od -An -tu2 -j16 -N2 "$f" | tr -d ' ')
    len=$(od -An -tu2 -j18 -N2 "$f" | tr -d ' ')
    for ((i = 0; i < len; i++)); do printf '\x06\0\0\0\0\0\xff\x7f'; done |
      dd of="$f" bs=8 oflag=seek_bytes seek=$((24 + klen)) conv=notrunc 2>/dev/null
    ! cmp -s "$f" "$BATS_TEST_TMPDIR/${f##*/}"
  done
  sb_create
  attack keyctl
  assert_blocked keyctl
  assert_event "$SB" '.type == "denied" and .syscall == "keyctl"'
  # compiled again and put back as they were
  for f in "${files[@]}"; do
    cmp "$f" "$BATS_TEST_TMPDIR/${f##*/}"
  done
  # and from then on read, not written: the same files
  local before after
  before=$(stat -c %i "${files[@]}")
  sb_create
  after=$(stat -c %i "${files[@]}")
  [ "$before" = "$after" ]
}

@test "bpf(BPF_PROG_LOAD) and BPF_MAP_CREATE are denied" {
  sb_create
  attack bpf
  assert_blocked bpf
  assert_event "$SB" '.type == "denied" and .syscall == "bpf" and .pid > 0'
}

@test "perf_event_open is denied" {
  sb_create
  attack perf
  assert_blocked perf
  assert_event "$SB" '.type == "denied" and .syscall == "perf_event_open" and .pid > 0'
}

@test "userfaultfd is denied, /dev/userfaultfd absent" {
  sb_create
  attack userfaultfd
  assert_blocked userfaultfd
  assert_event "$SB" '.type == "denied" and .syscall == "userfaultfd" and .pid > 0'
}

@test "io_uring_setup, io_uring_enter and io_uring_register are denied" {
  sb_create
  attack io_uring
  assert_blocked io_uring
  assert_event "$SB" '.type == "denied" and .syscall == "io_uring_setup" and .pid > 0'
}

@test "kexec_load and kexec_file_load are denied" {
  sb_create
  attack kexec
  assert_blocked kexec
  assert_event "$SB" '.type == "denied" and .syscall == "kexec_load" and .pid > 0'
}

@test "init_module, finit_module and delete_module are denied" {
  sb_create
  attack module
  assert_blocked module
  assert_event "$SB" '.type == "denied" and .syscall == "init_module" and .pid > 0'
}

@test "open_by_handle_at (shocker) and name_to_handle_at are denied" {
  sb_create
  attack handle
  assert_blocked handle
  assert_event "$SB" '.type == "denied" and .syscall == "open_by_handle_at" and .pid > 0'
}

@test "mount of a tmpfs on /mnt, bind mounts and the new mount API are denied" {
  sb_create
  attack mount
  assert_blocked mount
}

@test "umount2 of /proc, /proc/sys, /sys and of a /proc mask is denied" {
  sb_create
  attack umount
  assert_blocked umount
}

@test "pivot_root is denied" {
  sb_create
  attack pivot_root
  assert_blocked pivot_root
}

@test "unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER) are denied, clone3 is ENOSYS" {
  sb_create
  attack userns
  assert_blocked userns
}

@test "setns into init's namespaces fails (by path and by pidfd)" {
  sb_create
  attack setns
  assert_blocked setns
}

@test "ptrace(PTRACE_ATTACH) of init is denied, pidfd_getfd cannot steal its socket" {
  sb_create
  attack ptrace init
  assert_blocked ptrace
  assert_alive
}

@test "ptrace of a sibling: our child, and a process of another exec" {
  sb_create
  attack ptrace child
  assert_blocked ptrace
  # a process left running by an earlier exec
  sb_exec sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & echo $!'
  local pid
  pid=$(jq -r .stdout <<<"$output")
  [ -n "$pid" ]
  attack ptrace "$pid"
  assert_blocked ptrace
}

@test "process_vm_readv and process_vm_writev of init and of a child are denied" {
  sb_create
  attack vm_readv init
  assert_blocked vm_readv
  attack vm_readv child
  assert_blocked vm_readv
}

@test "32-bit and x32 system calls kill the process (no filter bypass by ABI)" {
  sb_create
  attack abi
  assert_blocked abi
}

@test "the rest of the list: reboot, swapon, acct, syslog, clocks, iopl, kcmp, fanotify, quotactl" {
  sb_create
  attack misc
  assert_blocked misc
}

# --- init -----------------------------------------------------------------

@test "/proc/1/mem, environ, auxv, fd and root of init are unreadable" {
  sb_create
  attack procmem
  assert_blocked procmem
}

@test "kill(1, SIGKILL) and friends: init survives, the next exec works" {
  sb_create
  attack kill_init
  assert_blocked kill_init
  assert_alive
  run dsec-run inspect "$SB"
  jq -e '.state == "running"' <<<"$output" >/dev/null
}

# --- masked /proc and read-only /proc/sys, /sys -----------------------------

@test "/proc/kpagecgroup is masked (opened only, never read)" {
  sb_create
  attack kpagecgroup
  assert_blocked kpagecgroup
  # the open is recorded where fanotify works (the mask is then no /dev/null)
  if [[ $details != *"is /dev/null"* ]] && [[ $verdict != *"is /dev/null"* ]]; then
    assert_event "$SB" '.type == "masked" and .path == "/proc/kpagecgroup" and .pid > 0'
  fi
}

@test "/proc/kcore, /proc/kpageflags and /proc/kpagecount are masked or absent" {
  local p
  sb_create
  for p in /proc/kcore /proc/kpageflags /proc/kpagecount; do
    attack masked "$p"
    assert_blocked masked
  done
}

@test "masked directories are empty, read-only, and one file system, not one each" {
  local d n=0
  sb_create
  # each exists on this host's kernel; any of them may be missing elsewhere
  for d in /proc/acpi /sys/firmware /sys/kernel/debug /sys/kernel/tracing \
    /sys/kernel/security /sys/fs/bpf; do
    sb_exec sh -c "[ -d $d ] && echo yes || echo no"
    [[ $(jq -r .stdout <<<"$output") == yes* ]] || continue
    n=$((n + 1))
    sb_exec sh -c "ls -A $d | wc -l; touch $d/x 2>&1; mkdir $d/y 2>&1; stat -c %d $d"
    jq -r .stdout <<<"$output" >"$BATS_TEST_TMPDIR/out"
    [ "$(sed -n 1p "$BATS_TEST_TMPDIR/out")" = 0 ] || {
      echo "$d is not empty: $output" >&2
      return 1
    }
    grep -q 'Read-only file system' "$BATS_TEST_TMPDIR/out" || {
      echo "$d is writable: $output" >&2
      return 1
    }
    tail -n 1 "$BATS_TEST_TMPDIR/out" >>"$BATS_TEST_TMPDIR/devs"
  done
  [ "$n" -gt 0 ] || skip "no masked directory exists on this kernel"
  # a superblock each would cost every memory cgroup on the host a
  # shrinker slot per file system (dsec-run(1), the masks)
  [ "$(sort -u "$BATS_TEST_TMPDIR/devs" | wc -l)" -eq 1 ] || {
    echo "masked directories on more than one file system:" >&2
    cat "$BATS_TEST_TMPDIR/devs" >&2
    return 1
  }
}

@test "/dev, /dev/shm and the masks are one file system; only /dev/shm is writable" {
  sb_create
  sb_exec sh -c 'stat -c %d /dev /dev/shm /dev/.dsec /proc/kpagecgroup | sort -u | wc -l
    touch /dev/x 2>&1; mkdir /dev/.dsec/x 2>&1
    printf "#!/bin/sh\necho ran\n" >/dev/shm/run && chmod 755 /dev/shm/run
    /dev/shm/run; cat /dev/shm/run; rm /dev/shm/run; ls -A /dev/shm | wc -l
    stat -c "%u %g %a" /dev /dev/shm'
  jq -r .stdout <<<"$output" >"$BATS_TEST_TMPDIR/out"
  cat "$BATS_TEST_TMPDIR/out" >&2
  # a file system each would cost every memory cgroup on the host a
  # shrinker slot per file system (dsec-run(1), File systems)
  [ "$(sed -n 1p "$BATS_TEST_TMPDIR/out")" = 1 ]
  [ "$(grep -c 'Read-only file system' "$BATS_TEST_TMPDIR/out")" -eq 2 ]
  # /dev/shm is written, run from (as a tmpfs of its own was) and emptied
  grep -qx 'echo ran' "$BATS_TEST_TMPDIR/out"
  [ "$(grep -cx ran "$BATS_TEST_TMPDIR/out")" -eq 1 ]
  grep -qx '0 0 755' "$BATS_TEST_TMPDIR/out"
  grep -qx '0 0 1777' "$BATS_TEST_TMPDIR/out"
}

@test "an exclusive exec's masked opens are recorded too" {
  sb_create
  run --separate-stderr dsec-run exec --exclusive "$SB" -- \
    sh -c 'cat /proc/kallsyms /proc/acpi/* 2>/dev/null; echo end'
  [ "$status" -eq 0 ]
  jq -e '.stdout == "end\n"' <<<"$output"
  assert_event "$SB" '.type == "masked" and .path == "/proc/kallsyms"'
}

@test "/proc/sysrq-trigger is not writable" {
  sb_create
  attack sysrq
  assert_blocked sysrq
}

@test "/proc/timer_list, /proc/sched_debug and /proc/keys read as empty" {
  local p
  sb_create
  for p in /proc/timer_list /proc/sched_debug /proc/keys; do
    attack masked "$p" read
    assert_blocked masked
  done
}

@test "writing /proc/sys/kernel/core_pattern does not reach the host" {
  # EVENT: a denied write
  sb_create
  attack sysctl /proc/sys/kernel/core_pattern "$(cat /proc/sys/kernel/core_pattern)"
  assert_blocked sysctl
}

@test "writing /proc/sys/vm/drop_caches fails" {
  sb_create
  # 4 only silences the kernel's log line, should the write get through
  attack sysctl /proc/sys/vm/drop_caches 4
  assert_blocked sysctl
}

@test "/sys is read-only" {
  sb_create
  attack sysfs
  assert_blocked sysfs
}

@test "cgroup files are read-only or absent, cgroupfs cannot be mounted" {
  sb_create
  attack cgroup
  assert_blocked cgroup
}

# --- devices and terminals -------------------------------------------------

@test "mknod of /dev/sda (8:0) and other devices fails" {
  sb_create
  attack mknod
  assert_blocked mknod
}

@test "host device paths do not open; /dev holds only the standard nodes" {
  local disks=() d
  for d in /sys/block/*; do
    disks+=("/dev/${d##*/}")
  done
  sb_create
  attack hostdev "${disks[@]}"
  assert_blocked hostdev
}

@test "raw sockets (AF_PACKET, SOCK_RAW ICMP) fail" {
  sb_create
  attack rawsock
  assert_blocked rawsock
}

@test "TIOCSTI and TIOCLINUX are denied on /dev/tty, fd 0 and a pty" {
  sb_create
  attack tiocsti
  assert_blocked tiocsti
}

# --- extent sharing ioctls ---------------------------------------------------

@test "FICLONE, FICLONERANGE and FIDEDUPERANGE fail with EOPNOTSUPP" {
  sb_create
  attack reflink
  assert_blocked reflink
}

@test "XFS_IOC_SWAPEXT (0xc0c0586d) and XFS_IOC_EXCHANGE_RANGE fail with EPERM" {
  sb_create
  attack swapext
  assert_blocked swapext
}

# --- privileges --------------------------------------------------------------

@test "no capabilities (CapEff, CapPrm, CapBnd all 0), no_new_privs, seccomp" {
  sb_create
  attack caps
  assert_blocked caps
}

@test "a set-user-ID root copy of busybox in /tmp gains nothing" {
  sb_create
  attack suid /bin/busybox
  assert_blocked suid
}

@test "--user 1000:1000: a set-user-ID root busybox mounted in runs as 1000" {
  sb_create --user 1000:1000 --mount "$BATS_FILE_TMPDIR/suid:/opt/suid:ro"
  sb_exec id -u
  [ "$(jq -r .stdout <<<"$output")" = 1000 ]
  attack suid /opt/suid/busybox
  assert_blocked suid
  attack caps
  assert_blocked caps
}

@test "uid 0 inside is an unprivileged uid on the host" {
  local init base pid uids found=0
  sb_create
  sb_exec sh -c 'sleep 300 </dev/null >/dev/null 2>&1 & id -u'
  [ "$(jq -r .stdout <<<"$output")" = 0 ]
  init=$(sb_inspect | jq -r .init_pid)
  base=$(sb_inspect | jq -r .idmap.host_base)
  [ "$init" -gt 0 ]
  [ "$base" -gt 0 ]
  # init and the process it adopted, seen from the host
  for pid in "$init" $(cat /proc/"$init"/task/*/children); do
    uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' /proc/"$pid"/status)
    echo "host pid $pid ($(cat /proc/"$pid"/comm)): Uid $uids" >&2
    [ "$uids" = "$base $base $base $base" ]
    [ "$(cat /proc/"$pid"/comm)" = sleep ] && found=1
  done
  [ "$found" = 1 ]
}

# --- descriptors and sessions ------------------------------------------------

@test "no descriptor leaks into an exec: only 0, 1 and 2" {
  sb_create
  attack fds
  assert_blocked fds
}

@test "each exec is a new session without a controlling terminal" {
  sb_create
  attack session
  assert_blocked session
}

# --- network -----------------------------------------------------------------
# EVENT: connection attempts should be recorded ("network attempts").

@test "the network has only lo" {
  sb_create
  attack netdev
  assert_blocked netdev
}

@test "the host's loopback web server, abstract socket and addresses are unreachable" {
  local port name ips
  port=$(cat "$BATS_FILE_TMPDIR/http.port")
  name=$(cat "$BATS_FILE_TMPDIR/abstract.name")
  # the services are there: the host reaches them
  python3 -c 'import sys, urllib.request; urllib.request.urlopen("http://127.0.0.1:%s/secret.txt" % sys.argv[1], timeout=5)' "$port"
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect("\0" + sys.argv[1]); assert s.recv(64)' "$name"
  read -ra ips <<<"$(hostname -I)"
  sb_create
  attack connect "$port" "${ips[@]}" "@$name"
  assert_blocked connect
  # the image's wget, for good measure
  run --separate-stderr dsec-run exec --timeout=20 "$SB" -- wget -q -T 3 -O - "http://127.0.0.1:$port/secret.txt"
  [ "$status" -ne 0 ]
  if jq -e '.stdout | contains("host secret")' <<<"$output" >/dev/null; then
    echo "wget fetched the host's secret: $output" >&2
    false
  fi
}

# --- file system -------------------------------------------------------------

@test "chroot and the chdir(..) escape fail" {
  sb_create
  attack chroot
  assert_blocked chroot
}

@test "writing to the image's files changes the sandbox's copy, not the store" {
  sb_create
  sb_exec sh -c 'echo pwned >>/bin/busybox; echo pwned >/etc/passwd; chmod 4777 /bin/busybox'
  [ "$(host_state | grep '^layers=')" = "$(grep '^layers=' "$BATS_FILE_TMPDIR/host-before")" ]
}

@test "an image symlink on a mount target's path does not lead dsec-run onto the host" {
  # An image (or, once they exist, a checkpoint made from a sandbox's
  # changes) has /opt -> an absolute host path.  dsec-run creates the
  # --mount target /opt/attack as host root: it must resolve it inside the
  # sandbox's root, never create or chown anything on the host.
  local img=$BATS_TEST_TMPDIR/img host=$BATS_TEST_TMPDIR/host
  mkdir -p "$img" "$host"
  chmod 0755 "$host"
  tar -C "$img" -xzf "$(busybox_tar)"
  rm -rf "$img/opt"
  ln -s "$host" "$img/opt"
  tar -C "$img" --numeric-owner -czf "$BATS_TEST_TMPDIR/evil.tar.gz" .
  run -0 dsec-pull --name evil-symlink "tar:$BATS_TEST_TMPDIR/evil.tar.gz"
  SB_IMAGE=evil-symlink run sb_create
  if [ "$status" -eq 0 ]; then
    echo "$output" >&2
  fi
  ls -la "$host" >&2
  [ -z "$(ls -A "$host")" ] || {
    echo "dsec-run create wrote into the host directory $host:" >&2
    find "$host" -printf '%p uid=%U gid=%G\n' >&2
    false
  }
  [ "$(stat -c %u "$host")" = 0 ]
}

# --- limits -----------------------------------------------------------------

@test "fork bomb with --pids 64: the limit holds, sandbox and host survive" {
  local path
  sb_create --pids 64
  path=$(sb_inspect | jq -r .cgroup.pids.path)
  [ "$(cat "$path/pids.max")" = 64 ]
  attack forkbomb 64
  assert_blocked forkbomb
  if [ -f "$path/pids.events" ]; then
    assert_event "$SB" '.type == "limit" and .limit == "pids" and .refused_forks > 0'
  fi
  assert_alive
  # the host still forks
  run -0 /bin/sh -c 'true & wait'
}

@test "memory bomb with --memory 64 is killed, the sandbox survives" {
  sb_create --memory 64
  attack membomb 512
  [[ $verdict != ESCAPED* ]] || { echo "$verdict" >&2; false; }
  jq -e '.oom_killed == true or .signal == 9' <<<"$output" >/dev/null || {
    echo "memory bomb not killed: $output" >&2
    false
  }
  if jq -e '.oom_killed == true' <<<"$output" >/dev/null; then
    assert_event "$SB" '.type == "limit" and .limit == "memory"'
  fi
  assert_alive
}

@test "disk fill: 200 MB into /tmp with --disk 50 stops at the limit" {
  # EVENT: a "limit" event for disk, once recorded
  sb_create --disk 50
  attack --timeout=120 diskfill /tmp/fill 200 50
  assert_blocked diskfill
  assert_alive
}

@test "yes flood with --max-output 1000 --timeout 3: truncated, timed out, supervisor fine" {
  local sup
  sb_create
  sup=$(sb_inspect | jq -r .supervisor_pid)
  run --separate-stderr dsec-run exec --max-output=1000 --timeout=3 "$SB" -- yes
  [ "$status" -eq 124 ]
  jq -e '.exit_code == 124 and .truncated and .timed_out and
         (.stdout | length) <= 1000 and .stdout_bytes > 1000' <<<"$output" >/dev/null || {
    echo "unexpected result: $(jq -c 'del(.stdout)' <<<"$output")" >&2
    false
  }
  kill -0 "$sup"
  # the overflow was counted, not kept
  [ "$(awk '/^VmRSS:/ {print $2}' /proc/"$sup"/status)" -lt 65536 ]
  assert_event "$SB" '.type == "limit" and .limit == "timeout"'
  assert_event "$SB" '.type == "limit" and .limit == "output" and .dropped_bytes > 0'
  assert_alive
}

@test "a daemonised process does not outlive dsec-run rm" {
  local tag
  tag=$((RANDOM * 32768 + RANDOM + 1000000))
  sb_create
  sb_exec sh -c "setsid sleep $tag </dev/null >/dev/null 2>&1 &"
  pgrep -f "^sleep $tag\$" >/dev/null
  run -0 dsec-run rm --force "$SB"
  if pgrep -af "^sleep $tag\$" >&2; then
    echo "a process of the sandbox outlived it" >&2
    false
  fi
}

# --- last: the host is as it was ----------------------------------------------

@test "the host is unchanged after the attacks and nothing is left behind" {
  local id d
  host_state >"$BATS_TEST_TMPDIR/host-after"
  diff "$BATS_FILE_TMPDIR/host-before" "$BATS_TEST_TMPDIR/host-after"
  kill -0 "$(cat "$BATS_FILE_TMPDIR/http.pid")"
  run -0 dsec-run ps --all
  [ -z "$output" ] || { echo "sandboxes left: $output" >&2; false; }
  while read -r id; do
    for d in /sys/fs/cgroup/*/dsec/"$id" /sys/fs/cgroup/dsec/"$id"; do
      [ ! -e "$d" ] || { echo "cgroup left: $d" >&2; false; }
    done
  done <"$BATS_FILE_TMPDIR/all-sandboxes"
}
