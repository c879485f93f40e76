#!/usr/bin/env bats
# dsec-layer: the command line, create/tag/ls/inspect/rm/export/compose/
# materialise, --scrub-git, and crash safety.  Malicious tarballs are
# tested elsewhere.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert

setup() { common_setup; }

# Mounts and loop devices a test made are listed in $BATS_TEST_TMPDIR/mounts
# ("mnt DIR" and "loop FILE" lines) and undone here, whatever happened;
# so are the processes it started in the background (pids, a line each).
teardown() {
  local list="$BATS_TEST_TMPDIR/mounts" kind path dev p
  if [ -f "$BATS_TEST_TMPDIR/pids" ]; then
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$BATS_TEST_TMPDIR/pids"
  fi
  [ -f "$list" ] || return 0
  tac "$list" | while read -r kind path; do
    case $kind in
      mnt)
        if mountpoint -q "$path"; then
          umount "$path" || umount -l "$path"
        fi
        ;;
      loop)
        for dev in $(losetup -j "$path" -O NAME -n 2>/dev/null); do
          losetup -d "$dev" || true
        done
        ;;
    esac
  done
}

# The store path of a layer's materialised tree.
rootfs_of() { echo "$(store_dir)/layers/${1#sha256:}/rootfs"; }

# A directory holding one of everything a layer must keep.
make_tree() {
  local t=$1
  mkdir -p "$t/sub/deeper"
  printf 'hello\n' >"$t/a.txt"
  printf 'in sub\n' >"$t/sub/b.txt"
  printf 'deep\n' >"$t/sub/deeper/c.txt"
  ln -s ../a.txt "$t/sub/link"
  ln -s /nonexistent/target "$t/dangling"
  printf 'linked\n' >"$t/hard1"
  ln "$t/hard1" "$t/hard2"
  : >"$t/empty"
  truncate -s 10M "$t/sparse"
  printf 'secret\n' >"$t/private"
  chmod 0600 "$t/private"
  printf '#!/bin/sh\n' >"$t/sub/run.sh"
  chmod 0755 "$t/sub/run.sh"
  chmod 0700 "$t/sub/deeper"
  python3 -c 'import os, sys; os.setxattr(sys.argv[1], "user.dsec-test", b"v1")' "$t/a.txt"
}

# FILE list with type and mode, relative to DIR.
tree_list() {
  (cd "$1" && find . -mindepth 1 -printf '%P %y %m\n' | LC_ALL=C sort)
}

# --- the command-line contract ---------------------------------------------

@test "--help prints usage and every command on stdout, exit 0" {
  run -0 --separate-stderr dsec-layer --help
  [[ "$output" == Usage:\ dsec-layer* ]]
  local c
  for c in create tag ls inspect rm export compose materialise verify; do
    [[ "$output" == *"  $c "* ]]
  done
  [ -z "$stderr" ]
  [ ! -e "$DSEC_ROOT" ]
}

@test "--version prints the program and version, exit 0" {
  run -0 --separate-stderr dsec-layer --version
  [[ "$output" =~ ^dsec-layer\ [0-9]+\.[0-9]+ ]]
  [ -z "$stderr" ]
}

@test "an unknown option is a usage error (2)" {
  run -2 --separate-stderr dsec-layer --no-such-option ls
  [ -z "$output" ]
  stderr_has "no-such-option"
}

@test "an unknown command is a usage error (2)" {
  run -2 --separate-stderr dsec-layer frobnicate
  [ -z "$output" ]
  stderr_has "frobnicate"
}

@test "a missing command is a usage error (2)" {
  run -2 --separate-stderr dsec-layer
  [ -z "$output" ]
}

@test "an option of another command is a usage error (2)" {
  run -2 --separate-stderr dsec-layer ls --force
  stderr_has "--force"
  run -2 --separate-stderr dsec-layer inspect --dir /tmp x
  run -2 --separate-stderr dsec-layer rm --format erofs x
  run -2 --separate-stderr dsec-layer materialise --name a@1 x
  run -2 --separate-stderr dsec-layer create --force --dir "$BATS_TEST_TMPDIR"
  run -2 --separate-stderr dsec-layer ls --repair
  run -2 --separate-stderr dsec-layer verify extra
  [ ! -e "$(store_dir)/blobs" ]
}

@test "create with both --dir and --tar, or neither, is a usage error (2)" {
  run -2 --separate-stderr dsec-layer create --dir "$BATS_TEST_TMPDIR" --tar "$(busybox_tar)"
  [ -z "$output" ]
  run -2 --separate-stderr dsec-layer create
  [ -z "$output" ]
  run -2 --separate-stderr dsec-layer create --scrub-git --tar "$(busybox_tar)"
}

@test "wrong argument counts are usage errors (2)" {
  run -2 --separate-stderr dsec-layer inspect
  run -2 --separate-stderr dsec-layer inspect a b
  run -2 --separate-stderr dsec-layer tag onlyone
  run -2 --separate-stderr dsec-layer export x
  run -2 --separate-stderr dsec-layer compose
  run -2 --separate-stderr dsec-layer materialise
  run -2 --separate-stderr dsec-layer rm
  run -2 --separate-stderr dsec-layer ls extra
}

@test "bad --format and --max-size values are usage errors (2)" {
  run -2 --separate-stderr dsec-layer materialise --format squashfs x
  run -2 --separate-stderr dsec-layer create --max-size 0 --dir "$BATS_TEST_TMPDIR"
  run -2 --separate-stderr dsec-layer create --max-size lots --dir "$BATS_TEST_TMPDIR"
}

@test "--log-format=json makes errors JSON records on stderr" {
  run -3 --separate-stderr dsec-layer --log-format=json inspect no/such@1
  [ -z "$output" ]
  jq_err '.level == "error" and .prog == "dsec-layer" and (.msg | contains("no/such@1"))'
  DSEC_LOG_FORMAT=json run -2 --separate-stderr dsec-layer frobnicate
  jq_err '.level == "error" and .prog == "dsec-layer"'
}

# --- create --dir -----------------------------------------------------------

