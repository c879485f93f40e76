#!/usr/bin/env bats
# Hostile and malformed layer tarballs and OCI layouts.  Each one must be
# refused by both `dsec-layer create --tar` and `dsec-pull tar:` as bad
# input (exit 3) with a message naming the problem, print nothing on
# stdout, keep nothing in the store and write nothing outside it.  What
# real images carry (device nodes, setuid and setgid files, file
# capabilities) is imported instead, and never reaches the host as it is.
# The inputs come from helpers/mkevil.py and helpers/mkoci.py.

bats_require_minimum_version 1.5.0

load helpers/common

setup() { common_setup; }

# evil NAME CASE [ARG]...: prints the path of a new tarball from mkevil.py.
# $BATS_TEST_TMPDIR/outside is where escaping members aim; it must stay
# empty.
evil() {
  local out="$BATS_TEST_TMPDIR/$1"
  shift
  mkdir -p "$BATS_TEST_TMPDIR/outside"
  python3 "$BATS_TEST_DIRNAME/helpers/mkevil.py" "$out" "$@" >&2
  echo "$out"
}

# oci DIR [mkoci.py OPTION]...: builds an OCI layout, prints nothing.
oci() {
  python3 "$BATS_TEST_DIRNAME/helpers/mkoci.py" "$@" >/dev/null
}

# Fails when one of the store's directories DIR... holds anything.
assert_store_dirs_empty() {
  local d left
  for d in "$@"; do
    left=$(find "$(store_dir)/$d" -mindepth 1 2>/dev/null | head -5)
    [ -z "$left" ] || { echo "left in store $d: $left" >&2; return 1; }
  done
}

# Fails unless the store holds no blob, layer, image, ref or source and no
# temporary file.
assert_store_empty() {
  assert_store_dirs_empty blobs/sha256 layers images refs sources
  assert_store_clean_tmp
}

# Fails when something was written outside the store: in the `outside`
# directory, anything named *pwned* elsewhere in the test's directory, or
# the file a write through a symlink to / would make.
assert_nothing_outside() {
  local left
  left=$(find "$BATS_TEST_TMPDIR/outside" -mindepth 1 2>/dev/null | head -5)
  [ -z "$left" ] || { echo "written outside the store: $left" >&2; return 1; }
  left=$(find "$BATS_TEST_TMPDIR" -path "$(store_dir)" -prune -o \
    -name '*pwned*' -print | head -5)
  [ -z "$left" ] || { echo "written outside the store: $left" >&2; return 1; }
  [ ! -e /dsec-badinput-pwned ] || {
    echo "written outside the store: /dsec-badinput-pwned" >&2
    return 1
  }
}

# shellcheck disable=SC2154 # bats' run sets $stderr
# After a `run`: nothing on stdout, KEYWORD (case-insensitive) on stderr,
# an empty store, nothing outside.
assert_refused() {
  local keyword=$1
  [ -z "$output" ] || { echo "stdout: $output" >&2; return 1; }
  [[ ${stderr,,} == *"${keyword,,}"* ]] || {
    echo "stderr lacks \`$keyword\`: $stderr" >&2
    return 1
  }
  [[ $stderr != *"(null)"* ]] || { echo "stderr: $stderr" >&2; return 1; }
  assert_store_empty
  assert_nothing_outside
}

# assert_rejected FILE KEYWORD [OPTION]...: both importers refuse FILE.
assert_rejected() {
  local file=$1 keyword=$2
  shift 2
  run -3 --separate-stderr dsec-layer create --tar "$file" "$@"
  assert_refused "$keyword"
  run -3 --separate-stderr dsec-pull "$@" "tar:$file"
  assert_refused "$keyword"
}

# assert_imports FILE [OPTION]...: both importers take FILE.
assert_imports() {
  local file=$1
  shift
  run -0 --separate-stderr dsec-layer create --tar "$file" "$@"
  jq -e '.type == "layer" and (.digest | startswith("sha256:"))' <<<"$output"
  run -0 --separate-stderr dsec-pull "$@" "tar:$file"
  jq -e '.type == "image" and (.layers | length) == 1' <<<"$output"
  assert_nothing_outside
}

