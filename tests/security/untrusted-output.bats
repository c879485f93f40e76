#!/usr/bin/env bats
# Everything a sandbox writes is untrusted input (issue #12): its writable
# layer reaches the host only as a tar stream written from the sandbox's
# own side and imported as an untrusted tarball is.  Each test plants in a
# sandbox what attacked the old checkpoint (a setuid file, file
# capabilities, a name that turns into a whiteout, a symlink that a host
# process would follow, a swapped upper directory) and checks what
# reaches the store.
#
# Needs root (dsec-run create does), gcc with a static glibc, python3;
# the microVM tests need QEMU and a guest kernel (skipped without, as in
# tests/dsec-vm.bats).

bats_require_minimum_version 1.5.0

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
load ../helpers/common
load helpers

UNTRUSTED=/opt/attack/untrusted

setup_file() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  local d t
  sec_setup_attack
  d=$BATS_FILE_TMPDIR
  gcc -static -O2 -o "$d/bin/untrusted" "$BATS_TEST_DIRNAME/untrusted.c"
  chmod 0755 "$d/bin/untrusted"
  # the helpers as a layer too, for microVMs and rootless sandboxes
  mkdir -p "$d/tools/opt/attack"
  install -m 0755 "$d/bin/untrusted" "$d/tools/opt/attack/untrusted"
  dsec-layer create --dir "$d/tools" --name tools@1 >/dev/null
  # a file with file capabilities in a layer the operator chose to trust
  # (--keep-setuid): a sandbox that touches it copies it up, caps and all
  python3 "$BATS_TEST_DIRNAME/../helpers/mkevil.py" "$d/caps.tar" caps schily
  dsec-layer create --tar "$d/caps.tar" --keep-setuid --name caps@1 |
    jq -r '.digest | ltrimstr("sha256:")' >"$d/caps.layer"
  # what a grader sees
  t=$d/grader-tree
  mkdir -p "$t/grader"
  echo 42 >"$t/grader/answer"
  dsec-layer create --dir "$t" --name grader@1 >/dev/null
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

# --- helpers of this file ---------------------------------------------------

# privileged_files DIR...: the regular files with a setuid or setgid bit
# and the files with a security.capability xattr under the DIRs, one per
# line; the caps@1 layer (trusted with --keep-setuid by setup_file) aside.
privileged_files() {
  python3 - "$(cat "$BATS_FILE_TMPDIR/caps.layer")" "$@" <<'PY'
import os, stat, sys
skip = sys.argv[1]
for top in sys.argv[2:]:
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d != skip]
        for n in dirs + files:
            p = os.path.join(root, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & 0o6000:
                print(p, oct(st.st_mode))
            if stat.S_ISLNK(st.st_mode):
                continue
            try:
                if "security.capability" in os.listxattr(p, follow_symlinks=False):
                    print(p, "security.capability")
            except OSError:
                pass
PY
}

# assert_no_privileged_files DIR...: privileged_files finds nothing.
assert_no_privileged_files() {
  local found
  found=$(privileged_files "$@")
  [ -z "$found" ] || { echo "privileged files: $found" >&2; return 1; }
}

# layer_members REF: the members of a layer, `tar -tv` style.
layer_members() {
  dsec-layer export "$1" "$BATS_TEST_TMPDIR/export.tar.zst" >/dev/null
  tar --zstd -tvf "$BATS_TEST_TMPDIR/export.tar.zst"
}

# host_dir: a directory on the host with a marker file and directory that
# no checkpoint may archive; world-readable, so that only the way a
# checkpoint reads keeps them out.  Sets $HOSTDIR and $MARKER.
host_dir() {
  MARKER=host-marker-$RANDOM$RANDOM
  HOSTDIR=$BATS_TEST_TMPDIR/hostdir
  mkdir -p "$HOSTDIR/$MARKER-dir"
  echo "host secret" >"$HOSTDIR/$MARKER"
  chmod -R a+rX "$HOSTDIR"
  chmod o+x "$BATS_TEST_TMPDIR"
}

# require_vm: QEMU and a guest kernel, or a skip (a failure in CI).
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

# vm_create [CREATE OPTION]...: a busybox microVM with the tools layer;
# its id in $SB.
vm_create() {
  local out
  out=$(dsec-vm create --image busybox --layer tools@1 "$@") || {
    echo "dsec-vm create failed: $out" >&2
    return 1
  }
  SB=$(jq -r .id <<<"$out")
  echo "$SB" >>"$BATS_TEST_TMPDIR/sandboxes"
  echo "$SB" >>"$BATS_FILE_TMPDIR/all-sandboxes"
}

