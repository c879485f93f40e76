#!/usr/bin/env bats
# Containers and fncall sandboxes run from their layers' EROFS images: one
# read-only mount per layer per host ($DSEC_RUN/layers/<hex>/mnt), shared
# by every sandbox that uses the layer and idmapped into each; nothing is
# extracted at create.  Directories only as the fallback, said in the
# record.  A Debian-like image (setuid and setgid files, device nodes)
# imports with no flags; its setuid bits stay inside the sandbox.  The
# reaper unmounts the layers no sandbox uses, loop devices included.
# Every test gets its own store with busybox:1 in it; teardown removes
# every sandbox, unmounts the test's layer mounts and checks that nothing
# (cgroup, process, loop device) is left.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
  flock /tmp/dsec-make.lock cp "$DSEC_BUILDDIR/dsec-reap" \
    "$BATS_FILE_TMPDIR/bin/dsec-reap"
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
  BB=$(jq -r '.layers[0].digest' <<<"$(dsec-layer inspect busybox:1)")
  BBHEX=${BB#sha256:}
  NODES=()
}

teardown() {
  local node ids
  # the other nodes' sandboxes and layer mounts (tests that make nodes)
  for node in "${NODES[@]}"; do
    ids=$(DSEC_ROOT=$node/root DSEC_RUN=$node/run dsec-run ps --all 2>/dev/null | jq -r .id)
    # shellcheck disable=SC2086
    [ -z "$ids" ] || DSEC_ROOT=$node/root DSEC_RUN=$node/run dsec-run rm --force $ids >/dev/null
    echo "$ids" >>"$SB_IDS"
    DSEC_ROOT=$node/root layer_mounts_clean "$node/run"
  done
  sb_teardown
}

# node VAR NAME: a node of this host, its own DSEC_ROOT and DSEC_RUN
# (VAR gets the assignments, for env), sharing the test's DSEC_STORE
node() {
  local d=$DSEC_FILE_RUN/$BATS_TEST_NUMBER-$2
  mkdir -p -m 711 "$d"
  NODES+=("$d")
  printf -v "$1" '%s' "DSEC_ROOT=$d/root DSEC_RUN=$d/run"
}

# host_mounts HEX: how many times this host has layer HEX mounted.
host_mounts() {
  awk -v p="$DSEC_RUN/layers/$1/mnt" '$2 == p' /proc/self/mounts | wc -l
}

# store_bytes: the bytes the store takes on disk.
store_bytes() {
  du -sB1 "$(store_dir)" | cut -f1
}

@test "a container runs from its layer's EROFS image: said in the record, nothing extracted, the image idmapped in the sandbox" {
  local before id sup
  # the pull made the image, once per store
  [ -f "$(store_dir)/layers/$BBHEX/layer.erofs" ]
  [ ! -x "$(store_dir)/layers/$BBHEX/layer.erofs" ]
  before=$(store_bytes)
  run -0 --separate-stderr dsec-run create --image busybox:1
  jq_ok '.layer_format == "erofs" and (has("erofs_unavailable") | not)'
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  run -0 --separate-stderr dsec-run inspect "$id"
  jq_ok '.layer_format == "erofs" and .environment.layer_format == "erofs" and
    (.environment.erofs_backing | IN("file", "loop")) and
    ([.environment.layers[] | .format == "erofs" and (.path | endswith("/layer.erofs"))] | all)'
  # nothing extracted: no rootfs/, the store took no byte more
  [ ! -e "$(store_dir)/layers/$BBHEX/rootfs" ]
  [ "$(store_bytes)" -eq "$before" ]
  # the host's mount: read-only, nosuid, nodev, in a directory of root's only
  [ "$(host_mounts "$BBHEX")" -eq 1 ]
  awk -v p="$DSEC_RUN/layers/$BBHEX/mnt" '$2 == p && $3 == "erofs" && $4 ~ /(^|,)ro(,|$)/ &&
    $4 ~ /nosuid/ && $4 ~ /nodev/ { ok = 1 } END { exit !ok }' /proc/self/mounts
  [ "$(stat -c %a "$DSEC_RUN/layers")" = 700 ]
  # in the supervisor's namespace: its own idmapped clone, and none of the
  # host's layer mounts
  sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
  # (where the kernel takes layers as descriptors, overlayfs holds the
  # clone and no mount of it is in the namespace)
  if [ -e "$DSEC_RUN/$id/lower" ]; then
    grep -E " $DSEC_RUN/$id/lower/0 .*idmapped.* - erofs " "/proc/$sup/mountinfo"
  else
    ! grep -q " - erofs " "/proc/$sup/mountinfo"
    grep -qE " $DSEC_RUN/$id/rootfs .* - overlay " "/proc/$sup/mountinfo"
  fi
  ! grep -q " $DSEC_RUN/layers" "/proc/$sup/mountinfo"
  # and the sandbox's root owns its files
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'stat -c "%u %a" /bin/busybox; echo x >/tmp/f && cat /tmp/f'
  jq_ok '.exit_code == 0 and .stdout == "0 755\nx\n"'
}