# assert_oci_rejected DIR KEYWORD: dsec-pull refuses the layout; no image,
# name or source is recorded and no temporary file is left.
assert_oci_rejected() {
  run -3 --separate-stderr dsec-pull "oci:$1:v1"
  [ -z "$output" ] || { echo "stdout: $output" >&2; return 1; }
  [[ ${stderr,,} == *"${2,,}"* ]] || {
    echo "stderr lacks \`$2\`: $stderr" >&2
    return 1
  }
  assert_store_dirs_empty images refs sources
  assert_store_clean_tmp
  assert_nothing_outside
}

# cut_half FILE OUT: the first half of FILE.
cut_half() {
  head -c $(($(stat -c %s "$1") / 2)) "$1" >"$2"
}

# --- tarball members ------------------------------------------------------

@test "bad input: member path with ../" {
  local name f
  # rootfs.tmp-X/../../../../../outside is $BATS_TEST_TMPDIR/outside
  for name in ../outside/pwned ../../outside/pwned \
    ../../../../../outside/pwned ../../../../../../../outside/pwned \
    ./../outside/pwned etc/../../outside/pwned 'a/b/../../../outside/pwned' \
    'etc/..'; do
    f=$(evil dotdot.tar file "$name")
    assert_rejected "$f" "contains \`..\`"
    [[ $stderr == *"$name"* ]]
  done
}

@test "bad input: absolute path" {
  local name f
  for name in "$BATS_TEST_TMPDIR/outside/pwned" \
    "//$BATS_TEST_TMPDIR/outside/pwned" "/../$BATS_TEST_TMPDIR/outside/pwned"; do
    f=$(evil abs.tar file "$name")
    assert_rejected "$f" "absolute path"
  done
}

@test "bad input: symlink escaping the layer" {
  local f
  f=$(evil sym.tar symlink a/b ../../../etc)
  assert_rejected "$f" "points out of the layer"
  [[ $stderr == *'a/b'* ]]
  f=$(evil sym.tar symlink up ..)
  assert_rejected "$f" "points out of the layer"
  f=$(evil sym.tar symlink a/up ../..)
  assert_rejected "$f" "points out of the layer"
  f=$(evil sym.tar symlink a/up x/../../..)
  assert_rejected "$f" "points out of the layer"
  f=$(evil sym.tar symlink a/b/up ./../../../outside)
  assert_rejected "$f" "points out of the layer"
}

# d/sub -> .. stays inside, and so does d/l -> sub/../../etc read word by
# word; but the kernel resolves sub first, so d/l ends one level above
# the layer's top.
@test "bad input: symlink chain escaping the layer" {
  local f
  python3 - "$BATS_TEST_TMPDIR/chain.tar" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as tf:
    for name, kind, target in (("d", tarfile.DIRTYPE, ""),
                               ("d/sub", tarfile.SYMTYPE, ".."),
                               ("d/l", tarfile.SYMTYPE, "sub/../../etc")):
        ti = tarfile.TarInfo(name)
        ti.type, ti.linkname, ti.mode = kind, target, 0o755
        tf.addfile(ti)
EOF
  assert_rejected "$BATS_TEST_TMPDIR/chain.tar" "symlink"
}

@test "absolute symlinks and symlinks inside the layer are allowed" {
  local f digest path
  f=$(evil abs-symlink.tar symlink bin/sh /bin/busybox)
  assert_imports "$f"
  f=$(evil valid.tar valid)
  assert_imports "$f"
  run -0 --separate-stderr dsec-layer create --tar "$f"
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer materialise "$digest"
  path=$(jq -r .path <<<"$output")
  [ "$(readlink "$path/bin/sh")" = /bin/busybox ]
  [ "$(readlink "$path/a/b/up")" = ../../etc ]
}