# --- containers ---------------------------------------------------------------

@test "container: setuid, setgid and file capabilities never reach the store through checkpoint, fork or suspend --release; the records count them" {
  local rec child
  sb_create --layer caps@1
  # a setuid copy of busybox, a setgid file, and the capability file
  # copied up by a chmod (which keeps its security.capability)
  sb_exec sh -c 'mkdir -p /w && cp /bin/busybox /w/suid && chmod 4755 /w/suid &&
    echo x >/w/sgid && chmod 2755 /w/sgid && chmod 755 /bin/ping'
  [ -n "$(privileged_files "$DSEC_ROOT/sandboxes/$SB/upper")" ]

  run -0 --separate-stderr dsec-run checkpoint "$SB"
  rec=$output
  jq -e '.layer | .stripped_setuid == 1 and .stripped_setgid == 1 and
    .stripped_capabilities == 1 and .keep_setuid == false' <<<"$rec"
  assert_event "$SB" '.type == "checkpoint" and .stripped_setuid == 1 and
    .stripped_setgid == 1 and .stripped_capabilities == 1'
  run -0 dsec-layer materialise "$(jq -r .layer.digest <<<"$rec")"
  assert_no_privileged_files "$DSEC_ROOT/store"

  # a fork boots from it: the files are there, without the bits
  run -0 --separate-stderr dsec-run fork "$SB"
  child=$(jq -r .id <<<"$output")
  echo "$child" >>"$BATS_TEST_TMPDIR/sandboxes"
  run -0 --separate-stderr dsec-run exec "$child" -- stat -c '%a %n' /w/suid /w/sgid /bin/ping
  jq -e '.stdout == "755 /w/suid\n755 /w/sgid\n755 /bin/ping\n"' <<<"$output"
  assert_no_privileged_files "$DSEC_ROOT/store"

  # suspend --release: counted too; then nothing of the kind anywhere but
  # in the sandbox's own upper directory (kept, as it wrote it, until a
  # resume; owned by its unprivileged host ids, in a directory only root
  # may enter)
  run -0 --separate-stderr dsec-run suspend --release "$SB"
  jq -e '.type == "suspended" and .layer.stripped_setuid == 1 and
    .layer.stripped_capabilities == 1' <<<"$output"
  [ "$(stat -c %a "$DSEC_ROOT/sandboxes/$SB")" = 700 ]
  mv "$DSEC_ROOT/sandboxes/$SB/upper" "$BATS_TEST_TMPDIR/upper"
  assert_no_privileged_files "$DSEC_ROOT"
  mv "$BATS_TEST_TMPDIR/upper" "$DSEC_ROOT/sandboxes/$SB/upper"
  run -0 --separate-stderr dsec-run resume "$SB"
  run -0 --separate-stderr dsec-run exec "$SB" -- stat -c %a /w/suid
  jq -e '.stdout == "755\n"' <<<"$output"
}

@test "container: .wh. names the agent made do not become whiteouts after checkpoint and resume; the protected /grader is intact" {
  sb_create --layer grader@1 --protect /grader
  # (some of these are refused a write, not a creation: what counts is
  # what is in the writable layer)
  dsec-run exec "$SB" -- sh -c 'touch /.wh.grader /.wh..wh..opq /etc/.wh.passwd \
    /etc/.wh..wh..opq; mkdir /.wh.dir' >/dev/null || true
  [ "$(find "$DSEC_ROOT/sandboxes/$SB/upper" -name '.wh.*' | wc -l)" -eq 5 ]

  run -0 --separate-stderr dsec-run checkpoint "$SB"
  jq -e '.skipped_whiteout_names == 5' <<<"$output"
  run -0 layer_members "$(jq -r .layer.digest <<<"$output")"
  [[ $output != *.wh.* ]]
  assert_event "$SB" '.type == "checkpoint" and .skipped_whiteout_names == 5'

  run -0 --separate-stderr dsec-run suspend --release "$SB"
  jq -e '.skipped_whiteout_names == 5' <<<"$output"
  run -0 --separate-stderr dsec-run resume "$SB"
  sb_exec cat /grader/answer
  jq -e '.stdout == "42\n"' <<<"$output"
  sb_exec sh -c 'ls /etc/passwd /etc/group && ls -a / /etc | grep -c "^\.wh\." || true'
  jq -e '.stdout == "/etc/group\n/etc/passwd\n0\n"' <<<"$output"
}

