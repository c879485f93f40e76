#!/usr/bin/env bats
# dsec-vm: the microvm and vm backends on QEMU, end to end with busybox and
# the host's Debian kernel.  Slow-tolerant: under TCG a boot takes a few
# seconds, so each test boots at most what it needs and waits generously;
# nothing depends on timing.  Every test gets its own DSEC_ROOT; the store
# (layers and the cached kernel and initramfs) is shared by the file.
# Teardown removes every sandbox and checks that no QEMU, supervisor or
# cgroup of them is left.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  PATH="$BATS_FILE_TMPDIR/bin:$PATH"
  export DSEC_STORE="$BATS_FILE_TMPDIR/store"
  run_setup
}

teardown() {
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# require_vm: QEMU and a guest kernel, or a skip with the reason; in CI
# (CI=true) their absence is a failure, never a skip.
require_vm() {
  local why=
  command -v qemu-system-x86_64 >/dev/null || why="qemu-system-x86 is not installed"
  compgen -G "/boot/vmlinuz-*" >/dev/null || why="no guest kernel (linux-image-amd64)"
  [ -z "$why" ] && return 0
  if [ "${CI-}" = true ]; then
    echo "$why" >&2
    return 1
  fi
  skip "$why"
}

# vm_create [CREATE OPTION]...: a busybox VM (microvm unless told), its id.
vm_create() {
  local rec
  rec=$(dsec-vm create --image busybox:1 "$@") || return
  jq -r '.id' <<<"$rec" | tee -a "$SB_IDS"
}

# vm_out ID CMD...: the command's stdout in VM ID (fails unless it exits 0).
vm_out() {
  local id=$1 res
  shift
  res=$(dsec-vm exec "$id" -- "$@") || { echo "$res" >&2; return 1; }
  jq -r '.stdout' <<<"$res"
}

# qemu_pids: this test's QEMU processes (their environment names its root).
qemu_pids() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = qemu-system-x86 ] || continue
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "DSEC_ROOT=$DSEC_ROOT"; then
      echo "${p#/proc/}"
    fi
  done
}

# proc_start PID: the process's start time (clock ticks after boot), empty
# when it is gone.
proc_start() {
  sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}

# ns_holders NS: "PID START" of each process whose mount namespace is NS
# (as readlink /proc/PID/ns/mnt shows it).
ns_holders() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$1" ] || continue
    echo "${p#/proc/} $(proc_start "${p#/proc/}")"
  done
}

# --- the command line --------------------------------------------------------

@test "dsec-vm --help, --version and a usage error" {
  run -0 dsec-vm --help
  [[ $output == *"Usage: dsec-vm"* ]]
  [[ $output == *microvm* ]]
  run -0 dsec-vm --version
  [[ $output == "dsec-vm "* ]]
  run -2 dsec-vm create --no-such-option
}