@test "bad input: hardlink out of the layer" {
  local f
  f=$(evil hl.tar hardlink h ../x)
  assert_rejected "$f" "hardlink target contains \`..\`"
  f=$(evil hl.tar hardlink etc/h ../../outside/pwned)
  assert_rejected "$f" "hardlink target contains \`..\`"
  f=$(evil hl.tar hardlink h /etc/passwd)
  assert_rejected "$f" "hardlink target is an absolute path"
  f=$(evil hl.tar hardlink h "$BATS_TEST_TMPDIR/outside/target")
  assert_rejected "$f" "hardlink target is an absolute path"
  f=$(evil hl.tar hardlink h .)
  assert_rejected "$f" "hardlink to the top"
}

@test "bad input: write through a symlink to .." {
  local f
  f=$(evil through.tar through-symlink ..)
  assert_rejected "$f" "points out of the layer"
}

# link -> / is a legal absolute symlink, but link/x then goes through it:
# whoever extracts the layer without a chroot writes to the host.
@test "bad input: write through an absolute symlink" {
  local f
  f=$(evil through.tar through-symlink /)
  assert_rejected "$f" "symlink"
  f=$(evil through.tar through-symlink "$BATS_TEST_TMPDIR/outside")
  assert_rejected "$f" "symlink"
}

# Whatever the import decides, materialising such a layer must not write
# or link anything outside it, and leaves no temporary tree.
@test "write through an absolute symlink: materialise stays in the layer" {
  local f digest target
  for target in / "$BATS_TEST_TMPDIR/outside"; do
    f=$(evil through.tar through-symlink "$target")
    run --separate-stderr dsec-layer create --tar "$f"
    [ "$status" -eq 0 ] || [ "$status" -eq 3 ]
    if [ "$status" -eq 0 ]; then
      digest=$(jq -r .digest <<<"$output")
      run --separate-stderr dsec-layer materialise "$digest"
      [ -z "$(find "$(store_dir)/layers" -name '*.tmp-*')" ]
    fi
    assert_nothing_outside
  done
  echo secret >"$BATS_TEST_TMPDIR/outside-secret"
  f=$(evil hlthrough.tar hardlink-through-symlink "${BATS_TEST_TMPDIR#/}/outside-secret")
  run --separate-stderr dsec-layer create --tar "$f"
  if [ "$status" -eq 0 ]; then
    digest=$(jq -r .digest <<<"$output")
    run -3 --separate-stderr dsec-layer materialise "$digest"
    [ -z "$(find "$(store_dir)/layers" -name '*.tmp-*')" ]
    [ "$(stat -c %h "$BATS_TEST_TMPDIR/outside-secret")" -eq 1 ]
  else
    [ "$status" -eq 3 ]
  fi
  assert_nothing_outside
}

# in_erofs IMAGE CMD...: runs CMD with the image mounted read-only on $M,
# in a mount namespace of its own (the mount goes with it).
in_erofs() {
  local img=$1
  shift
  M=$BATS_TEST_TMPDIR/erofs-mnt
  mkdir -p "$M"
  export M
  unshare -m --propagation private sh -c 'mount -t erofs -o ro "$0" "$M" && "$@"' \
    "$img" "$@"
}

# materialised REF FORMAT: the path of REF materialised as FORMAT.
materialised() {
  dsec-layer materialise --format "$2" "$1" | jq -r .path
}