@test "sandboxes of one layer share one host mount; fncall too; each goes without disturbing the others" {
  local a b f
  a=$(sb_create)
  b=$(sb_create)
  run -0 --separate-stderr dsec-run create --backend fncall --image busybox:1
  jq_ok '.layer_format == "erofs"'
  f=$(jq -r .id <<<"$output")
  echo "$f" >>"$SB_IDS"
  [ "$(host_mounts "$BBHEX")" -eq 1 ]
  run -0 --separate-stderr dsec-run exec "$f" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
  dsec-run rm --force "$a" >/dev/null
  run -0 --separate-stderr dsec-run exec "$b" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
  [ "$(host_mounts "$BBHEX")" -eq 1 ]
}

@test "a layer whose store predates EROFS images gets one at the first sandbox, once" {
  local id
  rm "$(store_dir)/layers/$BBHEX/layer.erofs" "$(store_dir)/layers/$BBHEX/layer.erofs.json"
  id=$(sb_create)
  [ -f "$(store_dir)/layers/$BBHEX/layer.erofs" ]
  dsec-run inspect "$id" | jq -e '.layer_format == "erofs"'
  dsec-layer inspect "$BB" | jq -e '.erofs.compression == "lz4" and (.materialised | index("erofs"))'
  [ ! -e "$(store_dir)/layers/$BBHEX/rootfs" ]
}

@test "a conversion's scratch tree is in memory (/dev/shm) or in the store, and gone after; stale ones of ours go, others' stay" {
  local l=$(store_dir)/layers/$BBHEX key stale foreign other
  # scratch trees are named for the store (device.inode of its directory)
  key=$(stat -c '%d %i' "$(store_dir)" | awk '{ printf("%x.%x", $1, $2) }')
  stale=/dev/shm/dsec-$key-$BBHEX-erofs-tree.tmp-stale
  foreign=/dev/shm/dsec-$key-$BBHEX-erofs-tree.tmp-foreign
  # another store's conversion of the same layer, at work now
  other=/dev/shm/dsec-1.1-$BBHEX-erofs-tree.tmp-other
  # what a killed conversion left, and a look-alike another user made
  mkdir -p "$stale/tree" "$foreign" "$other/tree"
  chown nobody "$foreign"
  rm "$l/layer.erofs" "$l/layer.erofs.json"
  run -0 --separate-stderr dsec-layer materialise --format erofs "$BB"
  [ -f "$l/layer.erofs" ]
  [ ! -e "$stale" ] && [ -d "$foreign" ] && [ -d "$other/tree" ]
  rmdir "$foreign" "$other/tree" "$other"
  [ -z "$(ls -d /dev/shm/dsec-"$key"-"$BBHEX"-* 2>/dev/null)" ]
  [ -z "$(ls -d "$l"/*.tmp-* 2>/dev/null)" ]
  # the same in the store when asked (or when memory is short)
  rm "$l/layer.erofs" "$l/layer.erofs.json"
  run -0 --separate-stderr env DSEC_EROFS_SCRATCH=disk dsec-layer materialise --format erofs "$BB"
  [ -f "$l/layer.erofs" ]
  [ -z "$(ls -d "$l"/*.tmp-* 2>/dev/null)" ]
  run -0 --separate-stderr dsec-run create --image busybox:1
  echo "$output" | jq -r .id >>"$SB_IDS"
  jq_ok '.layer_format == "erofs"'
}