@test "dsec-vm serves the VM backends only; dsec-run serves all four (3)" {
  run -3 --separate-stderr dsec-vm create --image busybox:1 --backend container
  [[ $stderr == *"served by dsec-run"* ]]
  run -3 --separate-stderr dsec-vm create --image busybox:1 --mount /tmp:/x
  [[ $stderr == *mounts* ]]
  run -3 --separate-stderr dsec-vm create --image busybox:1 --backend nope
  [ -z "$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

# --- a VM's life ---------------------------------------------------------------

@test "create: a microvm runs the guest kernel; record, inspect and results say the accelerator" {
  require_vm
  local id rec res kernel
  rec=$(dsec-vm create --image busybox:1)
  id=$(jq -r .id <<<"$rec")
  echo "$id" >>"$SB_IDS"
  jq -e '.type == "sandbox" and .state == "running" and .backend == "microvm"' <<<"$rec"
  jq -e '.accelerator == "tcg" or .accelerator == "kvm"' <<<"$rec"
  kernel=$(jq -r .kernel <<<"$rec")
  [ -d "/lib/modules/$kernel" ]
  # DAMON-based reclaim in the guest where its kernel has it, else why not
  if grep -qs '^CONFIG_DAMON_RECLAIM=y' "/boot/config-$kernel"; then
    jq -e '.damon == "reclaim"' <<<"$rec"
  elif ! grep -qs '^CONFIG_DAMON_RECLAIM=m' "/boot/config-$kernel"; then
    jq -e '.damon_unavailable | test("DAMON")' <<<"$rec"
  fi
  # no SMT here, or a kernel without core scheduling: said, not faked
  jq -e '.core_sched == true or (.core_sched_unavailable | length > 0)' <<<"$rec"
  res=$(dsec-vm exec "$id" -- uname -r)
  jq -e --arg k "$kernel" '.stdout == "\($k)\n" and .exit_code == 0' <<<"$res"
  jq -e --arg a "$(jq -r .accelerator <<<"$rec")" '.accelerator == $a' <<<"$res"
  # the guest has a kernel of its own: another boot id than the host's
  [ "$(vm_out "$id" cat /proc/sys/kernel/random/boot_id)" != "$(cat /proc/sys/kernel/random/boot_id)" ]
  dsec-vm inspect "$id" | jq -e '.accelerator and .kernel and .backend == "microvm"'
  dsec-vm events "$id" | jq -se 'map(select(.type == "created"))[0] | .backend == "microvm" and .accelerator'
}

@test "exec: files persist across execs; stdin, env, workdir and exit codes pass through" {
  require_vm
  local id res
  id=$(vm_create --env FOO=bar --workdir /work)
  dsec-vm exec "$id" -- sh -c 'echo kept > /data.txt'
  [ "$(vm_out "$id" cat /data.txt)" = kept ]
  [ "$(vm_out "$id" pwd)" = /work ]
  [ "$(vm_out "$id" sh -c 'echo $FOO')" = bar ]
  printf 'from stdin' >"$BATS_TEST_TMPDIR/in"
  res=$(dsec-vm exec --stdin "$BATS_TEST_TMPDIR/in" "$id" -- cat)
  jq -e '.stdout == "from stdin"' <<<"$res"
  run -7 dsec-vm exec "$id" -- sh -c 'exit 7'
  run -127 dsec-vm exec "$id" -- no-such-command
  jq -e '.exit_code == 127' <<<"$output"
  run -137 dsec-vm exec "$id" -- sh -c 'kill -9 $$'
  jq -e '.signal == 9' <<<"$output"
}

@test "exec: a timeout kills the command (124) and an output cap truncates; both are events" {
  require_vm
  local id
  id=$(vm_create)
  run -124 dsec-vm exec --timeout 1 "$id" -- sleep 30
  jq -e '.timed_out == true and .exit_code == 124' <<<"$output"
  run -0 dsec-vm exec --max-output 100 "$id" -- sh -c 'head -c 5000 /dev/zero | tr "\0" a'
  jq -e '.truncated == true and (.stdout | length) == 100 and .stdout_bytes == 5000' <<<"$output"
  dsec-vm events "$id" | jq -se 'any(.type == "limit" and .limit == "timeout")'
  dsec-vm events "$id" | jq -se 'any(.type == "limit" and .limit == "output" and .dropped_bytes == 4900)'
  # the VM is still fine
  [ "$(vm_out "$id" echo ok)" = ok ]
}

@test "audit: a flood of long execs keeps events.jsonl to audit.max_bytes, argv bounded" {
  require_vm
  local id a size
  printf '{"image":"busybox:1","audit":{"max_bytes":65536}}\n' >"$BATS_TEST_TMPDIR/spec.json"
  id=$(vm_create --spec "$BATS_TEST_TMPDIR/spec.json")
  a=$(head -c 4000 /dev/zero | tr '\0' a)
  for _ in $(seq 12); do
    jq -cn --arg a "$a" '{"cmd":["/bin/true",$a,$a,$a,$a,$a]}'
  done >"$BATS_TEST_TMPDIR/requests"
  run -0 --separate-stderr dsec-vm exec "$id" --requests "$BATS_TEST_TMPDIR/requests"
  [ "$(jq -s 'map(select(.exit_code == 0)) | length' <<<"$output")" = 12 ]
  size=$(stat -c %s "$DSEC_ROOT/sandboxes/$id/events.jsonl")
  [ "$size" -le 65536 ]
  dsec-vm events "$id" | jq -se 'map(select(.type == "audit_truncated")) | length == 1'
  dsec-vm events "$id" | jq -se 'map(select(.type == "exec")) | length > 0 and
    all(.[]; .argv_truncated and ([.argv[] | length] | add) <= 8192)'
  dsec-vm inspect "$id" | jq -e --argjson size "$size" \
    '.audit.bytes == $size and .audit.max_bytes == 65536 and .audit.dropped.exec > 0'
}

@test "trajectory: a recorded seq is replayed, not re-run; a different command at it is refused (4)" {
  require_vm
  local id res
  id=$(vm_create)
  res=$(dsec-vm exec --seq 0 "$id" -- sh -c 'echo x >> /count; wc -l < /count')
  jq -e '.stdout == "1\n" and .replayed == false and .seq == 0' <<<"$res"
  res=$(dsec-vm exec --seq 0 "$id" -- sh -c 'echo x >> /count; wc -l < /count')
  jq -e '.stdout == "1\n" and .replayed == true' <<<"$res"
  [ "$(vm_out "$id" wc -l /count)" = "1 /count" ]
  run -4 dsec-vm exec --seq 0 "$id" -- echo other
  dsec-vm trajectory "$id" | jq -se 'map(select(.type == "exec" and .seq == 0)) | length == 1'
}

@test "suspend and resume: the whole VM to a file and back, a background process keeps counting" {
  require_vm
  local id res before after
  id=$(vm_create)
  dsec-vm exec "$id" -- sh -c 'setsid sh -c "i=0; while :; do i=\$((i+1)); echo \$i > /counter; sleep 0.1; done" >/dev/null 2>&1 &'
  for _ in $(seq 100); do
    [ "$(vm_out "$id" cat /counter 2>/dev/null)" -ge 3 ] 2>/dev/null && break
    sleep 0.2
  done
  [ "$(vm_out "$id" cat /counter)" -ge 3 ] ||
    { echo "the counter in the guest does not count" >&2; false; }
  res=$(dsec-vm suspend "$id")
  jq -e '.type == "suspended" and .released == true and .snapshot_bytes > 0' <<<"$res"
  [ "$(sb_state "$id")" = suspended ]
  [ -z "$(qemu_pids)" ]
  [ -s "$DSEC_ROOT/sandboxes/$id/vm.snap" ]
  run -125 dsec-vm exec "$id" -- true
  res=$(dsec-vm resume "$id")
  jq -e '.type == "resumed" and .from == "snapshot" and .state == "running"' <<<"$res"
  [ ! -e "$DSEC_ROOT/sandboxes/$id/vm.snap" ]
  before=$(vm_out "$id" cat /counter)
  for _ in $(seq 100); do
    after=$(vm_out "$id" cat /counter)
    [ "$after" -gt "$before" ] && break
    sleep 0.2
  done
  [ "$after" -gt "$before" ]
  dsec-vm events "$id" | jq -se 'any(.type == "suspended") and any(.type == "resumed" and .from == "snapshot")'
}

@test "fork --count 2: two VMs from one memory snapshot, each with its own disk; the parent goes on" {
  require_vm
  local id forks a b
  id=$(vm_create)
  dsec-vm exec "$id" -- sh -c 'echo parent > /who'
  forks=$(dsec-vm fork --count 2 "$id")
  [ "$(jq -s length <<<"$forks")" -eq 2 ]
  jq -r .id <<<"$forks" >>"$SB_IDS"
  jq -se --arg p "$id" 'all(.parent == $p and .state == "running")' <<<"$forks"
  a=$(jq -sr '.[0].id' <<<"$forks")
  b=$(jq -sr '.[1].id' <<<"$forks")
  [ "$(vm_out "$a" cat /who)" = parent ]
  [ "$(vm_out "$b" cat /who)" = parent ]
  dsec-vm exec "$a" -- sh -c 'echo a > /who'
  dsec-vm exec "$b" -- sh -c 'echo b > /who'
  [ "$(vm_out "$a" cat /who)" = a ]
  [ "$(vm_out "$b" cat /who)" = b ]
  [ "$(vm_out "$id" cat /who)" = parent ]
  # the snapshot and disk copy the forks came from are gone
  [ -z "$(ls "$DSEC_ROOT/sandboxes/$id" | grep '^fork-')" ]
}

@test "rm leaves no QEMU process, no file and no mount" {
  require_vm
  local id q sup ns p start holders
  id=$(vm_create)
  q=$(qemu_pids)
  [ -n "$q" ]
  # the mounts live in the supervisor's mount namespace (QEMU's root
  # under it; a checkpoint mounts nothing): gone when no process holds it
  sup=$(dsec-vm inspect "$id" | jq -r .supervisor_pid)
  ns=$(readlink "/proc/$sup/ns/mnt")
  [ "$ns" != "$(readlink /proc/self/ns/mnt)" ]
  # its holders, by pid and start time: once the namespace is gone, its
  # inode number goes to the next new one, another session's as well
  holders=$(ns_holders "$ns")
  grep -q "^$sup " <<<"$holders"
  dsec-vm checkpoint "$id" >/dev/null
  run -0 dsec-vm rm "$id"
  sb_dead "$q"
  [ -z "$(qemu_pids)" ]
  [ ! -e "$DSEC_ROOT/sandboxes/$id" ]
  [ ! -e "$DSEC_RUN/$id" ]
  # none of them lives on (a zombie holds nothing), nor one they started
  # later (it has this test's environment)
  while read -r p start; do
    if sb_alive "$p" && [ "$(proc_start "$p")" = "$start" ]; then
      echo "process $p ($(cat "/proc/$p/comm")) still holds the VM's mounts" >&2
      false
    fi
  done <<<"$holders"
  for p in $(ns_holders "$ns" | cut -d' ' -f1); do
    if { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx "DSEC_ROOT=$DSEC_ROOT"; then
      echo "process $p ($(cat "/proc/$p/comm")) still holds the VM's mounts" >&2
      false
    fi
  done
  ! losetup -a | grep -q "sandboxes/$id/disk.img"
}

@test "a guest that panics is reported died, the panic as its cause from pvpanic, the console's end beside it" {
  require_vm
  local id
  id=$(vm_create)
  run -125 dsec-vm exec --timeout 60 "$id" -- sh -c 'echo c > /proc/sysrq-trigger'
  sb_wait_state "$id" died 300
  # the console's end is what the guest got out before QEMU stopped at the
  # panic's event: the panic's own lines are usually in it, but a guest
  # whose console lags may have printed them too late, so only its
  # presence decides
  run -0 --separate-stderr dsec-vm inspect "$id"
  jq -e '.cause == "guest kernel panic (pvpanic)" and
    (.console_tail | type == "string" and length > 0)' <<<"$output" || {
    echo "$output" >&2
    false
  }
  dsec-vm events "$id" | jq -se 'any(.type == "died" and
    .cause == "guest kernel panic (pvpanic)" and (.console_tail | type) == "string")'
  [ -z "$(qemu_pids)" ]
}

@test "a panic line the guest prints decides nothing: a guest that prints one and powers off is reported as powered off" {
  require_vm
  local id
  id=$(vm_create)
  run dsec-vm exec --timeout 60 "$id" -- sh -c '
    echo "Kernel panic - not syncing: fake" >/dev/console
    echo "dsec-agent: fatal: fake" >/dev/console
    poweroff -f'
  sb_wait_state "$id" died 300
  dsec-vm inspect "$id" | jq -e '.cause == "the guest powered off" and
    (.console_tail | test("Kernel panic - not syncing: fake"))'
  dsec-vm events "$id" | jq -se 'any(.type == "died" and .cause == "the guest powered off")'
  ! dsec-vm events "$id" | jq -se 'any(.cause? // "" | test("panic|fatal"))' >/dev/null ||
    { dsec-vm events "$id" >&2; false; }
  [ -z "$(qemu_pids)" ]
}

@test "kill: signals every process of the guest, the VM stays" {
  require_vm
  local id
  id=$(vm_create)
  dsec-vm exec "$id" -- sh -c 'setsid sleep 1000 >/dev/null 2>&1 &'
  [ "$(vm_out "$id" sh -c 'pidof sleep | wc -w')" = 1 ]
  run -0 dsec-vm kill "$id" KILL
  for _ in $(seq 50); do
    [ "$(vm_out "$id" sh -c 'pidof sleep | wc -w')" = 0 ] && break
    sleep 0.1
  done
  [ "$(vm_out "$id" sh -c 'pidof sleep | wc -w')" = 0 ]
}

@test "protect and hide hold in the guest: the guest's root cannot write or unmount them" {
  require_vm
  local id
  dsec-layer create --dir "$(mkdir -p "$BATS_TEST_TMPDIR/l/grader" "$BATS_TEST_TMPDIR/l/answers" &&
    echo 'assert 1' >"$BATS_TEST_TMPDIR/l/grader/test.py" &&
    echo 42 >"$BATS_TEST_TMPDIR/l/answers/a.txt" && echo "$BATS_TEST_TMPDIR/l")" --name task@1 >/dev/null
  id=$(vm_create --layer task@1 --protect /grader --hide /answers)
  [ "$(vm_out "$id" cat /grader/test.py)" = "assert 1" ]
  run -1 dsec-vm exec "$id" -- sh -c 'echo x > /grader/test.py'
  run -1 dsec-vm exec "$id" -- umount /grader
  run -1 dsec-vm exec "$id" -- mount -o remount,rw /grader
  [ "$(vm_out "$id" cat /grader/test.py)" = "assert 1" ]
  # no raw disk to write around the overlay, no PID 1 memory to write
  [ -z "$(vm_out "$id" sh -c 'ls /dev | grep -E "^(vd|pmem|vport)" || true')" ]
  run -1 dsec-vm exec "$id" -- sh -c 'echo x > /proc/1/mem'
  run -1 dsec-vm exec "$id" -- cat /answers/a.txt
  [ "$(vm_out "$id" ls -A /answers)" = "" ]
}