@test "device nodes are imported as they are, counted, and never made: neither in a directory layer nor in an EROFS image" {
  local f digest path img
  for dev in "chr 1 3" "blk 8 0" "chr 0 0"; do
    # shellcheck disable=SC2086
    f=$(evil dev.tar device $dev)
    export DSEC_ROOT="$BATS_TEST_TMPDIR/root-${dev// /-}"
    # a sandbox's writable layer (what checkpoints import) holds none
    run -3 --separate-stderr dsec-layer create --tar "$f" --strip-setuid --strip-overlay
    [[ $stderr == *"device nodes are not allowed"* ]]
    run -0 --separate-stderr dsec-layer create --tar "$f"
    jq -e '.device_nodes == 1' <<<"$output"
    digest=$(jq -r .digest <<<"$output")
    run -0 --separate-stderr dsec-pull "tar:$f"
    jq -e '.dropped_device_nodes == 1 and .layers[0].device_nodes == 1' <<<"$output"
    [ "$(id -u)" -eq 0 ] || continue
    path=$(materialised "$digest" dir)
    [ -f "$path/etc/hostname" ]
    # 0/0 is how overlayfs marks a whiteout: not smuggled in either
    [ ! -e "$path/etc/node" ] && [ ! -L "$path/etc/node" ]
    img=$(materialised "$digest" erofs)
    in_erofs "$img" sh -c 'test -f "$M/etc/hostname" && ! test -e "$M/etc/node"'
    dsec-layer inspect "$digest" | jq -e '.erofs.dropped_device_nodes == 1'
  done
  assert_nothing_outside
}

@test "setuid and setgid files are imported as they are and counted; kept in an EROFS image, stripped from a directory layer unless --keep-setuid" {
  local f digest path img mode
  for mode in 4755 2755 6755; do
    f=$(evil "m$mode.tar" mode "$mode")
    export DSEC_ROOT="$BATS_TEST_TMPDIR/root-$mode"
    run -0 --separate-stderr dsec-layer create --tar "$f"
    jq -e --argjson u "$((mode == 2755 ? 0 : 1))" --argjson g "$((mode == 4755 ? 0 : 1))" \
      '.setuid_files == $u and .setgid_files == $g and .keep_setuid == false' <<<"$output"
    digest=$(jq -r .digest <<<"$output")
    run -0 --separate-stderr dsec-pull "tar:$f"
    jq -e '.setuid_files + .setgid_files >= 1' <<<"$output"
    [ "$(id -u)" -eq 0 ] || continue
    path=$(materialised "$digest" dir)
    [ "$(stat -c %a "$path/bin/tool")" = 755 ]
    img=$(materialised "$digest" erofs)
    [ "$(in_erofs "$img" sh -c 'stat -c "%a %u" "$M/bin/tool"')" = "$mode 0" ]
    # nothing in the store is a setuid file the host could run
    [ -z "$(find "$(store_dir)" -type f -perm /6000)" ]
    [ -z "$(find "$(store_dir)" -type f -perm /111 -name 'layer.erofs*')" ]
  done
  assert_nothing_outside
}

@test "--keep-setuid keeps mode 4755 when materialised" {
  require_root
  local f src digest path
  f=$(evil suid.tar mode 4755)
  for src in layer pull; do
    export DSEC_ROOT="$BATS_TEST_TMPDIR/root-$src"
    if [ "$src" = layer ]; then
      run -0 --separate-stderr dsec-layer create --keep-setuid --tar "$f"
      digest=$(jq -r .digest <<<"$output")
    else
      run -0 --separate-stderr dsec-pull --keep-setuid "tar:$f"
      digest=$(jq -r '.layers[0].digest' <<<"$output")
    fi
    run -0 --separate-stderr dsec-layer materialise "$digest"
    path=$(jq -r .path <<<"$output")
    [ "$(stat -c '%a %u' "$path/bin/tool")" = "4755 0" ]
  done
}

@test "file capabilities are imported and counted; kept in an EROFS image, stripped from a directory layer" {
  local f digest path img how
  for how in schily libarchive; do
    f=$(evil "caps-$how.tar" caps "$how")
    export DSEC_ROOT="$BATS_TEST_TMPDIR/root-$how"
    run -0 --separate-stderr dsec-layer create --tar "$f"
    jq -e '.capability_files == 1' <<<"$output"
    digest=$(jq -r .digest <<<"$output")
    run -0 --separate-stderr dsec-pull "tar:$f"
    jq -e '.capability_files == 1' <<<"$output"
    [ "$(id -u)" -eq 0 ] || continue
    path=$(materialised "$digest" dir)
    run getfattr -n security.capability "$path/bin/ping"
    [ "$status" -ne 0 ]
    img=$(materialised "$digest" erofs)
    in_erofs "$img" sh -c 'getfattr -n security.capability "$M/bin/ping" >/dev/null'
  done
  assert_nothing_outside
}