@test "create --dir: a named, deterministic zstd layer" {
  local src="$BATS_TEST_TMPDIR/src" first
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  one_line
  jq_ok '.type == "layer"
    and (.digest | test("^sha256:[0-9a-f]{64}$"))
    and (.diff_id | test("^sha256:[0-9a-f]{64}$"))
    and .digest != .diff_id
    and (.size | type == "number" and . > 0)
    and .media_type == "application/vnd.oci.image.layer.v1.tar+zstd"
    and .name == "task/demo@v1"
    and .cached == false'
  first=$output
  local hex
  hex=$(jq -r '.digest | ltrimstr("sha256:")' <<<"$first")
  [ "$(stat -c %s "$(store_dir)/blobs/sha256/$hex")" -eq "$(jq .size <<<"$first")" ]
  blobs_verify "$(store_dir)/blobs/sha256"
  assert_store_clean_tmp

  # the same tree again: the same bytes, found in the store
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  jq_ok '($f | fromjson) as $f | .digest == $f.digest and .diff_id == $f.diff_id
    and .cached == true' --arg f "$first"
  # and without a name too
  run -0 --separate-stderr dsec-layer create --dir "$src"
  jq_ok '.digest == ($f | fromjson).digest and .cached == true and (has("name") | not)' \
    --arg f "$first"
  [ "$(find "$(store_dir)/blobs/sha256" -type f | wc -l)" -eq 1 ]

  run -0 --separate-stderr dsec-layer inspect task/demo@v1
  jq_ok '.type == "layer" and .digest == ($f | fromjson).digest
    and .refs == ["task/demo@v1"] and .materialised == [] and .used_by == []' \
    --arg f "$first"
}

@test "create --dir then materialise: the same tree comes back" {
  local src="$BATS_TEST_TMPDIR/src" digest root
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src"
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$digest"
  one_line
  root=$(rootfs_of "$digest")
  jq_ok '.type == "materialised" and .digest == $d and .format == "dir"
    and .path == $p and .made == true' --arg d "$digest" --arg p "$root"
  [ -d "$root" ]

  # same names, types and modes
  diff <(tree_list "$src") <(tree_list "$root")
  # same content
  diff -r --no-dereference "$src" "$root"
  # symlinks keep their targets, even dangling ones
  [ "$(readlink "$root/sub/link")" = ../a.txt ]
  [ "$(readlink "$root/dangling")" = /nonexistent/target ]
  # the hardlink pair is one inode
  [ "$(stat -c %i "$root/hard1")" = "$(stat -c %i "$root/hard2")" ]
  [ "$(stat -c %h "$root/hard1")" -eq 2 ]
  # the sparse file keeps its size and stays sparse
  [ "$(stat -c %s "$root/sparse")" -eq 10485760 ]
  [ "$(du --block-size=1 "$root/sparse" | cut -f1)" -lt 1048576 ]
  # the empty file and the private mode
  [ -f "$root/empty" ]
  [ ! -s "$root/empty" ]
  [ "$(stat -c %a "$root/private")" = 600 ]
  # the user xattr
  [ "$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.dsec-test").decode())' "$root/a.txt")" = v1 ]
  # file times are kept
  [ "$(stat -c %Y "$root/a.txt")" = "$(stat -c %Y "$src/a.txt")" ]

  run -0 --separate-stderr dsec-layer inspect "$digest"
  jq_ok '.materialised == ["dir"]'
}

@test "create --dir then materialise keeps ownership (root)" {
  require_root
  local src="$BATS_TEST_TMPDIR/src" digest root
  make_tree "$src"
  chown 1234:5678 "$src/a.txt"
  chown -h 4321:8765 "$src/sub/link"
  chown 2000:2000 "$src/sub"
  run -0 --separate-stderr dsec-layer create --dir "$src"
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$digest"
  root=$(rootfs_of "$digest")
  [ "$(stat -c %u:%g "$root/a.txt")" = 1234:5678 ]
  [ "$(stat -c %u:%g "$root/sub/link")" = 4321:8765 ]
  [ "$(stat -c %u:%g "$root/sub")" = 2000:2000 ]
  [ "$(stat -c %u:%g "$root/private")" = 0:0 ]
}

@test "create --dir of a missing directory is bad input (3)" {
  run -3 --separate-stderr dsec-layer create --dir "$BATS_TEST_TMPDIR/none"
  [ -z "$output" ]
  run -3 --separate-stderr dsec-layer create --dir "$(busybox_tar)"
  assert_store_clean_tmp
}

@test "create --tar of a missing file is bad input (3)" {
  run -3 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/none.tar"
  [ -z "$output" ]
}

@test "create with an invalid --name is bad input (3)" {
  run -3 --separate-stderr dsec-layer create --dir "$BATS_TEST_TMPDIR" --name 'Bad Name@1'
  [ -z "$output" ]
}

@test "create --tar - reads the tarball from stdin" {
  run -0 --separate-stderr dsec-layer create --tar - <"$(busybox_tar)"
  one_line
  jq_ok '.type == "layer" and .media_type == "application/vnd.oci.image.layer.v1.tar+gzip"'
}

@test "create keeps setuid files in the layer, counted; a directory layer has them only with --keep-setuid" {
  local src="$BATS_TEST_TMPDIR/src" layer
  mkdir "$src"
  printf '#!/bin/sh\n' >"$src/suid"
  chmod 4755 "$src/suid"
  run -0 --separate-stderr dsec-layer create --dir "$src"
  jq_ok '.type == "layer" and .keep_setuid == false and .setuid_files == 1'
  layer=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$layer"
  if [ "$(id -u)" -eq 0 ]; then
    [ "$(stat -c %a "$(rootfs_of "$layer")/suid")" = 755 ]
  fi

  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-layer create --keep-setuid --dir "$src"
  jq_ok '.type == "layer" and .keep_setuid == true'
  layer=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$layer"
  # only root extracts with owners, and so with the setuid bit
  if [ "$(id -u)" -eq 0 ]; then
    [ "$(stat -c %a "$(rootfs_of "$layer")/suid")" = 4755 ]
  fi
}

@test "create --max-size bounds the uncompressed size (3)" {
  local src="$BATS_TEST_TMPDIR/src"
  mkdir "$src"
  head -c 3M /dev/urandom >"$src/blob"
  run -3 --separate-stderr dsec-layer create --max-size 1M --dir "$src"
  [ -z "$output" ]
  stderr_has "max-size"
  assert_store_clean_tmp
  [ -z "$(find "$(store_dir)/blobs" -type f)" ]
  run -0 --separate-stderr dsec-layer create --max-size 4MiB --dir "$src"
}

# --- create --tar, tag, ls, inspect -----------------------------------------