@test "QEMU runs contained: unprivileged, no capabilities, no new privileges, seccomp, its own root, no host network, its own cgroups" {
  require_vm
  local id q
  id=$(vm_create)
  q=$(qemu_pids)
  [ -n "$q" ]
  grep -qx 'CapEff:	0000000000000000' "/proc/$q/status"
  # an unprivileged user, in a root of its own with no host file but the
  # programs' trees: the VM's files are descriptors
  ! grep -qE '^Uid:	0	' "/proc/$q/status" ||
    { echo "QEMU $q runs as uid 0" >&2; false; }
  [ "$(ls "/proc/$q/root" | tr '\n' ' ')" = "bin dev etc lib lib32 lib64 proc sbin usr " ] ||
    [ "$(ls "/proc/$q/root" | grep -cvE '^(bin|dev|etc|lib|lib32|lib64|libx32|proc|sbin|usr)$')" = 0 ]
  [ "$(ls "/proc/$q/root/etc")" = ld.so.cache ]
  [ ! -e "/proc/$q/root/$DSEC_ROOT" ]
  grep -qx 'CapBnd:	0000000000000000' "/proc/$q/status"
  grep -qx 'NoNewPrivs:	1' "/proc/$q/status"
  grep -qx 'Seccomp:	2' "/proc/$q/status"
  [ "$(readlink "/proc/$q/ns/net")" != "$(readlink /proc/self/ns/net)" ]
  [ "$(readlink "/proc/$q/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]
  # in the VM's cgroups, limited to its memory plus QEMU's 256 MiB
  grep -q "dsec/$id\$" "/proc/$q/cgroup"
  local mem
  mem=$(dsec-vm inspect "$id" | jq -r '.cgroup.memory.path')
  if [ -f "$mem/memory.limit_in_bytes" ]; then
    [ "$(cat "$mem/memory.limit_in_bytes")" -eq $(((512 + 256) << 20)) ]
  else
    [ "$(cat "$mem/memory.max")" -eq $(((512 + 256) << 20)) ]
  fi
}