@test "bad input: overlayfs metadata xattrs (trusted.overlay.*, user.overlay.*, escaped or not)" {
  local f x
  for x in trusted.overlay.redirect trusted.overlay.opaque user.overlay.opaque \
    user.overlay.overlay.opaque; do
    f=$(evil ovl.tar overlay-xattr "$x" y)
    assert_rejected "$f" "overlay metadata"
    [[ $stderr == *"$x"* ]]
  done
}

@test "--strip-overlay and --strip-setuid: what they remove is counted, and a materialised layer has none of it" {
  local f digest path
  f=$(evil ovl.tar overlay-xattr trusted.overlay.redirect /etc)
  run -0 --separate-stderr dsec-layer create --tar "$f" --strip-overlay
  jq -e '.stripped_overlay_xattrs == 1 and .stripped_setuid == 0' <<<"$output"
  f=$(evil both.tar mode 6755)
  run -0 --separate-stderr dsec-layer create --tar "$f" --strip-setuid
  jq -e '.stripped_setuid == 1 and .stripped_setgid == 1 and .keep_setuid == false' <<<"$output"
  f=$(evil caps.tar caps libarchive)
  run -0 --separate-stderr dsec-layer create --tar "$f" --strip-setuid
  jq -e '.stripped_capabilities == 1 and .compression == "zstd"' <<<"$output"
  digest=$(jq -r .digest <<<"$output")
  if [ "$(id -u)" -eq 0 ]; then
    run -0 --separate-stderr dsec-layer materialise "$digest"
    path=$(jq -r .path <<<"$output")
    [ "$(stat -c %a "$path/bin/ping")" = 755 ]
    run getfattr -n security.capability "$path/bin/ping"
    [ "$status" -ne 0 ]
  fi
  # the same stream without the option: imported, the file counted
  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-layer create --tar "$f"
  jq -e '.capability_files == 1 and .stripped_capabilities == null' <<<"$output"
  assert_nothing_outside
}

@test "--protect: a layer that would change a protected path is refused (3)" {
  local src f
  src=$BATS_TEST_TMPDIR/src
  mkdir -p "$src/srv/grader" "$src/etc"
  echo x >"$src/srv/grader/answer"
  echo y >"$src/etc/hostname"
  tar -C "$src" -cf "$BATS_TEST_TMPDIR/at.tar" srv etc
  run -3 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/at.tar" --protect /srv/grader
  [[ $stderr == *"protected path /srv/grader"* ]]
  # a whiteout of it, of a parent, an opaque parent, a parent replaced
  tar -C "$src" -cf "$BATS_TEST_TMPDIR/ok.tar" etc
  run -0 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/ok.tar" --protect /srv/grader
  for f in srv/.wh.grader .wh.srv srv/.wh..wh..opq; do
    rm -rf "$src"
    mkdir -p "$src/$(dirname "$f")"
    : >"$src/$f"
    tar -C "$src" -cf "$BATS_TEST_TMPDIR/wh.tar" .
    run -3 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/wh.tar" --protect /srv/grader
    [[ $stderr == *"protected path /srv/grader"* ]] || { echo "$f: $stderr" >&2; false; }
  done
  rm -rf "$src"
  mkdir -p "$src"
  ln -s /tmp "$src/srv"
  tar -C "$src" -cf "$BATS_TEST_TMPDIR/ln.tar" srv
  run -3 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/ln.tar" --protect /srv/grader
  [[ $stderr == *"a parent of the protected path"* ]]
  run -2 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/ln.tar" --protect srv
  run -2 --separate-stderr dsec-layer create --tar "$BATS_TEST_TMPDIR/ln.tar" --keep-setuid --strip-setuid
  run -2 --separate-stderr dsec-layer create --dir "$src" --strip-setuid
  run -2 --separate-stderr dsec-layer ls --strip-overlay
  assert_nothing_outside
}