@test "create --tar, tag, ls and inspect" {
  local tb digest
  tb=$(busybox_tar)
  run -0 --separate-stderr dsec-layer create --tar "$tb"
  one_line
  jq_ok '.type == "layer" and .media_type == "application/vnd.oci.image.layer.v1.tar+gzip"
    and .cached == false and (has("name") | not)'
  digest=$(jq -r .digest <<<"$output")
  [ "$(stat -c %s "$(store_dir)/blobs/sha256/${digest#sha256:}")" -eq "$(stat -c %s "$tb")" ]

  run -0 --separate-stderr dsec-layer tag "$digest" base/busybox@1.0
  one_line
  jq_ok '.type == "ref" and .name == "base/busybox" and .version == "1.0"
    and .kind == "layer" and .digest == $d' --arg d "$digest"
  run -0 --separate-stderr dsec-layer tag base/busybox@1.0 base/busybox@latest
  jq_ok '.digest == $d' --arg d "$digest"

  # an image of the same tarball shares the layer
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$tb"
  local image
  image=$(jq -r .digest <<<"$output")
  jq_ok '.layers[0].digest == $d' --arg d "$digest"

  run -0 --separate-stderr dsec-layer ls
  [ "${#lines[@]}" -eq 2 ]
  jq -e -s --arg d "$digest" --arg i "$image" '
    length == 2
    and (map(select(.type == "layer")) | length == 1)
    and (map(select(.type == "image")) | length == 1)
    and (.[] | select(.type == "layer") | .digest == $d
         and .refs == ["base/busybox@1.0", "base/busybox@latest"]
         and .used_by == [$i])
    and (.[] | select(.type == "image") | .digest == $i and .refs == ["img/bb@1"])' \
    <<<"$output"

  local ref
  for ref in base/busybox@1.0 base/busybox@latest "$digest" "${digest#sha256:}" \
    "$(cut -c8-19 <<<"$digest")"; do
    run -0 --separate-stderr dsec-layer inspect "$ref"
    one_line
    jq_ok '.type == "layer" and .digest == $d' --arg d "$digest"
  done
  run -0 --separate-stderr dsec-layer inspect img/bb@1
  jq_ok '.type == "image" and .digest == $i' --arg i "$image"
}

@test "tag onto a name that is a version of a shorter name fails, names nothing" {
  local layer
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)" --name a@b
  layer=$(jq -r .digest <<<"$output")
  run -3 --separate-stderr dsec-layer tag "$layer" a/b@1
  [ -z "$output" ]
  run -3 --separate-stderr dsec-layer inspect a/b@1
  run -0 --separate-stderr dsec-layer inspect a@b
}

@test "ls of an empty store prints nothing" {
  run -0 --separate-stderr dsec-layer ls
  [ -z "$output" ]
}

@test "inspect of an unknown reference is bad input (3)" {
  run -3 --separate-stderr dsec-layer inspect nothing/here@1
  [ -z "$output" ]
  run -3 --separate-stderr dsec-layer inspect "sha256:$(printf '0%.0s' {1..64})"
  run -3 --separate-stderr dsec-layer inspect sha256:nothex
  run -3 --separate-stderr dsec-layer inspect 0123456789ab
}

@test "tag of an unknown reference is bad input (3) and names nothing" {
  run -3 --separate-stderr dsec-layer tag nothing@1 some/name@1
  [ -z "$output" ]
  run -3 --separate-stderr dsec-layer inspect some/name@1
}

# --- rm ---------------------------------------------------------------------

@test "rm of a name removes the name and the object it alone kept" {
  local src="$BATS_TEST_TMPDIR/src" digest
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise task/demo@v1
  run -0 --separate-stderr dsec-layer rm task/demo@v1
  [ "${#lines[@]}" -eq 2 ]
  jq -e -s --arg d "$digest" '
    .[0] == {"type": "removed", "what": "ref", "id": "task/demo@v1", "freed_bytes": 0}
    and .[1].type == "removed" and .[1].what == "layer" and .[1].id == $d
    and .[1].freed_bytes > 0' <<<"$output"
  [ ! -e "$(store_dir)/blobs/sha256/${digest#sha256:}" ]
  [ ! -e "$(store_dir)/layers/${digest#sha256:}" ]
  run -3 --separate-stderr dsec-layer inspect "$digest"
  run -3 --separate-stderr dsec-layer inspect task/demo@v1
  run -0 --separate-stderr dsec-layer ls
  [ -z "$output" ]
}

@test "rm of one of two names keeps the object" {
  local src="$BATS_TEST_TMPDIR/src" digest
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer tag "$digest" task/demo@v2
  run -0 --separate-stderr dsec-layer rm task/demo@v1
  one_line
  jq_ok '.type == "removed" and .what == "ref" and .id == "task/demo@v1"'
  run -0 --separate-stderr dsec-layer inspect "$digest"
  jq_ok '.refs == ["task/demo@v2"]'
}

@test "rm of a layer an image uses is refused without --force" {
  local image layer
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  run -1 --separate-stderr dsec-layer rm "$layer"
  [ -z "$output" ]
  stderr_has "$image"
  [ -f "$(store_dir)/blobs/sha256/${layer#sha256:}" ]
  run -0 --separate-stderr dsec-layer inspect "$layer"

  # a name of that layer goes, the layer stays for the image
  run -0 --separate-stderr dsec-layer tag "$layer" base@1
  run -0 --separate-stderr dsec-layer rm base@1
  one_line
  jq_ok '.what == "ref" and .id == "base@1"'
  run -0 --separate-stderr dsec-layer inspect "$layer"
  jq_ok '.used_by == [$i]' --arg i "$image"

  run -0 --separate-stderr dsec-layer rm --force "$layer"
  one_line
  jq_ok '.type == "removed" and .what == "layer" and .id == $l and .freed_bytes > 0' \
    --arg l "$layer"
  [ ! -e "$(store_dir)/blobs/sha256/${layer#sha256:}" ]
}

@test "rm of a named digest is refused without --force, removes all with it" {
  local image layer
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer tag "$image" img@1
  run -0 --separate-stderr dsec-layer tag "$image" img@2

  run -1 --separate-stderr dsec-layer rm "$image"
  [ -z "$output" ]
  stderr_has "img@1"
  run -0 --separate-stderr dsec-layer inspect img@2

  run -0 --separate-stderr dsec-layer rm --force "$image"
  jq -e -s --arg i "$image" --arg l "$layer" '
    all(.type == "removed" and (.freed_bytes | type == "number"))
    and (map(select(.what == "ref") | .id) | sort) == ["img@1", "img@2"]
    and (map(select(.what == "image")) | length == 1 and .[0].id == $i and .[0].freed_bytes > 0)
    and (map(select(.what == "layer")) | length == 1 and .[0].id == $l and .[0].freed_bytes > 0)' \
    <<<"$output"
  run -3 --separate-stderr dsec-layer inspect img@1
  run -3 --separate-stderr dsec-layer inspect "$image"
  run -3 --separate-stderr dsec-layer inspect "tar:$(busybox_tar)"
  # nothing is left: layer, config and manifest blobs are gone
  [ -z "$(find "$(store_dir)/blobs" "$(store_dir)/images" "$(store_dir)/layers" -type f)" ]
}

@test "rm of an image's only name removes the image and its unused layers" {
  local image layer
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer rm img/bb:1
  jq -e -s --arg i "$image" --arg l "$layer" '
    map(.what) == ["ref", "image", "layer"]
    and .[1].id == $i and .[2].id == $l' <<<"$output"
  run -3 --separate-stderr dsec-layer inspect "$image"
  run -3 --separate-stderr dsec-layer inspect "$layer"
  run -0 --separate-stderr dsec-layer ls
  [ -z "$output" ]
}

@test "rm of an image keeps a layer that has a name of its own" {
  local image layer
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer tag "$layer" base@1
  run -0 --separate-stderr dsec-layer rm "$image"
  one_line
  jq_ok '.what == "image" and .id == $i' --arg i "$image"
  run -0 --separate-stderr dsec-layer inspect base@1
  jq_ok '.digest == $l and .used_by == []' --arg l "$layer"
}

@test "rm of an unknown reference is bad input (3)" {
  run -3 --separate-stderr dsec-layer rm nothing@1
  [ -z "$output" ]
}

# --- export -----------------------------------------------------------------

@test "export of a layer is a tar.zst that re-creates the same layer" {
  local src="$BATS_TEST_TMPDIR/src" first out="$BATS_TEST_TMPDIR/out.tar.zst"
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  first=$output
  run -0 --separate-stderr dsec-layer export task/demo@v1 "$out"
  one_line
  jq_ok '.type == "export" and .kind == "layer" and .digest == ($f | fromjson).digest
    and .file == $o' --arg f "$first" --arg o "$out"
  zstd -q -t "$out"
  [ -z "$(find "$BATS_TEST_TMPDIR" -maxdepth 1 -name 'out.tar.zst?*')" ]

  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-layer create --tar "$out"
  jq_ok '.diff_id == ($f | fromjson).diff_id
    and .media_type == "application/vnd.oci.image.layer.v1.tar+zstd"' --arg f "$first"
}

@test "export of a gzip layer recompresses it to zstd with the same diff_id" {
  local layer diff out="$BATS_TEST_TMPDIR/bb.tar.zst"
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"
  layer=$(jq -r .digest <<<"$output")
  diff=$(jq -r .diff_id <<<"$output")
  run -0 --separate-stderr dsec-layer export "$layer" "$out"
  zstd -q -t "$out"
  [ "sha256:$(zstd -q -d -c "$out" | sha256sum | cut -d' ' -f1)" = "$diff" ]
  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-layer create --tar "$out"
  jq_ok '.diff_id == $d' --arg d "$diff"
}

@test "export into a missing directory fails and writes nothing" {
  local layer
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"
  layer=$(jq -r .digest <<<"$output")
  run -3 --separate-stderr dsec-layer export "$layer" "$BATS_TEST_TMPDIR/no/such/dir/out.tar.zst"
  [ -z "$output" ]
  [ ! -e "$BATS_TEST_TMPDIR/no" ]
}

@test "export of a corrupt blob fails and leaves no partial file" {
  local layer blob
  mkdir "$BATS_TEST_TMPDIR/out"
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"
  layer=$(jq -r .digest <<<"$output")
  blob="$(store_dir)/blobs/sha256/${layer#sha256:}"
  chmod u+w "$blob"
  printf 'X' | dd of="$blob" bs=1 seek=$(($(stat -c %s "$blob") / 2)) conv=notrunc status=none
  run -3 --separate-stderr dsec-layer export "$layer" "$BATS_TEST_TMPDIR/out/l.tar.zst"
  [ -z "$output" ]
  [ -z "$(ls -A "$BATS_TEST_TMPDIR/out")" ]
}

@test "export of an image to - writes the archive on stdout, no record" {
  local image
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  dsec-layer export "$image" - >"$BATS_TEST_TMPDIR/img.tar"
  tar -tf "$BATS_TEST_TMPDIR/img.tar" >"$BATS_TEST_TMPDIR/list"
  grep -qx oci-layout "$BATS_TEST_TMPDIR/list"
  grep -qx index.json "$BATS_TEST_TMPDIR/list"
  grep -qx manifest.json "$BATS_TEST_TMPDIR/list"
  grep -qx "blobs/sha256/${image#sha256:}" "$BATS_TEST_TMPDIR/list"
}

@test "export of an unknown reference is bad input (3)" {
  run -3 --separate-stderr dsec-layer export nothing@1 "$BATS_TEST_TMPDIR/x.tar.zst"
  [ ! -e "$BATS_TEST_TMPDIR/x.tar.zst" ]
}

# --- compose ----------------------------------------------------------------

@test "compose IMAGE LAYER stacks the image's layers, then the extra one" {
  local src="$BATS_TEST_TMPDIR/src" image ilayer extra
  make_tree "$src"
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  ilayer=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer create --dir "$src" --name task/demo@v1
  extra=$(jq -r .digest <<<"$output")

  run -0 --separate-stderr dsec-layer compose img/bb@1 task/demo@v1
  one_line
  jq_ok '.type == "environment"
    and .image.digest == $i and .image.ref == "img/bb@1"
    and .image.platform == "linux/amd64"
    and [.layers[].digest] == [$il, $x]
    and [.layers[].from] == ["image", "layer"]
    and .layers[1].ref == "task/demo@v1"
    and .layers[1].media_type == "application/vnd.oci.image.layer.v1.tar+zstd"
    and all(.layers[]; (.diff_id | startswith("sha256:")) and .size > 0)
    and .config.cmd == ["/bin/sh"]
    and (.config.env.PATH | type == "string")' \
    --arg i "$image" --arg il "$ilayer" --arg x "$extra"

  # the image alone
  run -0 --separate-stderr dsec-layer compose "$image"
  jq_ok '[.layers[].digest] == [$il]' --arg il "$ilayer"
}

@test "compose lists a layer stacked twice once, at its upper place" {
  local a="$BATS_TEST_TMPDIR/a" b="$BATS_TEST_TMPDIR/b" la lb il
  mkdir -p "$a" "$b"
  echo a >"$a/f"
  echo b >"$b/g"
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  il=$(jq -r '.layers[0].digest' <<<"$output")
  la=$(dsec-layer create --dir "$a" --name t/a@1 | jq -r .digest)
  lb=$(dsec-layer create --dir "$b" --name t/b@1 | jq -r .digest)
  run -0 --separate-stderr dsec-layer compose img/bb@1 t/a@1 t/b@1 t/a@1 \
    img/bb@1
  jq_ok '[.layers[].digest] == [$b, $a, $i] and
    [.layers[].from] == ["layer", "layer", "layer"]' \
    --arg a "$la" --arg b "$lb" --arg i "$il"
}

@test "compose of a layer as IMAGE is bad input (3)" {
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)" --name base@1
  run -3 --separate-stderr dsec-layer compose base@1
  [ -z "$output" ]
  stderr_has "base@1"
}