@test "container: a writable layer that changes a protected path is refused (3), and the sandbox goes on" {
  local upper base
  sb_create --layer grader@1 --protect /grader
  upper=$DSEC_ROOT/sandboxes/$SB/upper
  base=$(stat -c %u "$upper")
  # the sandbox cannot write there (read-only bind, Landlock): the host
  # plays a way around them, straight into the upper directory
  mkdir "$upper/grader"
  echo 0 >"$upper/grader/answer"
  chown -R "$base:$base" "$upper/grader"
  run -3 --separate-stderr dsec-run checkpoint "$SB"
  [[ $stderr == *"protected path /grader"* ]]
  rm -rf "${upper:?}/grader"
  # a whiteout of it (what overlayfs makes of an rm)
  mknod "$upper/grader" c 0 0
  run -3 --separate-stderr dsec-run checkpoint "$SB"
  [[ $stderr == *"deletes /grader"* ]]
  rm -f "$upper/grader"
  # nothing recorded, nothing left frozen
  [ -z "$(dsec-run trajectory "$SB" | jq -c 'select(.type == "checkpoint")')" ]
  assert_alive
  run -0 --separate-stderr dsec-run checkpoint "$SB"
}

@test "container: symlinks in the writable layer are archived as symlinks, never followed to host files" {
  local digest
  host_dir
  sb_create
  sb_exec sh -c "ln -s $HOSTDIR /x && ln -s / /root-link && mkdir -p /w &&
    ln -s $HOSTDIR/$MARKER /w/y && ln -s ../../../../../../../..$HOSTDIR /w/rel"
  # a relative link that climbs out of the layer: refused, as in any
  # tarball
  run -3 --separate-stderr dsec-run checkpoint "$SB"
  [[ $stderr == *"w/rel"*"points out of the layer"* ]]
  sb_exec rm /w/rel
  run -0 --separate-stderr dsec-run checkpoint --name sym@1 "$SB"
  run -0 layer_members sym@1
  [[ $output == *"x -> $HOSTDIR"* ]]
  # the links are there, what they point at is not
  [ -z "$(grep -F "$MARKER" <<<"$output" | grep -v -- ' -> ')" ]
  run -0 --separate-stderr dsec-layer materialise sym@1
  [ -z "$(find "$(jq -r .path <<<"$output")" -name "$MARKER*")" ]
}

@test "rootless container: a directory swapped with a symlink to a host directory during checkpoints never brings host files in" {
  command -v setpriv >/dev/null || skip "needs setpriv (util-linux)"
  [ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo 0)" -gt 0 ] ||
    skip "user namespaces are disabled here"
  local rl id i ok=0 failed=0 digest
  # no freezer without a delegated cgroup: the swap really races the walk
  rl=$BATS_TEST_TMPDIR/rl
  mkdir -p "$rl"
  cp "$(busybox_tar)" "$rl/busybox.tar.gz"
  cp -r "$BATS_FILE_TMPDIR/tools" "$rl/tools"
  chown -R 65534:65534 "$rl"
  host_dir
  nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups \
      env -i PATH="$PATH" HOME="$rl" XDG_DATA_HOME="$rl/data" \
      XDG_RUNTIME_DIR="$rl/run" LC_ALL=C "$@"
  }
  nobody dsec-pull --name bb:1 "tar:$rl/busybox.tar.gz" >/dev/null
  nobody dsec-layer create --dir "$rl/tools" --name tools@1 >/dev/null
  id=$(nobody dsec-run create --image bb:1 --layer tools@1 | jq -r .id)
  [ -n "$id" ]
  [ "$id" != null ]
  run -0 nobody dsec-run exec "$id" -- sh -c "mkdir -p /w/d && echo in >/w/d/f &&
    { $UNTRUSTED swap /w/d $HOSTDIR 120 >/dev/null 2>&1 & }"
  for i in $(seq 10); do
    run --separate-stderr nobody dsec-run checkpoint "$id"
    if [ "$status" -eq 0 ]; then
      ok=$((ok + 1))
      digest=$(jq -r .layer.digest <<<"$output")
      nobody dsec-layer export "$digest" "$rl/data/export.tar.zst" >/dev/null
      if tar --zstd -tvf "$rl/data/export.tar.zst" | grep -F "$MARKER"; then
        nobody dsec-run rm --force "$id"
        false
      fi
    else
      failed=$((failed + 1))
    fi
  done
  echo "# $ok checkpoints made, $failed refused while the tree changed" >&3
  nobody dsec-run rm --force "$id" >/dev/null
  [ -z "$(find "$rl/data" -name "$MARKER*")" ]
}