@test "bad input: member larger than its data" {
  local f
  f=$(evil trunc.tar truncated-member)
  assert_rejected "$f" "truncated"
  [[ $stderr == *etc/big* ]]
  f=$(evil trunc.tar.gz --compress gz truncated-member)
  assert_rejected "$f" "truncated"
}

@test "bad input: truncated gzip and zstd streams" {
  local bb
  bb=$(busybox_tar)
  cut_half "$bb" "$BATS_TEST_TMPDIR/half.tar.gz"
  assert_rejected "$BATS_TEST_TMPDIR/half.tar.gz" "truncated"
  command -v zstd >/dev/null || skip "zstd missing"
  gzip -dc "$bb" | zstd -q -c >"$BATS_TEST_TMPDIR/bb.tar.zst"
  cut_half "$BATS_TEST_TMPDIR/bb.tar.zst" "$BATS_TEST_TMPDIR/half.tar.zst"
  assert_rejected "$BATS_TEST_TMPDIR/half.tar.zst" "truncated"
}

# The tar ends cleanly, only the gzip trailer (CRC32 and size) is missing.
@test "bad input: gzip stream without its trailer" {
  local bb f="$BATS_TEST_TMPDIR/notrailer.tar.gz"
  bb=$(busybox_tar)
  head -c $(($(stat -c %s "$bb") - 8)) "$bb" >"$f"
  assert_rejected "$f" "truncated"
}

# The data inflates, but its CRC32 is not the one the trailer records: for
# tar: there is no digest to check, the CRC is the only integrity check.
@test "bad input: gzip stream with a wrong CRC" {
  local bb f="$BATS_TEST_TMPDIR/badcrc.tar.gz" size
  bb=$(busybox_tar)
  cp "$bb" "$f"
  size=$(stat -c %s "$f")
  printf '\xde\xad\xbe\xef' | dd of="$f" bs=1 seek=$((size - 8)) conv=notrunc status=none
  run ! gzip -t "$f"
  assert_rejected "$f" "crc"
}

@test "bad input: unsupported compression" {
  local f kind
  for kind in bzip2 lz4 lzip compress; do
    f=$(evil "x.$kind" "$kind")
    assert_rejected "$f" "unsupported compression: $kind"
  done
}

@test "bad input: decompression bomb" {
  local f
  f=$(evil bomb.tar.gz bomb 200)
  [ "$(stat -c %s "$f")" -lt $((2 << 20)) ]
  assert_rejected "$f" "exceeds the limit of 10485760 bytes" --max-size 10M
}

@test "bad input: not a tarball" {
  local f
  f=$(evil random.bin random)
  assert_rejected "$f" "not a tar archive"
  f=$(evil x.json json)
  assert_rejected "$f" "not a tar archive"
  f=$(evil empty.tar empty)
  assert_rejected "$f" "empty file"
}

@test "bad input: malformed whiteout" {
  local f name
  for name in .wh. etc/.wh. .wh.. etc/.wh...; do
    f=$(evil wh.tar file "$name")
    assert_rejected "$f" "malformed whiteout"
    [[ $stderr == *"$name"* ]]
  done
  f=$(evil wh.tar whiteout-dir)
  assert_rejected "$f" "a whiteout must be an empty regular file"
}

# A whiteout becomes a 0/0 character device when extracted: data in it
# cannot be written, so such a layer imports but never materialises.
@test "bad input: whiteout with data" {
  local f
  f=$(evil wh.tar whiteout-data)
  assert_rejected "$f" "whiteout"
}