@test "backend vm: a q35 machine (PCI, firmware) boots the same image and runs commands" {
  require_vm
  local id rec
  rec=$(dsec-vm create --image busybox:1 --backend vm --memory 384)
  id=$(jq -r .id <<<"$rec")
  echo "$id" >>"$SB_IDS"
  jq -e '.backend == "vm"' <<<"$rec"
  [ "$(vm_out "$id" uname -r)" = "$(jq -r .kernel <<<"$rec")" ]
  # a full machine: a PCI bus
  [ -n "$(vm_out "$id" ls /sys/bus/pci/devices)" ]
  dsec-vm exec "$id" -- sh -c 'echo y > /f'
  [ "$(vm_out "$id" cat /f)" = y ]
}

@test "checkpoint: the VM's writable layer becomes a layer any backend can start from" {
  require_vm
  local id rec digest c
  id=$(vm_create)
  dsec-vm exec --seq 0 "$id" -- sh -c 'mkdir -p /work && echo saved > /work/a && rm /bin/vi'
  rec=$(dsec-vm checkpoint --name ck@1 "$id")
  jq -e '.type == "checkpoint" and .consistent == true and .after_seq == 0' <<<"$rec"
  digest=$(jq -r .layer.digest <<<"$rec")
  dsec-vm trajectory "$id" | jq -se --arg d "$digest" 'any(.type == "checkpoint" and .layer == $d)'
  dsec-vm events "$id" | jq -se --arg d "$digest" 'any(.type == "checkpoint" and .layer == $d)'
  # the VM goes on writing after its file system was frozen and thawed
  dsec-vm exec "$id" -- sh -c 'echo more > /work/b'
  [ "$(vm_out "$id" cat /work/b)" = more ]
  # a container starts from it: the file is there, the deletion too
  c=$(sb_create --layer ck@1)
  [ "$(dsec-run exec "$c" -- cat /work/a | jq -r .stdout)" = saved ]
  run -1 dsec-run exec "$c" -- ls /bin/vi
}