@test "compose of unknown references is bad input (3)" {
  run -3 --separate-stderr dsec-layer compose nothing@1
  [ -z "$output" ]
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  run -3 --separate-stderr dsec-layer compose img/bb@1 nothing@1
  [ -z "$output" ]
  stderr_has "nothing@1"
}

# --- materialise ------------------------------------------------------------

@test "materialise: a dir with bin/busybox, made once" {
  local layer root
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)" --name base@1
  layer=$(jq -r .digest <<<"$output")
  root=$(rootfs_of "$layer")
  run -0 --separate-stderr dsec-layer materialise base@1
  one_line
  jq_ok '.type == "materialised" and .digest == $l and .format == "dir"
    and .path == $p and .made == true and (.duration_ms | type == "number")' \
    --arg l "$layer" --arg p "$root"
  [ -x "$root/bin/busybox" ]
  [ -L "$root/bin/sh" ]
  [ "$(stat -c %a "$root/tmp")" = 1777 ]
  [ "$(stat -c %a "$root")" = 755 ]
  [ -z "$(find "$(store_dir)/layers/${layer#sha256:}" -maxdepth 1 -name '*.tmp-*')" ]

  run -0 --separate-stderr dsec-layer materialise base@1
  jq_ok '.made == false and .path == $p' --arg p "$root"
}

@test "materialise: opaque directories get both markers; a rootfs an earlier version made gets user.overlay.opaque added once" {
  require_root
  local src digest root
  src=$BATS_TEST_TMPDIR/src
  mkdir -p "$src/a"
  : >"$src/a/.wh..wh..opq"
  echo new >"$src/a/new"
  tar -C "$src" -cf "$BATS_TEST_TMPDIR/opq.tar" a
  run -0 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/opq.tar"
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$digest"
  root=$(jq -r .path <<<"$output")
  [ "$(getfattr --only-values -n trusted.overlay.opaque "$root/a")" = y ]
  [ "$(getfattr --only-values -n user.overlay.opaque "$root/a")" = y ]
  # as an earlier version left it: trusted.* only, no mark beside it
  setfattr -x user.overlay.opaque "$root/a"
  rm "$root.opaque-user"
  run -0 --separate-stderr dsec-layer materialise "$digest"
  jq -e '.made == false' <<<"$output"
  [ "$(getfattr --only-values -n user.overlay.opaque "$root/a")" = y ]
  [ -e "$root.opaque-user" ]
}

@test "materialise of an image materialises each of its layers" {
  local image layer
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  image=$(jq -r .digest <<<"$output")
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$image"
  one_line
  jq_ok '.digest == $l and .made == true' --arg l "$layer"
  run -0 --separate-stderr dsec-layer inspect "$image"
  # (the pull made its EROFS image)
  jq_ok '.layers[0].materialised == ["dir", "erofs"]'
}

@test "materialise of an unknown reference is bad input (3)" {
  run -3 --separate-stderr dsec-layer materialise nothing@1
  [ -z "$output" ]
}

@test "materialise --format erofs: an image that mounts read-only (root)" {
  require_root
  command -v mkfs.erofs >/dev/null || skip "mkfs.erofs missing"
  grep -qw erofs /proc/filesystems || modprobe erofs 2>/dev/null ||
    skip "no erofs in this kernel"
  local layer img mnt="$BATS_TEST_TMPDIR/mnt"
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"
  layer=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise --format erofs "$layer"
  one_line
  img="$(store_dir)/layers/${layer#sha256:}/layer.erofs"
  jq_ok '.format == "erofs" and .path == $p and .made == true' --arg p "$img"
  [ -f "$img" ]
  [ ! -w "$img" ] || [ "$(stat -c %a "$img")" = 444 ]

  mkdir "$mnt"
  echo "loop $img" >>"$BATS_TEST_TMPDIR/mounts"
  echo "mnt $mnt" >>"$BATS_TEST_TMPDIR/mounts"
  mount -t erofs -o ro,loop "$img" "$mnt"
  [ -x "$mnt/bin/busybox" ]
  [ -L "$mnt/bin/sh" ]
  cmp "$mnt/bin/busybox" /bin/busybox
  umount "$mnt"

  run -0 --separate-stderr dsec-layer materialise --format erofs "$layer"
  jq_ok '.made == false'
  run -0 --separate-stderr dsec-layer inspect "$layer"
  jq_ok '.materialised == ["erofs"]'
  # the tree it was built from is not left behind
  [ -z "$(find "$(store_dir)/layers/${layer#sha256:}" -maxdepth 1 -name '*.tmp-*')" ]
}

@test "two concurrent materialisations of a layer: both succeed, one makes it" {
  local layer st1 st2
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"
  layer=$(jq -r .digest <<<"$output")
  dsec-layer materialise "$layer" >"$BATS_TEST_TMPDIR/m1" 2>"$BATS_TEST_TMPDIR/e1" &
  local p1=$!
  dsec-layer materialise "$layer" >"$BATS_TEST_TMPDIR/m2" 2>"$BATS_TEST_TMPDIR/e2" &
  local p2=$!
  st1=0 st2=0
  wait "$p1" || st1=$?
  wait "$p2" || st2=$?
  cat "$BATS_TEST_TMPDIR/e1" "$BATS_TEST_TMPDIR/e2" >&2
  [ "$st1" -eq 0 ]
  [ "$st2" -eq 0 ]
  cat "$BATS_TEST_TMPDIR/m1" "$BATS_TEST_TMPDIR/m2" |
    jq -e -s --arg p "$(rootfs_of "$layer")" \
      'length == 2 and (map(select(.made)) | length == 1) and all(.path == $p)'
  [ -x "$(rootfs_of "$layer")/bin/busybox" ]
  [ -z "$(find "$(store_dir)/layers/${layer#sha256:}" -maxdepth 1 -name '*.tmp-*')" ]
}

@test "materialise verifies the blob: a corrupt zstd layer is refused (3)" {
  local src="$BATS_TEST_TMPDIR/src" layer blob
  make_tree "$src"
  run -0 --separate-stderr dsec-layer create --dir "$src"
  layer=$(jq -r .digest <<<"$output")
  blob="$(store_dir)/blobs/sha256/${layer#sha256:}"
  chmod u+w "$blob"
  printf '\377' | dd of="$blob" bs=1 seek=$(($(stat -c %s "$blob") / 2)) conv=notrunc status=none
  run -3 --separate-stderr dsec-layer materialise "$layer"
  [ -z "$output" ]
  stderr_has "$layer"
  [ ! -e "$(rootfs_of "$layer")" ]
  [ -z "$(find "$(store_dir)/layers/${layer#sha256:}" -maxdepth 1 -name '*.tmp-*')" ]
}

@test "materialise verifies the blob: a changed byte of file data is refused (3)" {
  # an uncompressed layer whose tar stays well-formed: only the digest
  # check can notice
  local layer blob
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar_as tar)"
  layer=$(jq -r .digest <<<"$output")
  blob="$(store_dir)/blobs/sha256/${layer#sha256:}"
  chmod u+w "$blob"
  printf '\377' | dd of="$blob" bs=1 seek=$(($(stat -c %s "$blob") / 2)) conv=notrunc status=none
  run -3 --separate-stderr dsec-layer materialise "$layer"
  [ -z "$output" ]
  stderr_has "$layer"
  stderr_has "corrupt"
  [ ! -e "$(rootfs_of "$layer")" ]
  [ -z "$(find "$(store_dir)/layers/${layer#sha256:}" -maxdepth 1 -name '*.tmp-*')" ]
}

# --- create --dir --scrub-git -----------------------------------------------

@test "create --scrub-git keeps only the checked-out commit" {
  command -v git >/dev/null || skip "git missing"
  local repo="$BATS_TEST_TMPDIR/repo" c2 c3 c4 layer root
  export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.org \
    GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.org \
    GIT_CONFIG_NOSYSTEM=1 HOME="$BATS_TEST_TMPDIR/home"
  mkdir -p "$HOME" "$repo"
  git -C "$repo" init -q
  git -C "$repo" checkout -q -b main
  local i
  for i in 1 2 3; do
    echo "version $i" >"$repo/f.txt"
    git -C "$repo" add f.txt
    git -C "$repo" commit -q -m "commit $i"
  done
  c2=$(git -C "$repo" rev-parse HEAD~1)
  c3=$(git -C "$repo" rev-parse HEAD)
  git -C "$repo" tag v0 HEAD~2
  git -C "$repo" checkout -q -b future
  echo 42 >"$repo/answer.txt"
  git -C "$repo" add answer.txt
  git -C "$repo" commit -q -m "commit 4: the answer"
  c4=$(git -C "$repo" rev-parse HEAD)
  git -C "$repo" checkout -q main
  git -C "$repo" reset -q --hard "$c2"
  echo "uncommitted change" >>"$repo/f.txt"
  [ "$(git -C "$repo" rev-list --all | wc -l)" -eq 4 ]

  run -0 --separate-stderr dsec-layer create --dir "$repo" --scrub-git
  one_line
  layer=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$layer"
  root=$(rootfs_of "$layer")
  local g=(git -c safe.directory='*' -C "$root")

  [ "$("${g[@]}" log --oneline | wc -l)" -eq 1 ]
  [ "$("${g[@]}" rev-parse HEAD)" = "$c2" ]
  run ! "${g[@]}" cat-file -e "$c3"
  run ! "${g[@]}" cat-file -e "$c4"
  # only HEAD's branch
  [ "$("${g[@]}" for-each-ref --format='%(refname)')" = refs/heads/main ]
  [ "$("${g[@]}" symbolic-ref HEAD)" = refs/heads/main ]
  # no reflog, no tag, no answer
  [ ! -e "$root/.git/logs" ]
  [ -z "$("${g[@]}" reflog 2>/dev/null)" ]
  [ ! -e "$root/answer.txt" ]
  ! grep -rqs "the answer" "$root/.git" || { echo "commit 4 message found in .git" >&2; false; }
  # the work tree keeps the uncommitted change, git sees it as one
  grep -qx "uncommitted change" "$root/f.txt"
  [ "$("${g[@]}" status --porcelain)" = " M f.txt" ]

  # the original repository is untouched
  [ "$(git -C "$repo" rev-list --all | wc -l)" -eq 4 ]
  [ "$(git -C "$repo" rev-parse HEAD)" = "$c2" ]
  [ "$(git -C "$repo" rev-parse future)" = "$c4" ]
  git -C "$repo" cat-file -e "$c3"
  [ -n "$(git -C "$repo" reflog)" ]
  grep -qx "uncommitted change" "$repo/f.txt"
  assert_store_clean_tmp
}

@test "create --scrub-git with a detached HEAD keeps that commit only" {
  command -v git >/dev/null || skip "git missing"
  local repo="$BATS_TEST_TMPDIR/repo" c1 layer root
  export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.org \
    GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.org \
    GIT_CONFIG_NOSYSTEM=1 HOME="$BATS_TEST_TMPDIR/home"
  mkdir -p "$HOME" "$repo"
  git -C "$repo" init -q
  echo one >"$repo/f.txt"
  git -C "$repo" add f.txt
  git -C "$repo" commit -q -m one
  c1=$(git -C "$repo" rev-parse HEAD)
  echo two >"$repo/f.txt"
  git -C "$repo" commit -q -am two
  git -C "$repo" checkout -q "$c1"

  run -0 --separate-stderr dsec-layer create --dir "$repo" --scrub-git
  layer=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$layer"
  root=$(rootfs_of "$layer")
  [ "$(git -c safe.directory='*' -C "$root" rev-parse HEAD)" = "$c1" ]
  [ "$(git -c safe.directory='*' -C "$root" log --oneline | wc -l)" -eq 1 ]
  [ -z "$(git -c safe.directory='*' -C "$root" for-each-ref)" ]
}

@test "create --scrub-git on a directory without .git is bad input (3)" {
  local src="$BATS_TEST_TMPDIR/src"
  mkdir "$src"
  echo x >"$src/f"
  run -3 --separate-stderr dsec-layer create --dir "$src" --scrub-git
  [ -z "$output" ]
  stderr_has ".git"
  assert_store_clean_tmp
  [ -z "$(find "$(store_dir)/blobs" -type f 2>/dev/null)" ]
}

# --- crash safety -----------------------------------------------------------

@test "kill -9 during create leaves only sound blobs; a new create works" {
  local big="$BATS_TEST_TMPDIR/big" pid i
  mkdir "$big"
  for i in 1 2 3 4 5; do
    head -c 10M /dev/urandom >"$big/chunk$i"
  done
  # a store with one layer in it already
  run -0 --separate-stderr dsec-layer create --tar "$(busybox_tar)"

  dsec-layer create --dir "$big" >"$BATS_TEST_TMPDIR/out" 2>&1 &
  pid=$!
  # wait until it has started writing (or is done); no assertion depends
  # on where the kill lands
  for i in $(seq 1 2000); do
    [ -n "$(find "$(store_dir)/tmp" -type f -size +0 2>/dev/null)" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.005
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" || true

  blobs_verify "$(store_dir)/blobs/sha256"
  # every layer with metadata whose blob exists is whole
  run -0 --separate-stderr dsec-layer ls
  printf '%s\n' "$output" | jq -e -s 'all(.type == "layer" or .type == "image")'

  run -0 --separate-stderr dsec-layer create --dir "$big"
  one_line
  local digest
  digest=$(jq -r .digest <<<"$output")
  blobs_verify "$(store_dir)/blobs/sha256"
  run -0 --separate-stderr dsec-layer materialise "$digest"
  cmp "$big/chunk3" "$(rootfs_of "$digest")/chunk3"
}

# --- verify -----------------------------------------------------------------

# out_jq JQ-ARGS...: as in helpers/run.bash, jq -e over $output.
out_jq() {
  if ! jq -e "$@" <<<"$output" >/dev/null; then
    echo "jq -e $* failed on stdout: $output" >&2
    echo "stderr: ${stderr-}" >&2
    return 1
  fi
}

# findings WHAT: the ids of the findings about WHAT in $output.
findings() {
  jq -r -s --arg w "$1" '.[] | select(.type == "finding" and .what == $w) | .id' \
    <<<"$output"
}

@test "verify: a sound store is consistent (0), with a summary" {
  local src="$BATS_TEST_TMPDIR/src"
  make_tree "$src"
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name t/a@1
  run -0 --separate-stderr dsec-layer materialise --format erofs t/a@1
  run -0 --separate-stderr dsec-layer materialise t/a@1
  run -0 --separate-stderr dsec-layer verify
  one_line
  jq_ok '.type == "summary" and .repair == false and .consistent == true
    and .findings == 0 and .remaining == 0 and .checked.blobs == 4
    and .checked.images == 1 and .checked.layers == 2 and .checked.refs == 2
    and .checked.sources == 1 and (.duration_ms | type == "number")'
  [ -z "$stderr" ]
}

@test "verify finds a corrupt blob, a truncated record, a temporary file and a dangling ref; --repair fixes them; verify is then clean" {
  local src="$BATS_TEST_TMPDIR/src" s la img il zero
  make_tree "$src"
  s=$(store_dir)
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  img=$(jq -r .digest <<<"$output")
  il=$(jq -r '.layers[0].digest' <<<"$output")
  run -0 --separate-stderr dsec-layer create --dir "$src" --name t/a@1
  la=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer tag t/a@1 t/also@1

  # a changed byte of the layer's blob; the image's record cut short; a
  # writer's leftover; a name of nothing; a half-written record
  chmod u+w "$s/blobs/sha256/${la#sha256:}"
  printf 'X' | dd of="$s/blobs/sha256/${la#sha256:}" bs=1 seek=20 conv=notrunc \
    2>/dev/null
  truncate -s 20 "$s/images/${img#sha256:}.json"
  echo partial >"$s/tmp/blob.tmp-00000000000000aa"
  echo partial >"$s/refs/t/a/1.tmp-00000000000000bb"
  zero=sha256:$(printf '0%.0s' $(seq 64))
  mkdir -p "$s/refs/t/gone"
  printf '{"type":"ref","name":"t/gone","version":"1","kind":"layer","digest":"%s"}' \
    "$zero" >"$s/refs/t/gone/1"

  run -1 --separate-stderr dsec-layer verify
  out_jq -s 'last.type == "summary" and last.consistent == false and
    last.remaining == last.findings and last.repaired == 0 and
    (.[:-1] | all(.type == "finding" and .repair == "remove" and
      (.problem | type == "string")))'
  [ "$(findings blob)" = "$la" ]
  [ "$(findings layer)" = "$la" ]
  [ "$(findings image)" = "$img" ]
  [ "$(findings ref | sort | tr '\n' ' ')" = "img/bb@1 t/a@1 t/also@1 t/gone@1 " ]
  findings tmp | grep -qx "$s/tmp/blob.tmp-00000000000000aa"
  findings tmp | grep -qx "$s/refs/t/a/1.tmp-00000000000000bb"
  out_jq -s --arg d "$la" 'any(.[]; .what == "blob" and .id == $d and
    (.problem | startswith("corrupt: its content hashes to sha256:")))'
  stderr_has "not consistent"
  # nothing changed
  [ -e "$s/tmp/blob.tmp-00000000000000aa" ]
  [ -e "$s/blobs/sha256/${la#sha256:}" ]

  run -0 --separate-stderr dsec-layer verify --repair
  out_jq -s 'last.repair == true and last.consistent == true and
    last.remaining == 0 and last.repaired == last.findings and
    last.findings > 0 and
    (.[:-1] | all(.type == "finding" and .repair == "removed"))'
  [ ! -e "$s/tmp/blob.tmp-00000000000000aa" ]
  [ ! -e "$s/blobs/sha256/${la#sha256:}" ]
  [ ! -e "$s/layers/${la#sha256:}" ]
  [ ! -e "$s/images/${img#sha256:}.json" ]
  [ ! -e "$s/refs/t/gone" ]

  run -0 --separate-stderr dsec-layer verify
  one_line
  jq_ok '.consistent == true and .findings == 0'
  # what was removed comes back
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  run -0 --separate-stderr dsec-layer create --dir "$src" --name t/a@1
  [ "$(jq -r .digest <<<"$output")" = "$la" ]
  run -0 --separate-stderr dsec-layer verify
  jq_ok '.consistent == true and .checked.images == 1'
}

@test "verify: the VMs' boot files (store/vm): a damaged entry, a builder's leftover and a broken index; --repair, never under a live builder" {
  local s k1 k2 k3 held
  s=$(store_dir)
  run -0 --separate-stderr dsec-pull --name img/bb:1 "tar:$(busybox_tar)"
  k1=$(printf 'a%.0s' $(seq 64)) k2=$(printf 'b%.0s' $(seq 64)) k3=$(printf 'c%.0s' $(seq 64))
  # entries as dsec-vm builds them (vmimage.c): boot.json, vmlinux, initramfs.cpio
  for k in "$k1" "$k2" "$k3"; do
    mkdir -p "$s/vm/$k"
    printf '{"format":"dsec-vm-boot/2","release":"6.1.0","kernel_digest":"sha256:%s"}\n' \
      "$k" >"$s/vm/$k/boot.json"
    echo kernel >"$s/vm/$k/vmlinux"
    echo cpio >"$s/vm/$k/initramfs.cpio"
  done
  printf '{"version":1,"entries":[]}\n' >"$s/vm/index.json"
  run -0 --separate-stderr dsec-layer verify
  one_line
  jq_ok '.consistent == true and .checked.vm_boot == 3'

  # an empty kernel, a boot record that is none, a builder that died, an
  # index cut short
  : >"$s/vm/$k1/vmlinux"
  echo '{"format":"other"}' >"$s/vm/$k2/boot.json"
  mkdir "$s/vm/$k3.tmp-abcdef"
  echo '{"version":1,"entr' >"$s/vm/index.json"
  run -1 --separate-stderr dsec-layer verify
  out_jq -s --arg p "$s/vm" '
    any(.[]; .what == "vm-boot" and .id == $p + "/" + "'"$k1"'" and
      (.problem | test("vmlinux")) and .repair == "remove") and
    any(.[]; .what == "vm-boot" and .id == $p + "/" + "'"$k2"'" and
      (.problem | test("boot record"))) and
    any(.[]; .what == "tmp" and .id == $p + "/" + "'"$k3"'.tmp-abcdef") and
    any(.[]; .what == "vm-boot" and .id == $p + "/index.json") and
    (map(select(.type == "finding")) | length == 4)'

  # a builder at work on k1 holds its key's lock: its entry is left
  held=$BATS_TEST_TMPDIR/held
  flock -x "$s/locks/vm-$k1" sh -c "touch $held.on; while [ ! -e $held.off ]; do sleep 0.1; done" &
  echo "$!" >>"$BATS_TEST_TMPDIR/pids"
  for _ in $(seq 100); do [ -e "$held.on" ] && break; sleep 0.1; done
  run -1 --separate-stderr dsec-layer verify --repair
  out_jq -s 'any(.[]; .what == "vm-boot" and (.repair | startswith("failed: "))) and
    last.remaining == 1'
  [ -d "$s/vm/$k1" ]
  [ ! -e "$s/vm/$k2" ]
  [ ! -e "$s/vm/$k3.tmp-abcdef" ]
  [ ! -e "$s/vm/index.json" ]
  [ -d "$s/vm/$k3" ]
  touch "$held.off"
  wait
  run -0 --separate-stderr dsec-layer verify --repair
  [ ! -e "$s/vm/$k1" ]
  run -0 --separate-stderr dsec-layer verify
  one_line
  jq_ok '.consistent == true and .checked.vm_boot == 1'
}

@test "verify: a damaged EROFS image, an unmarked tree and a half-removed layer; --repair" {
  local src="$BATS_TEST_TMPDIR/src" s la hex
  make_tree "$src"
  s=$(store_dir)
  run -0 --separate-stderr dsec-layer create --dir "$src" --name t/a@1
  la=$(jq -r .digest <<<"$output")
  hex=${la#sha256:}
  run -0 --separate-stderr dsec-layer materialise --format erofs t/a@1
  run -0 --separate-stderr dsec-layer materialise t/a@1
  chmod u+w "$s/layers/$hex/layer.erofs"
  dd if=/dev/zero of="$s/layers/$hex/layer.erofs" bs=1 seek=1024 count=4 \
    conv=notrunc 2>/dev/null
  rm "$s/layers/$hex/rootfs.opaque-user"
  mkdir "$s/layers/.trash-$hex"

  run -1 --separate-stderr dsec-layer verify
  out_jq -s --arg p "$s/layers/$hex" '
    any(.[]; .what == "erofs" and .id == $p + "/layer.erofs" and
      (.problem | test("superblock")) and .repair == "remove") and
    any(.[]; .what == "rootfs" and .id == $p + "/rootfs" and
      .repair == "complete") and
    any(.[]; .what == "tmp" and (.id | endswith("/.trash-" + ($p | split("/") | last))))'

  run -0 --separate-stderr dsec-layer verify --repair
  out_jq -s 'any(.[]; .what == "rootfs" and .repair == "completed") and
    any(.[]; .what == "erofs" and .repair == "removed")'
  [ -e "$s/layers/$hex/rootfs.opaque-user" ]
  [ ! -e "$s/layers/$hex/layer.erofs" ]
  run -0 --separate-stderr dsec-layer verify
  # made again on demand
  run -0 --separate-stderr dsec-layer materialise --format erofs t/a@1
  jq_ok '.made == true'
  run -0 --separate-stderr dsec-layer verify
}
