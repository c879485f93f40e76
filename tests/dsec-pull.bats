#!/usr/bin/env bats
# dsec-pull: the command line, and local sources (tar:, docker-archive:,
# oci:) brought into the store.  Registries and malicious input are tested
# elsewhere.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert

setup() { common_setup; }

MKIMAGE() { python3 "$DSEC_SRCDIR/tests/helpers/fn-mkimage.py" "$@"; }

# --- the command-line contract ---------------------------------------------

@test "--help prints usage naming every SOURCE form on stdout, exit 0" {
  run -0 --separate-stderr dsec-pull --help
  [[ "$output" == Usage:\ dsec-pull* ]]
  [[ "$output" == *"REGISTRY/REPO[:TAG|@DIGEST]"* ]]
  [[ "$output" == *"oci:DIR[:TAG]"* ]]
  [[ "$output" == *"docker-archive:FILE"* ]]
  [[ "$output" == *"tar:FILE"* ]]
  [ -z "$stderr" ]
  [ ! -e "$DSEC_ROOT" ]
}

@test "-h is --help" {
  run -0 --separate-stderr dsec-pull -h
  [[ "$output" == Usage:\ dsec-pull* ]]
}

@test "--version prints the program and version, exit 0" {
  run -0 --separate-stderr dsec-pull --version
  [[ "$output" =~ ^dsec-pull\ [0-9]+\.[0-9]+ ]]
  [ "${#lines[@]}" -eq 1 ]
  [ -z "$stderr" ]
}

@test "an unknown option is a usage error (2)" {
  run -2 --separate-stderr dsec-pull --no-such-option tar:x
  [ -z "$output" ]
  stderr_has "no-such-option"
}

@test "missing SOURCE is a usage error (2)" {
  run -2 --separate-stderr dsec-pull
  [ -z "$output" ]
  stderr_has "SOURCE"
}

@test "two SOURCEs are a usage error (2)" {
  run -2 --separate-stderr dsec-pull tar:a.tar tar:b.tar
  [ -z "$output" ]
}

@test "bad --platform values are usage errors (2)" {
  run -2 --separate-stderr dsec-pull --platform linux tar:x.tar
  [ -z "$output" ]
  stderr_has "platform"
  run -2 --separate-stderr dsec-pull --platform= tar:x.tar
}

@test "bad --max-size values are usage errors (2)" {
  local v
  for v in abc 0 -5 12Q 1.5G ''; do
    run -2 --separate-stderr dsec-pull --max-size="$v" tar:x.tar
    [ -z "$output" ]
  done
}

@test "--parallel out of range is a usage error (2)" {
  run -2 --separate-stderr dsec-pull --parallel 0 tar:x.tar
  run -2 --separate-stderr dsec-pull --parallel 65 tar:x.tar
}