@test "fallback: layers as directories when EROFS cannot be used (DSEC_LAYER_FORMAT=dir), said in the record" {
  local id
  DSEC_LAYER_FORMAT=dir run -0 --separate-stderr dsec-run create --image busybox:1
  jq_ok '.layer_format == "dir" and (.erofs_unavailable | test("DSEC_LAYER_FORMAT"))'
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  [ -d "$(store_dir)/layers/$BBHEX/rootfs" ]
  [ "$(host_mounts "$BBHEX")" -eq 0 ]
  run -0 --separate-stderr dsec-run inspect "$id"
  jq_ok '.environment.layers[0].format == "dir" and (.environment.layers[0].path | endswith("/rootfs"))'
  run -0 --separate-stderr dsec-run exec "$id" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
}

@test "fallback: a supervisor keeps none of its creator's descriptors, so serve ends when its input does" {
  # the layer slots of a directory fallback once kept what the creator had
  # there: a pipe of serve's, held open by the supervisor, hung serve
  local id sup fd ids
  # what the caller has open at 4 and 5 (where the layers' slots are)
  DSEC_LAYER_FORMAT=dir dsec-run create --image busybox:1 \
    4>"$BATS_TEST_TMPDIR/held4" 5>"$BATS_TEST_TMPDIR/held5" >"$BATS_TEST_TMPDIR/rec"
  ids=$(jq -r .id "$BATS_TEST_TMPDIR/rec")
  echo "$ids" >>"$SB_IDS"
  # three at once through serve: each request's process has serve's other
  # pipes open
  run -0 --separate-stderr env DSEC_LAYER_FORMAT=dir timeout 120 dsec-run serve < <(
    for r in a b c; do
      echo '{"op":"create","rid":"'$r'","spec":{"image":"busybox:1"}}'
    done)
  jq -r '.id // empty' <<<"$output" >>"$SB_IDS"
  jq -se 'length == 3 and all(.[]; .layer_format == "dir")' <<<"$output"
  ids="$ids $(jq -r .id <<<"$output")"
  # an idle supervisor holds no pipe and nothing of its caller's
  for id in $ids; do
    sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
    for fd in /proc/"$sup"/fd/*; do
      [[ $(readlink "$fd") != pipe:* && $(readlink "$fd") != "$BATS_TEST_TMPDIR"/held* ]] || {
        echo "$id's supervisor holds $(readlink "$fd") at ${fd##*/}" >&2
        false
      }
    done
  done
}