# --- microVMs --------------------------------------------------------------------

@test "microvm: setuid and capabilities the guest's root made are stripped; a guest that swaps its upper directory for a symlink to a host path gets no host file archived, and no loop device or host mount is made" {
  require_vm
  local sup loops mounts supmounts rec
  host_dir
  vm_create
  sup=$(dsec-vm inspect "$SB" | jq -r .supervisor_pid)
  # (the host's loop devices and mounts that name this file's directories,
  # where the VM's disk is: the rest comes and goes with whatever else
  # runs on the host)
  loops=$(losetup -a | grep -F "$BATS_FILE_TMPDIR" | sort)
  mounts=$(grep -F "$BATS_FILE_TMPDIR" /proc/self/mountinfo | cut -d' ' -f5 | sort)
  supmounts=$(cut -d' ' -f5 "/proc/$sup/mountinfo" | sort)
  run -0 --separate-stderr dsec-vm exec --timeout 120 "$SB" -- sh -c "
    mkdir -p /w && cp /bin/busybox /w/suid && chmod 6755 /w/suid &&
    echo c >/w/cap && $UNTRUSTED setcap /w/cap && touch /.wh.etc &&
    for b in /sys/block/vd*; do
      [ \"\$(cat \$b/serial)\" = dsec-rw ] && dev=\${b##*/}
    done &&
    mkdir /m && mount /dev/\$dev /m && mv /m/upper /m/upper.real &&
    ln -s $HOSTDIR /m/upper && ls -la /m"
  jq -e '.exit_code == 0' <<<"$output"
  run -0 --separate-stderr dsec-vm checkpoint --name vmck@1 "$SB"
  rec=$output
  jq -e '.consistent == true and .skipped_whiteout_names == 1 and
    (.layer | .stripped_setuid == 1 and .stripped_setgid == 1 and
     .stripped_capabilities == 1)' <<<"$rec"
  run -0 layer_members vmck@1
  grep -qE '^-rwxr-xr-x .* w/suid$' <<<"$output"
  [[ $output != *"$MARKER"* ]]
  run -0 dsec-layer materialise vmck@1
  assert_no_privileged_files "$DSEC_ROOT/store"
  # the host read no disk: no loop device, no mount, here or the
  # supervisor's
  [ "$(losetup -a | grep -F "$BATS_FILE_TMPDIR" | sort)" = "$loops" ]
  [ "$(grep -F "$BATS_FILE_TMPDIR" /proc/self/mountinfo | cut -d' ' -f5 | sort)" = "$mounts" ]
  [ "$(cut -d' ' -f5 "/proc/$sup/mountinfo" | sort)" = "$supmounts" ]
  # the VM goes on
  run -0 --separate-stderr dsec-vm exec "$SB" -- cat /w/cap
}

@test "microvm: a stream the host refuses (a device node) or one past the disk's size fails the checkpoint, and the VM goes on" {
  require_vm
  vm_create --disk 64
  run -0 --separate-stderr dsec-vm exec --timeout 120 "$SB" -- mknod /mem c 1 1
  run -3 --separate-stderr dsec-vm checkpoint "$SB"
  [[ $stderr == *"device nodes are not allowed"* ]]
  run -0 --separate-stderr dsec-vm exec --timeout 120 "$SB" -- sh -c 'rm /mem &&
    truncate -s 256M /sparse && echo alive'
  jq -e '.stdout == "alive\n"' <<<"$output"
  # 256 MiB of holes is more than a 64 MiB disk can hold as files
  run -3 --separate-stderr dsec-vm checkpoint "$SB"
  [[ $stderr == *"sparse"*"exceed the limit"* ]]
  run -0 --separate-stderr dsec-vm exec --timeout 120 "$SB" -- sh -c 'rm /sparse && echo alive'
  jq -e '.stdout == "alive\n"' <<<"$output"
  run -0 --separate-stderr dsec-vm checkpoint "$SB"
  dsec-vm trajectory "$SB" | jq -se '[.[] | select(.type == "checkpoint")] | length == 1'
}