@test "--pmem: a vm's layers are virtio-pmem devices mounted with DAX; microvm refuses it (3)" {
  require_vm
  local id rec hex
  run -3 --separate-stderr dsec-vm create --image busybox:1 --pmem
  [[ $stderr == *"backend vm"* ]]
  run -3 --separate-stderr dsec-run create --image busybox:1 --pmem
  rec=$(dsec-vm create --image busybox:1 --backend vm --pmem --memory 384)
  id=$(jq -r .id <<<"$rec")
  echo "$id" >>"$SB_IDS"
  jq -e '.backend == "vm"' <<<"$rec"
  # no layer disk: the image is a pmem device, mapped with DAX
  [ "$(vm_out "$id" sh -c 'ls /sys/block | grep -c ^pmem')" = 1 ]
  vm_out "$id" dmesg | grep -q 'erofs: DAX enabled'
  [ "$(vm_out "$id" sh -c 'echo written > /w; cat /w')" = written ]
  [ -n "$(vm_out "$id" ls /bin/busybox)" ]
  # made once per store, beside the layer's EROFS image
  hex=$(dsec-layer inspect busybox:1 | jq -r '.layers[0].digest // .layers[0]' | sed 's/^sha256://')
  [ -s "$(store_dir)/layers/$hex/layer.pmem" ]
  dsec-layer inspect "sha256:$hex" | jq -e '.materialised | index("pmem")'
}