@test "a valid busybox tarball imports" {
  local bb
  bb=$(busybox_tar)
  assert_imports "$bb"
  jq -e '.layers[0].media_type | endswith("+gzip")' <<<"$output"
}

# --- OCI layouts ----------------------------------------------------------

@test "oci: a valid layout pulls" {
  local d="$BATS_TEST_TMPDIR/oci" manifest
  manifest=$(python3 "$BATS_TEST_DIRNAME/helpers/mkoci.py" "$d" --tag v1 \
    --rootfs-tar "$(busybox_tar)")
  run -0 --separate-stderr dsec-pull "oci:$d:v1"
  jq -e --arg m "$manifest" '.type == "image" and .digest == $m and
    (.layers | length) == 1' <<<"$output"
  oci "$BATS_TEST_TMPDIR/tiny" --tag v1
  run -0 --separate-stderr dsec-pull "oci:$BATS_TEST_TMPDIR/tiny:v1"
}

@test "oci: a blob whose content does not match its digest" {
  local kind
  for kind in manifest config; do
    oci "$BATS_TEST_TMPDIR/$kind" --tag v1 --corrupt "$kind"
    assert_oci_rejected "$BATS_TEST_TMPDIR/$kind" "does not match"
    assert_store_dirs_empty blobs/sha256 layers
  done
  oci "$BATS_TEST_TMPDIR/layer" --tag v1 --corrupt layer
  assert_oci_rejected "$BATS_TEST_TMPDIR/layer" "mismatch"
  assert_store_dirs_empty blobs/sha256 layers
}

@test "oci: malformed JSON in index.json and in the manifest" {
  oci "$BATS_TEST_TMPDIR/idx" --tag v1 --corrupt index-json
  assert_oci_rejected "$BATS_TEST_TMPDIR/idx" "index.json: invalid JSON"
  oci "$BATS_TEST_TMPDIR/man" --tag v1 --corrupt manifest-json
  assert_oci_rejected "$BATS_TEST_TMPDIR/man" "invalid JSON"
  assert_store_dirs_empty blobs/sha256 layers
}

@test "oci: a layer whose descriptor size is wrong" {
  oci "$BATS_TEST_TMPDIR/o" --tag v1 --corrupt layer-size
  assert_oci_rejected "$BATS_TEST_TMPDIR/o" "its descriptor says"
}

@test "oci: a config diff_id that does not match the layer" {
  oci "$BATS_TEST_TMPDIR/o" --tag v1 --corrupt diff-id
  assert_oci_rejected "$BATS_TEST_TMPDIR/o" "diff_id"
}

@test "oci: a missing layer and a digest that is a path" {
  oci "$BATS_TEST_TMPDIR/miss" --tag v1 --corrupt missing-layer
  assert_oci_rejected "$BATS_TEST_TMPDIR/miss" "missing from the layout"
  oci "$BATS_TEST_TMPDIR/path" --tag v1 --corrupt digest-path
  assert_oci_rejected "$BATS_TEST_TMPDIR/path" "invalid digest"
  assert_store_dirs_empty blobs/sha256 layers
}

@test "oci: a layer with a hostile member" {
  local f
  f=$(evil dotdot.tar file ../../outside/pwned)
  oci "$BATS_TEST_TMPDIR/o" --tag v1 --rootfs-tar "$f"
  assert_oci_rejected "$BATS_TEST_TMPDIR/o" "contains \`..\`"
  assert_store_dirs_empty blobs/sha256 layers
}

# A pull that fails keeps no layer it imported on the way: the layer's
# descriptor or the config disagree with it, so nothing vouches for it.
@test "oci: a rejected pull keeps no layer" {
  local kind
  for kind in layer-size diff-id; do
    oci "$BATS_TEST_TMPDIR/$kind" --tag v1 --corrupt "$kind"
    run -3 --separate-stderr dsec-pull "oci:$BATS_TEST_TMPDIR/$kind:v1"
    assert_store_empty
  done
}