@test "the reaper unmounts layers no sandbox uses, keeps the others; a loop device goes with its last sandbox" {
  local a b img
  # a second layer on top, mounted through a loop device
  mkdir -p "$BATS_TEST_TMPDIR/top/opt"
  echo top >"$BATS_TEST_TMPDIR/top/opt/top"
  dsec-layer create --dir "$BATS_TEST_TMPDIR/top" --name top@1 >/dev/null
  top=$(dsec-layer inspect top@1 | jq -r .digest)
  a=$(DSEC_EROFS_BACKING=loop sb_create --layer top@1)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.environment.erofs_backing == "loop"'
  img=$(store_dir)/layers/${top#sha256:}/layer.erofs
  losetup -j "$img" | grep -q loop
  b=$(sb_create)
  dsec-run rm --force "$a" >/dev/null
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s '[.[] | select(.what == "layer_mount")] | length == 1 and
    .[0].id == $t and .[0].action == "would unmount" and .[0].backing == "loop"' --arg t "$top"
  [ "$(host_mounts "${top#sha256:}")" -eq 1 ]
  run -0 --separate-stderr dsec-reap
  out_jq -s '[.[] | select(.what == "layer_mount")] | length == 1 and
    .[0].id == $t and .[0].action == "unmounted"' --arg t "$top"
  [ "$(host_mounts "${top#sha256:}")" -eq 0 ]
  [ "$(host_mounts "$BBHEX")" -eq 1 ]
  # no mount left, so no loop device either
  for _ in $(seq 20); do
    [ -z "$(losetup -j "$img")" ] && break
    sleep 0.1
  done
  [ -z "$(losetup -j "$img")" ]
  # the sandbox left runs on; once it goes, the last mounts go too
  run -0 --separate-stderr dsec-run exec "$b" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
  dsec-run rm --force "$b" >/dev/null
  run -0 --separate-stderr dsec-reap
  out_jq -s '[.[] | select(.what == "layer_mount")] | length == 1'
  [ -z "$(awk -v r="$DSEC_RUN/layers" 'index($2, r) == 1' /proc/self/mounts)" ]
}

@test "a sandbox whose host mount was unmounted runs on from its own clone, and the next one mounts the layer again" {
  local a b
  a=$(sb_create)
  umount -l "$DSEC_RUN/layers/$BBHEX/mnt"
  [ "$(host_mounts "$BBHEX")" -eq 0 ]
  run -0 --separate-stderr dsec-run exec "$a" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
  b=$(sb_create)
  [ "$(host_mounts "$BBHEX")" -eq 1 ]
  run -0 --separate-stderr dsec-run exec "$b" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
}

# with_big OUT: the busybox rootfs and /big, 4 MiB that do not compress
with_big() {
  python3 - "$(busybox_tar)" "$1" <<'PY'
import io, os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
with tarfile.open(src) as t, tarfile.open(out, "w") as o:
    for m in t.getmembers():
        o.addfile(m, t.extractfile(m) if m.isfile() else None)
    ti = tarfile.TarInfo("big")
    ti.mode, ti.size = 0o644, 4 << 20
    o.addfile(ti, io.BytesIO(os.urandom(ti.size)))
PY
}

# big_create: a sandbox of big:1 (its id)
big_create() {
  local rec
  rec=$(dsec-run create --image big:1) || return
  jq -r '.id' <<<"$rec" | tee -a "$SB_IDS"
}

# resident FILE: the bytes of FILE in the page cache
resident() {
  fincore --bytes --noheadings --output RES "$1"
}

# uncache FILE: FILE's clean pages out of the page cache
uncache() {
  python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}

# rm_noted ID [--force]: removes sandbox ID and waits for its supervisor's
# exit, which notes the hot set after rm has its answer
rm_noted() {
  local pid n
  pid=$(dsec-run inspect "$1" | jq -r .supervisor_pid)
  dsec-run rm "${@:2}" "$1" >/dev/null
  for ((n = 0; n < 600; n++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  echo "the supervisor of $1 ($pid) did not exit" >&2
  return 1
}

@test "an image's hot set: what its sandboxes read is noted beside it and prefetched when a host mounts it again" {
  local id hex img hot size n
  command -v fincore >/dev/null || skip "needs fincore (util-linux)"
  with_big "$BATS_TEST_TMPDIR/big.tar"
  run -0 --separate-stderr dsec-pull --name big:1 "tar:$BATS_TEST_TMPDIR/big.tar"
  hex=$(dsec-layer inspect big:1 | jq -r '.layers[0].digest | ltrimstr("sha256:")')
  img=$(store_dir)/layers/$hex/layer.erofs
  hot=$(store_dir)/layers/$hex/erofs.hot
  size=$(stat -c %s "$img")
  # the pull wrote the image and left none of it cached: no hot set yet
  [ "$(resident "$img")" -lt $((2 << 20)) ]
  [ ! -e "$hot" ]
  # a sandbox that reads busybox only: /big is not in the set
  id=$(big_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'cat /bin/busybox >/dev/null'
  rm_noted "$id"
  jq -e --argjson s "$size" '.size == $s and .page > 0 and .bytes > 0 and
    .bytes < $s - (3 * 1048576) and (.ranges | length) > 0 and
    ([.ranges[] | .[0] >= 0 and .[1] > 0 and .[0] + .[1] <= $s] | all)' "$hot"
  # one that reads /big: the set grows (a smaller one never replaces it)
  id=$(big_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'cat /big >/dev/null'
  rm_noted "$id"
  jq -e '.bytes >= 4 * 1048576' "$hot"
  # a host that mounts the image with none of it cached reads the set
  # ahead, as the mount is made
  layer_mounts_clean
  uncache "$img"
  [ "$(resident "$img")" -lt $((2 << 20)) ]
  DSEC_DEBUG=1 run -0 --separate-stderr dsec-run create --image big:1
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  [[ $stderr == *"prefetching $img ("* ]]
  for ((n = 0; n < 100; n++)); do
    [ "$(resident "$img")" -ge $((4 << 20)) ] && break
    sleep 0.1
  done
  [ "$(resident "$img")" -ge $((4 << 20)) ]
  dsec-run rm --force "$id" >/dev/null
  # a record that is not one (or is for another image) is ignored
  layer_mounts_clean
  echo '{"size": 1, "ranges": "x"}' >"$hot"
  id=$(big_create)
  run -0 --separate-stderr dsec-run exec "$id" -- true
  rm_noted "$id" --force
  jq -e --argjson s "$size" '.size == $s' "$hot"
  # it is the store's: verify says nothing of it
  run -0 --separate-stderr dsec-layer verify
}

@test "an image's hot set is not noted while dsec-layer rm or gc holds the store: the removal wins" {
  local id hex hot lock
  with_big "$BATS_TEST_TMPDIR/big.tar"
  run -0 --separate-stderr dsec-pull --name big:1 "tar:$BATS_TEST_TMPDIR/big.tar"
  hex=$(dsec-layer inspect big:1 | jq -r '.layers[0].digest | ltrimstr("sha256:")')
  hot=$(store_dir)/layers/$hex/erofs.hot
  rm -f "$hot"
  id=$(big_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'cat /big >/dev/null'
  # the collector's lock, as dsec-layer rm and gc take it (exclusive):
  # the supervisor, noting after rm has its answer, leaves the layer alone
  exec {lock}>"$(store_dir)/locks/gc"
  flock -x "$lock"
  rm_noted "$id"
  exec {lock}>&-
  [ ! -e "$hot" ]
  run -0 bash -c "ls '$(store_dir)/layers/$hex' | grep -c tmp || true"
  [ "$output" = 0 ]
  # unlocked, the next sandbox's end notes it
  id=$(big_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'cat /big >/dev/null'
  rm_noted "$id"
  jq -e '.bytes >= 4 * 1048576' "$hot"
}

# debian_like OUT EUID: the busybox rootfs with what distribution images
# carry: a setuid-root copy of busybox (su), a setgid one (unix_chkpwd,
# group shadow), a setuid hardlink, a file with file capabilities, /dev
# nodes; and EUID, a static program printing its effective uid, setuid
# root (usr/bin/euid).
debian_like() {
  python3 - "$(busybox_tar)" "$1" "$2" <<'PY'
import io, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
euid = open(sys.argv[3], "rb").read()
with tarfile.open(src) as t, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as o:
    bb = None
    for m in t.getmembers():
        data = t.extractfile(m).read() if m.isfile() else None
        if m.name in ("./bin/busybox", "bin/busybox"):
            bb = data
        if m.name in ("./etc/group", "etc/group"):
            data += b"shadow:x:42:\n"
            m.size = len(data)
        o.addfile(m, io.BytesIO(data) if data is not None else None)
    def add(name, mode, gid=0, pax=None, data=bb):
        ti = tarfile.TarInfo(name)
        ti.mode, ti.uid, ti.gid, ti.size = mode, 0, gid, len(data)
        if pax:
            ti.pax_headers = pax
        o.addfile(ti, io.BytesIO(data))
    add("usr/bin/su", 0o4755)
    add("usr/bin/euid", 0o4755, data=euid)
    add("usr/sbin/unix_chkpwd", 0o2755, gid=42)
    ln = tarfile.TarInfo("usr/bin/su-link")
    ln.type, ln.linkname, ln.mode = tarfile.LNKTYPE, "usr/bin/su", 0o4755
    o.addfile(ln)
    # cap_net_raw+ep, v2
    cap = "\x01\x00\x00\x02\x00\x20\x00\x00" + "\x00" * 12
    add("usr/bin/ping", 0o755, pax={"SCHILY.xattr.security.capability": cap})
    for name, kind, major, minor in (("dev/null", tarfile.CHRTYPE, 1, 3),
                                     ("dev/sda", tarfile.BLKTYPE, 8, 0),
                                     ("dev/console", tarfile.CHRTYPE, 5, 1)):
        ti = tarfile.TarInfo(name)
        ti.type, ti.devmajor, ti.devminor, ti.mode = kind, major, minor, 0o666
        o.addfile(ti)
PY
}

@test "a Debian-like image imports with no flags: setuid, setgid, capabilities and hard links kept in its EROFS image only, device nodes dropped and counted" {
  local f id hex
  command -v gcc >/dev/null || skip "needs gcc"
  printf '#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf("%%d\\n", (int) geteuid()); return 0; }\n' \
    >"$BATS_TEST_TMPDIR/euid.c"
  gcc -static -O2 -o "$BATS_TEST_TMPDIR/euid" "$BATS_TEST_TMPDIR/euid.c" ||
    skip "needs a static C library"
  f=$BATS_TEST_TMPDIR/debian-like.tar
  debian_like "$f" "$BATS_TEST_TMPDIR/euid"
  run -0 --separate-stderr dsec-pull --name deb:1 "tar:$f"
  jq_ok '.setuid_files == 2 and .setgid_files == 1 and .capability_files == 1 and
    .dropped_device_nodes == 3 and .layers[0].device_nodes == 3 and .layers[0].erofs == true'
  hex=$(jq -r '.layers[0].digest | ltrimstr("sha256:")' <<<"$output")
  dsec-layer inspect "sha256:$hex" | jq -e '.erofs.setuid_files == 2 and .erofs.dropped_device_nodes == 3'
  # nothing on the host is a setuid or setgid file, or a device node
  [ -z "$(find "$DSEC_ROOT" -xdev \( -perm /6000 -o -type b -o -type c \) -print)" ]
  run -0 --separate-stderr dsec-run create --image deb:1 --user 1000:1000
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  jq_ok '.layer_format == "erofs"'
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c '
    stat -c "%a %u %g %h %n" /usr/bin/su /usr/sbin/unix_chkpwd /usr/bin/su-link
    ls /dev/sda /dev/console 2>&1 | grep -c "No such file"
    stat -c "%a %u" /usr/bin/euid
    /usr/bin/euid'
  jq_ok '.exit_code == 0'
  [[ $(jq -r .stdout <<<"$output") == *"4755 0"$'\n'* ]]
  [[ $(jq -r .stdout <<<"$output") == *"4755 0 0 2 /usr/bin/su"* ]]
  [[ $(jq -r .stdout <<<"$output") == *"2755 0 42 1 /usr/sbin/unix_chkpwd"* ]]
  [[ $(jq -r .stdout <<<"$output") == *"4755 0 0 2 /usr/bin/su-link"* ]]
  # the image's device nodes are not the sandbox's
  [[ $(jq -r .stdout <<<"$output") == *$'\n2\n'* ]]
  # a setuid-root program does not make the sandbox's user root: it runs
  # under no_new_privs, on a nosuid root
  [ "$(jq -j .stdout <<<"$output" | tail -1)" = 1000 ]
  # the image's setuid bits act in no mount of the host: the host mount
  # is nosuid, under a directory only root enters
  awk -v p="$DSEC_RUN/layers/$hex/mnt" '$2 == p && $4 ~ /nosuid/ { ok = 1 } END { exit !ok }' /proc/self/mounts
  [ "$(stat -c %a "$DSEC_RUN/layers")" = 700 ]
  # as a directory layer (the fallback) it has none of them
  run -0 --separate-stderr env DSEC_LAYER_FORMAT=dir dsec-run create --image deb:1
  echo "$(jq -r .id <<<"$output")" >>"$SB_IDS"
  [ "$(stat -c %a "$(store_dir)/layers/$hex/rootfs/usr/bin/su")" = 755 ]
  [ -z "$(find "$DSEC_ROOT" -xdev \( -perm /6000 -o -type b -o -type c \) -print)" ]
}

@test "nodes sharing one store (DSEC_STORE): a layer converted once is mounted by every node from the shared file, nothing written to the store" {
  local store=$BATS_TEST_TMPDIR/shared-store n1 n2 before a b hex
  export DSEC_STORE=$store
  node n1 n1
  node n2 n2
  # n1 pulls, converting each layer once for the store
  env $n1 dsec-pull --name bb:1 "tar:$(busybox_tar)" >/dev/null
  hex=$(env $n1 dsec-layer inspect bb:1 | jq -r '.layers[0].digest | ltrimstr("sha256:")')
  [ -f "$store/layers/$hex/layer.erofs" ]
  before=$(cd "$store" && find . -printf '%p %s %T@\n' | sort | sha256sum)
  # each node mounts it from the shared file, under its own DSEC_RUN
  a=$(env $n1 dsec-run create --image bb:1 | jq -r .id)
  b=$(env $n2 dsec-run create --image bb:1 | jq -r .id)
  env $n2 dsec-run inspect "$b" | jq -e '.layer_format == "erofs"'
  for n in n1 n2; do
    awk -v p="$DSEC_FILE_RUN/$BATS_TEST_NUMBER-$n/run/layers/$hex/mnt" -v i="$store/layers/$hex/layer.erofs" \
      '$2 == p && $1 == i { ok = 1 } END { exit !ok }' /proc/self/mounts
  done
  run -0 --separate-stderr env $n2 dsec-run exec "$b" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
  # the store is as it was: not a byte, not a file, not a time changed
  [ "$(cd "$store" && find . -printf '%p %s %T@\n' | sort | sha256sum)" = "$before" ]
  # one node's reaper unmounts its own mount, never the other's
  env $n1 dsec-run rm --force "$a" >/dev/null
  env $n1 dsec-reap | jq -se '[.[] | select(.what == "layer_mount")] | length == 1'
  [ -z "$(awk -v r="$DSEC_FILE_RUN/$BATS_TEST_NUMBER-n1/run/layers" 'index($2, r) == 1' /proc/self/mounts)" ]
  env $n2 dsec-reap | jq -se '[.[] | select(.what == "layer_mount")] | length == 0'
  run -0 --separate-stderr env $n2 dsec-run exec "$b" -- cat /etc/hostname
  jq_ok '.stdout == "dsec\n"'
}

@test "nodes sharing one store: two first sandboxes of a layer without an image at once make one image, both run from it" {
  local store=$BATS_TEST_TMPDIR/shared-store n1 n2 hex p1 p2
  export DSEC_STORE=$store
  node n1 n1
  node n2 n2
  DSEC_LAYER_FORMAT=dir env $n1 dsec-pull --name bb:1 "tar:$(busybox_tar)" >/dev/null
  hex=$(env $n1 dsec-layer inspect bb:1 | jq -r '.layers[0].digest | ltrimstr("sha256:")')
  [ ! -e "$store/layers/$hex/layer.erofs" ]
  env $n1 dsec-run create --image bb:1 >"$BATS_TEST_TMPDIR/c1" &
  p1=$!
  env $n2 dsec-run create --image bb:1 >"$BATS_TEST_TMPDIR/c2" &
  p2=$!
  wait "$p1"
  wait "$p2"
  jq -e '.layer_format == "erofs"' "$BATS_TEST_TMPDIR/c1"
  jq -e '.layer_format == "erofs"' "$BATS_TEST_TMPDIR/c2"
  [ "$(find "$store/layers/$hex" -name 'layer.erofs*' | sort | xargs -n1 basename | tr '\n' ' ')" = "layer.erofs layer.erofs.json " ]
  [ -z "$(find "$store" -name '*.tmp-*')" ]
}

# The store on a FUSE-mounted distributed file system: GlusterFS from
# Debian's archive, one brick, served and mounted inside a network
# namespace of the test's own (glusterd refuses loopback addresses for a
# brick: the namespace's lo gets one of a private range, which no packet
# leaves).  Skipped without glusterfs-server, or when a glusterd runs
# already (the host's own: not ours to touch).
@test "a store on GlusterFS (FUSE): two nodes mount a layer's EROFS image from it, idmapped, extracting nothing" {
  command -v glusterd >/dev/null && command -v gluster >/dev/null ||
    skip "needs glusterfs-server and glusterfs-client"
  ! pgrep -x glusterd >/dev/null || skip "a glusterd runs on this host already"
  local ns=dsec-gl-$$ d=$DSEC_FILE_RUN/$BATS_TEST_NUMBER-gl
  mkdir -p -m 711 "$d"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add 10.254.77.1/32 dev lo
  run --separate-stderr timeout 300 ip netns exec "$ns" bash -s "$d" "$(busybox_tar)" <<'SH'
set -u
d=$1 tar=$2 vol=dsec$$ gpid=
cleanup() {
  for n in n1 n2; do
    DSEC_ROOT=$d/$n/root DSEC_RUN=$d/$n/run dsec-run ps --all 2>/dev/null |
      jq -r .id | xargs -r env DSEC_ROOT=$d/$n/root DSEC_RUN=$d/$n/run dsec-run rm --force >/dev/null 2>&1
    awk -v r="$d/$n/run/layers" 'index($2, r) == 1 { print $2 }' /proc/self/mounts |
      sort -r | xargs -r -n1 umount -l
  done
  umount -l "$d/mnt" 2>/dev/null
  gluster --mode=script volume stop "$vol" force >/dev/null 2>&1
  gluster --mode=script volume delete "$vol" >/dev/null 2>&1
  [ -z "$gpid" ] || kill "$gpid" 2>/dev/null
  # the brick's and the client's processes, started for this volume
  for p in $(pgrep -f "glusterfs.*$vol"); do kill "$p" 2>/dev/null; done
}
trap cleanup EXIT
mkdir -p "$d/brick" "$d/mnt"
glusterd -N --log-file="$d/glusterd.log" >/dev/null 2>&1 &
gpid=$!
for _ in $(seq 50); do gluster --mode=script volume list >/dev/null 2>&1 && break; sleep 0.2; done
gluster --mode=script volume create "$vol" "10.254.77.1:$d/brick" force >&2 &&
  gluster --mode=script volume start "$vol" >&2 &&
  mount -t glusterfs "10.254.77.1:/$vol" "$d/mnt" || exit 99
export DSEC_STORE=$d/mnt/store
DSEC_ROOT=$d/n1/root DSEC_RUN=$d/n1/run dsec-pull --name bb:1 "tar:$tar" |
  jq -c '{pulled: [.layers[].erofs]}'
hex=$(DSEC_ROOT=$d/n1/root dsec-layer inspect bb:1 | jq -r '.layers[0].digest | ltrimstr("sha256:")')
sync
before=$(awk '{ print $7 }' /sys/class/block/"$(findmnt -no SOURCE -T "$d" | sed 's|/dev/||')"/stat 2>/dev/null)
for n in n1 n2; do
  export DSEC_ROOT=$d/$n/root DSEC_RUN=$d/$n/run
  id=$(dsec-run create --image bb:1 | jq -r .id)
  dsec-run inspect "$id" | jq -c '{node: "'$n'", layer_format, erofs_backing}'
  dsec-run exec "$id" -- sh -c 'stat -c "%u %a" /bin/busybox; cat /etc/hostname' |
    jq -c '{node: "'$n'", stdout}'
  awk -v p="$d/$n/run/layers/$hex/mnt" -v i="$d/mnt/store/layers/$hex/layer.erofs" \
    '$2 == p && $1 == i && $3 == "erofs" { print "{\"mounted_from_gluster\":\"'$n'\"}" }' /proc/self/mounts
done
sync
after=$(awk '{ print $7 }' /sys/class/block/"$(findmnt -no SOURCE -T "$d" | sed 's|/dev/||')"/stat 2>/dev/null)
# (the local disk is shared with whatever else runs: reported, not judged)
echo "{\"local_sectors_written\":$(( ${after:-0} - ${before:-0} ))}"
SH
  ip netns del "$ns"
  sed "s/^/# /" <<<"$output" >&3
  [ "$status" -eq 0 ]
  jq -se 'map(select(.pulled)) == [{pulled: [true]}]' <<<"$output"
  jq -se '[.[] | select(.layer_format)] == [
    {node: "n1", layer_format: "erofs", erofs_backing: "file"},
    {node: "n2", layer_format: "erofs", erofs_backing: "file"}]' <<<"$output"
  jq -se '[.[] | select(.stdout) | .stdout] == ["0 755\ndsec\n", "0 755\ndsec\n"]' <<<"$output"
  jq -se '[.[] | .mounted_from_gluster // empty] == ["n1", "n2"]' <<<"$output"
  [ -z "$(awk -v r="$d" 'index($2, r) == 1' /proc/self/mounts)" ]
}