@test "network proxy: the guest's only way out is the supervisor's proxy; allowed, denied and resumed" {
  require_vm
  local id port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$BATS_TEST_TMPDIR/www"
  echo the-solution >"$BATS_TEST_TMPDIR/www/answer.txt"
  bg python3 -m http.server "$port" --bind 127.0.0.1 --directory "$BATS_TEST_TMPDIR/www"
  for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
    sleep 0.1
  done
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" ||
    { echo "the host's web server did not start" >&2; false; }
  printf '{"image":"busybox:1","network":{"mode":"proxy","allow":["127.0.0.1:%s"]}}' "$port" \
    >"$BATS_TEST_TMPDIR/spec.json"
  id=$(dsec-vm create --spec "$BATS_TEST_TMPDIR/spec.json" | jq -r .id)
  echo "$id" >>"$SB_IDS"
  [ "$(vm_out "$id" sh -c 'echo $HTTP_PROXY')" = "http://127.0.0.1:3128" ]
  [ "$(vm_out "$id" wget -q -O- "http://127.0.0.1:$port/answer.txt")" = the-solution ]
  # a module proxy is denied by default, and without the proxy there is no way
  run -1 dsec-vm exec "$id" -- wget -q -O- "http://proxy.golang.org:$port/x"
  run dsec-vm exec "$id" -- sh -c "unset http_proxy HTTP_PROXY; wget -q -T 3 -O- http://127.0.0.1:$port/answer.txt"
  [ "$status" -ne 0 ]
  jq -e '.stdout == ""' <<<"$output"
  [ "$(vm_out "$id" sh -c 'ls /sys/class/net')" = lo ]
  dsec-vm events "$id" | jq -se --argjson p "$port" \
    'any(.type == "network" and .host == "127.0.0.1" and .port == $p and .allowed)'
  dsec-vm events "$id" | jq -se 'any(.type == "network" and .host == "proxy.golang.org" and (.allowed | not))'
  # the relay comes back with a resumed VM
  dsec-vm suspend "$id" >/dev/null
  dsec-vm resume "$id" >/dev/null
  [ "$(vm_out "$id" wget -q -O- "http://127.0.0.1:$port/answer.txt")" = the-solution ]
}

@test "a guest cannot fill the host's disk through its console, nor hang an exec past its deadline" {
  require_vm
  local id q
  id=$(vm_create)
  dsec-vm exec --timeout 120 "$id" -- sh -c 'head -c 1500000 /dev/zero | tr "\0" x > /dev/console'
  [ "$(stat -c %s "$DSEC_ROOT/sandboxes/$id/console.log")" -le $((1 << 20)) ]
  # the agent's ports are not in the guest's /dev
  [ -z "$(vm_out "$id" sh -c 'ls /dev | grep ^vport || true')" ]
  # a guest that does not answer (QEMU stopped here) is a timeout 15 s
  # after the exec's own, and the VM goes on afterwards
  q=$(qemu_pids)
  kill -STOP "$q"
  run -124 dsec-vm exec --timeout 1 "$id" -- sleep 5
  kill -CONT "$q"
  jq -e '.timed_out == true and (.error | test("deadline"))' <<<"$output"
  dsec-vm events "$id" | jq -se 'any(.type == "guest_unresponsive")'
  [ "$(vm_out "$id" echo alive)" = alive ]
}

@test "run --attach writes the command's output; a protect path that is not there is bad input (3)" {
  require_vm
  run -3 --separate-stderr dsec-vm run --rm --attach --image busybox:1 -- \
    sh -c 'echo out; echo err >&2; exit 3'
  [ "$output" = out ]
  [ "$stderr" = err ]
  run -3 --separate-stderr dsec-vm create --image busybox:1 --protect /no/such/grader
  [[ $stderr == *"/no/such/grader does not exist"* ]]
  sb_track
  [ -z "$(dsec-vm ps | jq -r .id)" ]
}

@test "idle_action suspend: an idle VM is suspended to a file, and resumes with its state" {
  require_vm
  local id
  printf '{"image":"busybox:1","idle_timeout_s":3,"idle_action":"suspend"}' \
    >"$BATS_TEST_TMPDIR/spec.json"
  id=$(dsec-vm create --spec "$BATS_TEST_TMPDIR/spec.json" | jq -r .id)
  echo "$id" >>"$SB_IDS"
  dsec-vm exec "$id" -- sh -c 'echo before > /state'
  sb_wait_state "$id" suspended 300
  [ -s "$DSEC_ROOT/sandboxes/$id/vm.snap" ]
  [ -z "$(qemu_pids)" ]
  dsec-vm resume "$id" >/dev/null
  [ "$(vm_out "$id" cat /state)" = before ]
}

@test "a request with an absurd timeout is bad input, not a crash" {
  require_vm
  local id
  id=$(vm_create)
  printf '{"cmd":["true"],"timeout_s":1e308}\n' >"$BATS_TEST_TMPDIR/req.jsonl"
  run -3 dsec-vm exec "$id" --requests "$BATS_TEST_TMPDIR/req.jsonl"
  [ "$(vm_out "$id" echo still)" = still ]
}

@test "session: a microvm's shell keeps cd and variables, a timeout interrupts its command, --stream keeps to the cap" {
  require_vm
  local id out=$BATS_TEST_TMPDIR/stream
  id=$(vm_create)
  run -0 --separate-stderr dsec-vm exec --session s "$id" -- 'cd /tmp; V=kept'
  jq -e '.session == "s" and .exit_code == 0' <<<"$output"
  run -124 --separate-stderr dsec-vm exec --session s --timeout 1 "$id" -- 'sleep 30'
  jq -e '.timed_out == true and .signal == 2 and (has("session_lost") | not)' <<<"$output"
  run -0 --separate-stderr dsec-vm exec --session s "$id" -- 'pwd; echo $V'
  jq -e '.stdout == "/tmp\nkept\n"' <<<"$output"
  dsec-vm exec --stream --session s --max-output 100 "$id" -- "pwd; head -c 5000 /dev/zero | tr '\\0' z; echo err >&2" >"$out"
  jq -e -s 'map(.type) | .[-1] == "result" and (.[:-1] | length > 0 and all(. == "output"))' "$out"
  [ "$(jq -r 'select(.type == "output" and .fd == 1) | .data_b64' "$out" |
    while IFS= read -r b; do base64 -d <<<"$b"; done | wc -c)" -eq 100 ]
  jq -e -s '.[-1] | .session == "s" and .stdout_bytes == 5005 and .truncated == true and .stderr == "err\n"' "$out"
  run -0 --separate-stderr dsec-vm session ls "$id"
  jq -e '.sessions | length == 1 and .[0].name == "s" and .[0].state == "idle"' <<<"$output"
}

@test "session: a microvm's sessions survive suspend and resume (its memory keeps the shell)" {
  require_vm
  local id
  id=$(vm_create)
  dsec-vm exec --session s "$id" -- 'cd /tmp; V=kept' >/dev/null
  run -0 --separate-stderr dsec-vm suspend "$id"
  run -0 --separate-stderr dsec-vm resume "$id"
  run -0 --separate-stderr dsec-vm session ls "$id" s
  jq -e '.sessions[0].state == "idle"' <<<"$output"
  run -0 --separate-stderr dsec-vm exec --session s "$id" -- 'pwd; echo $V'
  jq -e '.stdout == "/tmp\nkept\n" and (has("session_lost") | not)' <<<"$output"
  dsec-vm events "$id" | jq -se 'any(.type == "session_lost") | not'
}

@test "session: a microvm's session results carry accelerator, as every VM result does" {
  require_vm
  local id
  id=$(vm_create)
  run -0 --separate-stderr dsec-vm exec --session s "$id" -- true
  jq -e '.session == "s" and (.accelerator == "tcg" or .accelerator == "kvm")' <<<"$output"
}

@test "terminal: exec --tty runs on the guest's devpts (tty, size, typed input); a shell from a terminal gives its exit status back" {
  require_vm
  local id
  id=$(vm_create)
  run -0 --separate-stderr dsec-vm exec --tty-size 100x30 "$id" -- sh -c 'tty; stty size; echo err >&2'
  jq -e '(.stdout | test("^/dev/pts/[0-9]+\r\n30 100\r\nerr\r\n$")) and .stderr == ""' <<<"$output"
  printf 'hey\n' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-vm exec --tty --stdin "$BATS_TEST_TMPDIR/in" "$id" -- cat
  jq -e '.stdout == "hey\r\nhey\r\n"' <<<"$output"
  # a person's shell, typed at from a terminal of the test's own
  run -0 --separate-stderr python3 "$DSEC_SRCDIR/tests/helpers/ptydrive.py" --timeout 120 \
    --size 91x33 --expect '/ # ' --send 'stty size\n' --expect '\r\n33 91\r\n' \
    --expect '/ # ' --send 'exit 3\n' -- dsec-vm shell "$id"
  jq -e '.status == 3 and .restored == true' <<<"$output"
  dsec-vm trajectory "$id" |
    jq -se 'map(.request.tty) == [true, true, true] and .[2].request.interactive == true and .[2].result.exit_code == 3'
}