@test "--log-format=json makes usage errors one JSON record on stderr" {
  run -2 --separate-stderr dsec-pull --log-format=json --platform linux tar:x
  [ -z "$output" ]
  jq_err '.level == "error" and (.msg | type == "string") and .prog == "dsec-pull"'
  [ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "--log-format=json makes a fatal error one JSON record with errno" {
  run -3 --separate-stderr dsec-pull --log-format=json "tar:$BATS_TEST_TMPDIR/nope.tar"
  [ -z "$output" ]
  jq_err '.level == "error" and .prog == "dsec-pull" and (.msg | contains("nope.tar")) and .errno == 2'
}

@test "DSEC_LOG_FORMAT=json makes errors JSON records too" {
  DSEC_LOG_FORMAT=json run -3 --separate-stderr dsec-pull "tar:$BATS_TEST_TMPDIR/nope.tar"
  jq_err '.level == "error" and .prog == "dsec-pull" and (.msg | type == "string")'
  DSEC_LOG_FORMAT=json run -2 --separate-stderr dsec-pull
  jq_err '.level == "error" and .prog == "dsec-pull"'
}

@test "an unknown --log-format is a usage error (2)" {
  run -2 --separate-stderr dsec-pull --log-format=xml tar:x
}

@test "a relative DSEC_STORE is a usage error (2)" {
  DSEC_STORE=relative/store run -2 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  [ -z "$output" ]
}

# --- tar: -------------------------------------------------------------------

# pull_tar_variant FILE MEDIA_TYPE: one JSON line, an image of one layer.
pull_tar_variant() {
  run -0 --separate-stderr dsec-pull "tar:$1"
  one_line
  jq_ok '.type == "image"
    and (.digest | test("^sha256:[0-9a-f]{64}$"))
    and (.config_digest | test("^sha256:[0-9a-f]{64}$"))
    and (.layers | length == 1)
    and .layers[0].media_type == $mt
    and (.layers[0].digest | test("^sha256:[0-9a-f]{64}$"))
    and (.layers[0].diff_id | test("^sha256:[0-9a-f]{64}$"))
    and (.layers[0].size > 0)
    and .config.cmd == ["/bin/sh"]
    and .platform == "linux/amd64"
    and .source == "tar:" + $file' --arg mt "$2" --arg file "$1"
  assert_store_clean_tmp
  local hex
  hex=$(jq -r '.layers[0].digest | ltrimstr("sha256:")' <<<"$output")
  [ -f "$(store_dir)/blobs/sha256/$hex" ]
}

@test "tar: a .tar.gz gives an image with a +gzip layer" {
  pull_tar_variant "$(busybox_tar)" application/vnd.oci.image.layer.v1.tar+gzip
}

@test "tar: a plain .tar gives an image with an uncompressed layer" {
  pull_tar_variant "$(busybox_tar_as tar)" application/vnd.oci.image.layer.v1.tar
  # uncompressed: the layer digest is its diff_id
  jq_ok '.layers[0].digest == .layers[0].diff_id'
}

@test "tar: a .tar.zst gives an image with a +zstd layer" {
  pull_tar_variant "$(busybox_tar_as tar.zst)" application/vnd.oci.image.layer.v1.tar+zstd
}

@test "tar: a .tar.xz gives an image with a +xz layer" {
  pull_tar_variant "$(busybox_tar_as tar.xz)" application/vnd.oci.image.layer.v1.tar+xz
}

@test "tar: the compressions of one tree share the diff_id" {
  local f ids=()
  for f in "$(busybox_tar)" "$(busybox_tar_as tar)" "$(busybox_tar_as tar.zst)" \
    "$(busybox_tar_as tar.xz)"; do
    run -0 --separate-stderr dsec-pull "tar:$f"
    ids+=("$(jq -r '.layers[0].diff_id' <<<"$output")")
  done
  [ "$(printf '%s\n' "${ids[@]}" | sort -u | wc -l)" -eq 1 ]
}

@test "tar: the same tarball twice gives the same image, cached the second time" {
  local tb first
  tb=$(busybox_tar)
  run -0 --separate-stderr dsec-pull "tar:$tb"
  one_line
  jq_ok '.layers[0].cached == false'
  first=$output
  run -0 --separate-stderr dsec-pull "tar:$tb"
  one_line
  jq_ok '.layers[0].cached == true
    and .digest == ($first | fromjson).digest
    and .config_digest == ($first | fromjson).config_digest
    and .created == ($first | fromjson).created' --arg first "$first"
  # one image, one layer: layer blob + config + manifest
  [ "$(find "$(store_dir)/blobs/sha256" -type f | wc -l)" -eq 3 ]
  [ "$(find "$(store_dir)/images" -name '*.json' | wc -l)" -eq 1 ]
  assert_store_clean_tmp
}

@test "tar: the image is found by source, --name, digest and 12-digit prefix" {
  local tb digest
  tb=$(busybox_tar)
  run -0 --separate-stderr dsec-pull --name demo/bb:2 "tar:$tb"
  jq_ok '.type == "image"'
  digest=$(jq -r .digest <<<"$output")

  local ref
  for ref in "tar:$tb" demo/bb:2 demo/bb@2 "$digest" "${digest#sha256:}" \
    "$(cut -c8-19 <<<"$digest")"; do
    run -0 --separate-stderr dsec-layer inspect "$ref"
    one_line
    jq_ok '.type == "image" and .digest == $d' --arg d "$digest"
  done
  run -0 --separate-stderr dsec-layer inspect demo/bb@2
  jq_ok '.refs == ["demo/bb@2"] and .source == "tar:" + $tb' --arg tb "$tb"
}

@test "tar: a second pull with another --name adds that name" {
  local tb digest
  tb=$(busybox_tar)
  run -0 --separate-stderr dsec-pull --name one:1 "tar:$tb"
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-pull --name two@2 "tar:$tb"
  jq_ok '.digest == $d and .layers[0].cached == true' --arg d "$digest"
  run -0 --separate-stderr dsec-layer inspect one:1
  jq_ok '.digest == $d and .refs == ["one@1", "two@2"]' --arg d "$digest"
  run -0 --separate-stderr dsec-layer inspect two:2
  jq_ok '.digest == $d' --arg d "$digest"
}

@test "tar: an invalid --name is bad input (3) and pulls nothing" {
  run -3 --separate-stderr dsec-pull --name 'Not A Name' "tar:$(busybox_tar)"
  [ -z "$output" ]
  [ -z "$(find "$(store_dir)/images" -type f 2>/dev/null)" ]
}

@test "tar: the source ref follows the file when its content changes" {
  local f="$BATS_TEST_TMPDIR/rootfs.tar" d1 d2
  cp "$(busybox_tar_as tar)" "$f"
  run -0 --separate-stderr dsec-pull "tar:$f"
  d1=$(jq -r .digest <<<"$output")
  cp "$(busybox_tar)" "$f" # same tree, gzip-compressed: another image
  run -0 --separate-stderr dsec-pull "tar:$f"
  d2=$(jq -r .digest <<<"$output")
  [ "$d1" != "$d2" ]
  run -0 --separate-stderr dsec-layer inspect "tar:$f"
  jq_ok '.digest == $d' --arg d "$d2"
  # the first image is still there by digest
  run -0 --separate-stderr dsec-layer inspect "$d1"
}

@test "tar: a relative path is stored canonical, found by its absolute path" {
  local tb digest
  tb=$(busybox_tar)
  cp "$tb" "$BATS_TEST_TMPDIR/rel.tar.gz"
  cd "$BATS_TEST_TMPDIR"
  run -0 --separate-stderr dsec-pull tar:rel.tar.gz
  jq_ok '.source == "tar:" + $p' --arg p "$BATS_TEST_TMPDIR/rel.tar.gz"
  digest=$(jq -r .digest <<<"$output")
  cd /
  run -0 --separate-stderr dsec-layer inspect "tar:$BATS_TEST_TMPDIR/rel.tar.gz"
  jq_ok '.digest == $d' --arg d "$digest"
}

@test "tar: a nonexistent file is bad input (3) and stores nothing" {
  run -3 --separate-stderr dsec-pull "tar:$BATS_TEST_TMPDIR/missing.tar.gz"
  [ -z "$output" ]
  stderr_has "missing.tar.gz"
  [ -z "$(find "$(store_dir)/blobs" "$(store_dir)/images" -type f 2>/dev/null)" ]
}

@test "tar: a file that is not a tarball is bad input (3), nothing stored" {
  printf 'just some text\n' >"$BATS_TEST_TMPDIR/notar.tar"
  run -3 --separate-stderr dsec-pull "tar:$BATS_TEST_TMPDIR/notar.tar"
  [ -z "$output" ]
  assert_store_clean_tmp
  [ -z "$(find "$(store_dir)/blobs" "$(store_dir)/images" -type f 2>/dev/null)" ]
}

@test "tar: --max-size smaller than the layer is bad input (3)" {
  run -3 --separate-stderr dsec-pull --max-size 1M "tar:$(busybox_tar)"
  [ -z "$output" ]
  stderr_has "max-size"
  assert_store_clean_tmp
  [ -z "$(find "$(store_dir)/images" -type f 2>/dev/null)" ]
  run -0 --separate-stderr dsec-pull --max-size 64M "tar:$(busybox_tar)"
}

@test "tar: a --max-size below the first read says so, not 'not a tar archive'" {
  # the limit is hit while the tar reader is opened (first 256 KiB chunk)
  run -3 --separate-stderr dsec-pull --max-size 100K "tar:$(busybox_tar)"
  [ -z "$output" ]
  [[ "$stderr" != *"not a tar archive"* ]] || {
    echo "a valid tarball over a small --max-size is reported as: $stderr" >&2
    false
  }
  stderr_has "max-size"
}

@test "tar: an unknown source is not found by inspect (3)" {
  run -3 --separate-stderr dsec-layer inspect "tar:$BATS_TEST_TMPDIR/never.tar"
  [ -z "$output" ]
}

@test "DSEC_STORE puts blobs in that store, not under DSEC_ROOT" {
  export DSEC_STORE="$BATS_TEST_TMPDIR/shared-store"
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  local lhex ihex
  lhex=$(jq -r '.layers[0].digest | ltrimstr("sha256:")' <<<"$output")
  ihex=$(jq -r '.digest | ltrimstr("sha256:")' <<<"$output")
  [ -f "$DSEC_STORE/blobs/sha256/$lhex" ]
  [ -f "$DSEC_STORE/blobs/sha256/$ihex" ]
  [ -f "$DSEC_STORE/images/$ihex.json" ]
  [ -z "$(find "$DSEC_ROOT/store" -type f 2>/dev/null)" ]
  blobs_verify "$DSEC_STORE/blobs/sha256"
  run -0 --separate-stderr dsec-layer inspect "sha256:$ihex"
  unset DSEC_STORE
  run -3 --separate-stderr dsec-layer inspect "sha256:$ihex"
}

# --- docker-archive: --------------------------------------------------------

@test "docker-archive: a docker save archive is pulled and named by RepoTags" {
  local da meta
  da="$BATS_TEST_TMPDIR/bb-save.tar"
  meta=$(MKIMAGE docker-archive "$(busybox_tar)" "$da" bb:1)
  run -0 --separate-stderr dsec-pull "docker-archive:$da"
  one_line
  jq_ok '.type == "image"
    and .config_digest == $m.config_digest
    and (.layers | length == 1)
    and .layers[0].diff_id == $m.diff_id
    and .layers[0].digest == $m.diff_id
    and .layers[0].media_type == "application/vnd.oci.image.layer.v1.tar"
    and .config.cmd == ["/bin/sh", "-c", "echo hi"]
    and .config.workdir == "/work"
    and .config.labels["made-by"] == "fn-mkimage"
    and .source == "docker-archive:" + $da' --argjson m "$meta" --arg da "$da"
  local digest
  digest=$(jq -r .digest <<<"$output")
  run -0 --separate-stderr dsec-layer inspect bb:1
  jq_ok '.digest == $d and .refs == ["bb@1"]' --arg d "$digest"
  run -0 --separate-stderr dsec-layer inspect "docker-archive:$da"
  jq_ok '.digest == $d' --arg d "$digest"
  assert_store_clean_tmp
  blobs_verify "$(store_dir)/blobs/sha256"
}

@test "docker-archive: an exported image re-pulls to the same image elsewhere" {
  local da first
  da="$BATS_TEST_TMPDIR/bb-save.tar"
  MKIMAGE docker-archive "$(busybox_tar)" "$da" bb:1 >/dev/null
  run -0 --separate-stderr dsec-pull "docker-archive:$da"
  first=$output

  run -0 --separate-stderr dsec-layer export bb:1 "$BATS_TEST_TMPDIR/out.tar"
  one_line
  jq_ok '.type == "export" and .kind == "image" and .digest == ($f | fromjson).digest' \
    --arg f "$first"
  # what export writes: a docker-archive manifest.json naming the same
  # config and layers, and an OCI index naming the same manifest
  tar -C "$BATS_TEST_TMPDIR" -xOf "$BATS_TEST_TMPDIR/out.tar" manifest.json >"$BATS_TEST_TMPDIR/m.json"
  jq -e --argjson f "$first" '.[0].RepoTags == ["bb:1"]
    and .[0].Config == "blobs/sha256/" + ($f.config_digest | ltrimstr("sha256:"))
    and .[0].Layers == [$f.layers[].digest | "blobs/sha256/" + ltrimstr("sha256:")]' \
    "$BATS_TEST_TMPDIR/m.json"

  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-pull "docker-archive:$BATS_TEST_TMPDIR/out.tar"
  one_line
  jq_ok '($f | fromjson) as $f
    | .config_digest == $f.config_digest
    and [.layers[].digest] == [$f.layers[].digest]
    and [.layers[].diff_id] == [$f.layers[].diff_id]
    and .digest == $f.digest' --arg f "$first"
  # the RepoTags the export wrote name the image in the new store
  run -0 --separate-stderr dsec-layer inspect bb:1
  jq_ok '.digest == ($f | fromjson).digest and .refs == ["bb@1"]' --arg f "$first"
  blobs_verify "$DSEC_ROOT/store/blobs/sha256"
}

@test "docker-archive: an exported image is also an OCI layout" {
  local first
  run -0 --separate-stderr dsec-pull "tar:$(busybox_tar)"
  first=$output
  run -0 --separate-stderr dsec-layer export "$(jq -r .digest <<<"$first")" \
    "$BATS_TEST_TMPDIR/img.tar"
  mkdir "$BATS_TEST_TMPDIR/layout"
  tar -C "$BATS_TEST_TMPDIR/layout" -xf "$BATS_TEST_TMPDIR/img.tar"
  export DSEC_ROOT="$BATS_TEST_TMPDIR/root2"
  run -0 --separate-stderr dsec-pull "oci:$BATS_TEST_TMPDIR/layout"
  jq_ok '($f | fromjson) as $f | .digest == $f.digest
    and .config_digest == $f.config_digest
    and [.layers[].digest] == [$f.layers[].digest]' --arg f "$first"
}

@test "docker-archive: a nonexistent archive is bad input (3)" {
  run -3 --separate-stderr dsec-pull "docker-archive:$BATS_TEST_TMPDIR/none.tar"
  [ -z "$output" ]
}

# --- oci: -------------------------------------------------------------------

@test "oci: a layout's tagged image is pulled with oci:DIR:TAG" {
  local lay meta
  lay="$BATS_TEST_TMPDIR/layout"
  meta=$(MKIMAGE oci "$(busybox_tar)" "$lay" v1)
  run -0 --separate-stderr dsec-pull "oci:$lay:v1"
  one_line
  jq_ok '.type == "image"
    and .digest == $m.v1.manifest
    and .config_digest == $m.v1.config
    and [.layers[].digest] == $m.v1.layers
    and .layers[0].media_type == "application/vnd.oci.image.layer.v1.tar+gzip"
    and .config.cmd == ["/bin/sh", "-c", "echo hi"]
    and .source == "oci:" + $lay + ":v1"' --argjson m "$meta" --arg lay "$lay"
  assert_store_clean_tmp
  blobs_verify "$(store_dir)/blobs/sha256"
  run -0 --separate-stderr dsec-layer inspect "oci:$lay:v1"
  jq_ok '.digest == $m.v1.manifest' --argjson m "$meta"
  # a layout with one image needs no tag
  run -0 --separate-stderr dsec-pull "oci:$lay"
  jq_ok '.digest == $m.v1.manifest and (.layers[0].cached == true)' --argjson m "$meta"
}

@test "oci: a layout with two tagged images needs :TAG (3)" {
  local lay meta
  lay="$BATS_TEST_TMPDIR/layout"
  meta=$(MKIMAGE oci "$(busybox_tar)" "$lay" v1 v2)
  run -3 --separate-stderr dsec-pull "oci:$lay"
  [ -z "$output" ]
  stderr_has "several images"
  stderr_has "TAG"
  [ -z "$(find "$(store_dir)/images" -type f 2>/dev/null)" ]

  run -0 --separate-stderr dsec-pull "oci:$lay:v2"
  jq_ok '.digest == $m.v2.manifest and (.layers | length == 2)
    and .layers[0].digest == $m.v1.layers[0]' --argjson m "$meta"
  run -0 --separate-stderr dsec-pull "oci:$lay:v1"
  jq_ok '.digest == $m.v1.manifest and .layers[0].cached == true' --argjson m "$meta"
}

@test "oci: an image index picks linux/amd64, or --platform's choice" {
  local lay meta
  lay="$BATS_TEST_TMPDIR/layout"
  meta=$(MKIMAGE oci-multiarch "$(busybox_tar)" "$lay" multi)
  run -0 --separate-stderr dsec-pull "oci:$lay:multi"
  one_line
  jq_ok '.digest == $m.amd64 and .platform == "linux/amd64"
    and .layers[0].digest == $m.layer' --argjson m "$meta"
  run -0 --separate-stderr dsec-pull --platform linux/arm64 "oci:$lay:multi"
  jq_ok '.digest == $m.arm64 and .platform == "linux/arm64"
    and .layers[0].cached == true' --argjson m "$meta"
  run -0 --separate-stderr dsec-pull --platform linux/arm64/v8 "oci:$lay:multi"
  jq_ok '.digest == $m.arm64' --argjson m "$meta"
  run -3 --separate-stderr dsec-pull --platform linux/s390x "oci:$lay:multi"
  [ -z "$output" ]
  stderr_has "linux/s390x"
  run -3 --separate-stderr dsec-pull --platform linux/arm64/v7 "oci:$lay:multi"
}

@test "oci: an unknown tag is bad input (3) naming the tag" {
  local lay
  lay="$BATS_TEST_TMPDIR/layout"
  MKIMAGE oci "$(busybox_tar)" "$lay" v1 >/dev/null
  run -3 --separate-stderr dsec-pull "oci:$lay:nosuchtag"
  [ -z "$output" ]
  stderr_has "nosuchtag"
}

@test "oci: a missing layout directory is bad input (3)" {
  run -3 --separate-stderr dsec-pull "oci:$BATS_TEST_TMPDIR/nolayout"
  [ -z "$output" ]
}

# --- concurrency ------------------------------------------------------------

@test "8 concurrent pulls of one tarball into one store agree and leave no debris" {
  local tb i pids=() st=0
  tb=$(busybox_tar)
  for i in 1 2 3 4 5 6 7 8; do
    dsec-pull "tar:$tb" >"$BATS_TEST_TMPDIR/out.$i" 2>"$BATS_TEST_TMPDIR/err.$i" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { st=$?; echo "pull $((i + 1)) exited $st: $(cat "$BATS_TEST_TMPDIR/err.$((i + 1))")" >&2; }
  done
  [ "$st" -eq 0 ]
  for i in 1 2 3 4 5 6 7 8; do
    [ "$(wc -l <"$BATS_TEST_TMPDIR/out.$i")" -eq 1 ]
  done
  [ "$(cat "$BATS_TEST_TMPDIR"/out.* | jq -r .digest | sort -u | wc -l)" -eq 1 ]
  [ "$(cat "$BATS_TEST_TMPDIR"/out.* | jq -r '.layers[0].digest' | sort -u | wc -l)" -eq 1 ]
  # one blob per layer, plus the config and the manifest
  [ "$(find "$(store_dir)/blobs/sha256" -type f | wc -l)" -eq 3 ]
  [ "$(find "$(store_dir)/images" -type f | wc -l)" -eq 1 ]
  assert_store_clean_tmp
  blobs_verify "$(store_dir)/blobs/sha256"
}
