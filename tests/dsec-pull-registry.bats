#!/usr/bin/env bats
# dsec-pull against a real OCI distribution registry: Debian's
# docker-registry on 127.0.0.1, filled with skopeo, started once for the
# file (setup_file) and stopped in teardown_file, which bats runs even when
# setup_file or a test fails.  No mock registry.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/registry

setup_file() {
  local t="$BATS_FILE_TMPDIR" bb
  command -v docker-registry >/dev/null || skip "docker-registry is not installed"
  command -v skopeo >/dev/null || skip "skopeo is not installed"

  registry_start || return 1

  # busybox: one layer, the busybox rootfs
  bb=$(busybox_tar)
  if [ -f "$DSEC_SRCDIR/tests/helpers/mkoci.py" ]; then
    python3 "$DSEC_SRCDIR/tests/helpers/mkoci.py" "$t/oci-busybox" \
      --tag v1 --rootfs-tar "$bb" >&2 || return 1
  else
    registry_mkoci "$t/oci-busybox" "$(jq -nc --arg bb "$bb" '{tag: "v1",
      images: [{env: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DSEC_TEST=1"],
                layers: [$bb]}]}')" || return 1
  fi
  registry_push "$t/oci-busybox" v1 test/busybox:v1 || return 1

  # layers: three layers; the second deletes etc/gone with a whiteout and
  # hides the first layer's a/ with an opaque marker
  mkdir -p "$t/l1/etc" "$t/l1/a" "$t/l2/etc" "$t/l2/a" "$t/l3/etc"
  echo keep >"$t/l1/etc/keep"
  echo gone >"$t/l1/etc/gone"
  echo old1 >"$t/l1/a/old1"
  echo old2 >"$t/l1/a/old2"
  : >"$t/l2/etc/.wh.gone"
  : >"$t/l2/a/.wh..wh..opq"
  echo new >"$t/l2/a/new"
  echo added >"$t/l3/etc/added"
  registry_tar_dir "$t/l1" "$t/l1.tar" &&
    registry_tar_dir "$t/l2" "$t/l2.tar" &&
    registry_tar_dir "$t/l3" "$t/l3.tar" || return 1
  registry_mkoci "$t/oci-layers" "$(jq -nc --arg t "$t" '{tag: "v1",
    images: [{layers: ["\($t)/l1.tar", "\($t)/l2.tar", "\($t)/l3.tar"]}]}')" ||
    return 1
  registry_push "$t/oci-layers" v1 test/layers:v1 || return 1

  # multi: an index with a linux/amd64 and a linux/arm64 image
  mkdir -p "$t/amd64" "$t/arm64"
  echo amd64 >"$t/amd64/arch"
  echo arm64 >"$t/arm64/arch"
  registry_tar_dir "$t/amd64" "$t/amd64.tar" &&
    registry_tar_dir "$t/arm64" "$t/arm64.tar" || return 1
  registry_mkoci "$t/oci-multi" "$(jq -nc --arg t "$t" '{tag: "v1",
    index: true, images: [{arch: "amd64", layers: ["\($t)/amd64.tar"]},
                          {arch: "arm64", layers: ["\($t)/arm64.tar"]}]}')" ||
    return 1
  registry_push "$t/oci-multi" v1 test/multi:v1 --all || return 1

  # big: busybox and 30 MB of random data, so that a download takes a moment
  mkdir -p "$t/big"
  head -c 30M /dev/urandom >"$t/big/random" || return 1
  registry_tar_dir "$t/big" "$t/big.tar" && gzip -1n "$t/big.tar" || return 1
  registry_mkoci "$t/oci-big" "$(jq -nc --arg t "$t" --arg bb "$bb" '{tag: "v1",
    images: [{layers: [$bb, "\($t)/big.tar.gz"]}]}')" || return 1
  registry_push "$t/oci-big" v1 test/big:v1 || return 1
  rm -rf "$t/big" "$t/big.tar.gz" "$t/oci-big"

  BUSYBOX_DIGEST=$(registry_digest test/busybox:v1) || return 1
  LAYERS_DIGEST=$(registry_digest test/layers:v1) || return 1
  BIG_DIGEST=$(registry_digest test/big:v1) || return 1
  skopeo inspect --raw --tls-verify=false "docker://$REGISTRY/test/multi:v1" \
    >"$t/multi-index.json" || return 1
  skopeo inspect --config --raw --tls-verify=false \
    "docker://$REGISTRY/test/busybox:v1" >"$t/busybox-config.json" || return 1
  export BUSYBOX_DIGEST LAYERS_DIGEST BIG_DIGEST

  # The token registry is only needed by the last test, which says so when
  # it is missing; the others run without it.
  registry_start token || echo "the token registry did not start" >&2
}

teardown_file() {
  registry_stop token
  registry_stop
}

setup() {
  common_setup
}

# Fails unless every file under blobs/sha256 hashes to its name.
assert_blobs_verified() {
  local f hex bad=0
  for f in "$(store_dir)"/blobs/sha256/*; do
    [ -e "$f" ] || continue
    hex=$(sha256sum "$f" | cut -d' ' -f1)
    if [ "$hex" != "$(basename "$f")" ]; then
      echo "blob $(basename "$f") hashes to $hex" >&2
      bad=1
    fi
  done
  return "$bad"
}

blob_count() {
  find "$(store_dir)/blobs/sha256" -type f 2>/dev/null | wc -l
}

# Fails unless the store holds no image record and no name.
assert_store_has_no_image() {
  local left
  left=$(find "$(store_dir)/images" "$(store_dir)/refs" -type f 2>/dev/null)
  [ -z "$left" ] || { echo "left in the store: $left" >&2; return 1; }
}

@test "pull by tag over HTTP with --insecure prints the image record" {
  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/busybox:v1"
  echo "$output" | jq -e --arg d "$BUSYBOX_DIGEST" '
    .type == "image" and .digest == $d and
    (.config_digest | test("^sha256:[0-9a-f]{64}$")) and
    .platform == "linux/amd64" and
    (.layers | length) >= 1 and
    all(.layers[];
        (.digest | test("^sha256:[0-9a-f]{64}$")) and
        (.size | type == "number" and . > 0) and
        (.media_type | startswith("application/vnd.oci.image.layer.v1.tar")) and
        (.diff_id | test("^sha256:[0-9a-f]{64}$")) and
        .cached == false) and
    (.config.env | type == "object") and
    (.config.cmd | type == "array")'
  # config.env is the registry's config Env, as an object
  jq -e --argjson rec "$output" '
    [.config.Env[] | capture("^(?<key>[^=]*)=(?<value>.*)$")] | from_entries
    == $rec.config.env' "$BATS_FILE_TMPDIR/busybox-config.json"
  # the layers and the config are in the store, verified
  for d in $(echo "$output" | jq -r '.layers[].digest, .config_digest'); do
    [ -f "$(store_dir)/blobs/sha256/${d#sha256:}" ]
  done
  assert_blobs_verified
  assert_store_clean_tmp

  run -0 --separate-stderr dsec-layer compose "$REGISTRY/test/busybox:v1"
  echo "$output" | jq -e 'type == "object"'
  run -0 --separate-stderr dsec-layer inspect "$BUSYBOX_DIGEST"
  echo "$output" | jq -e --arg d "$BUSYBOX_DIGEST" '.digest == $d'
}

@test "a second pull finds every layer cached and adds no blob" {
  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/layers:v1"
  echo "$output" | jq -e '(.layers | length) == 3 and all(.layers[]; .cached == false)'
  before=$(blob_count)
  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/layers:v1"
  echo "$output" | jq -e --arg d "$LAYERS_DIGEST" '
    .digest == $d and (.layers | length) == 3 and all(.layers[]; .cached == true)'
  [ "$(blob_count)" -eq "$before" ]
  assert_store_clean_tmp
}

@test "pull by digest; a digest the registry lacks exits 3" {
  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/busybox@$BUSYBOX_DIGEST"
  echo "$output" | jq -e --arg d "$BUSYBOX_DIGEST" '.type == "image" and .digest == $d'

  rm -rf "$DSEC_ROOT"
  missing=sha256:$(printf 'not in the registry' | sha256sum | cut -d' ' -f1)
  run -3 --separate-stderr dsec-pull --insecure "$REGISTRY/test/busybox@$missing"
  [ -z "$output" ]
  [[ "$stderr" == *"$missing"* ]]
  [[ "$stderr" == *"not found"* ]]
  assert_store_has_no_image
}

@test "--name makes the image findable under that name" {
  run -0 --separate-stderr dsec-pull --insecure --name mybb:1 "$REGISTRY/test/busybox:v1"
  run -0 --separate-stderr dsec-layer inspect mybb:1
  echo "$output" | jq -e --arg d "$BUSYBOX_DIGEST" '.digest == $d'
}

@test "an unknown repository or tag exits 3 and stores nothing" {
  run -3 --separate-stderr dsec-pull --insecure "$REGISTRY/test/nosuch:v1"
  [ -z "$output" ]
  [[ "$stderr" == *"test/nosuch"* ]]
  [[ "$stderr" == *"not found"* ]]
  assert_store_has_no_image

  run -3 --separate-stderr dsec-pull --insecure "$REGISTRY/test/busybox:nosuch"
  [ -z "$output" ]
  [[ "$stderr" == *"nosuch"* ]]
  [[ "$stderr" == *"not found"* ]]
  assert_store_has_no_image
  assert_store_clean_tmp
}

@test "without --insecure an HTTP registry fails TLS and exits 1" {
  run -1 --separate-stderr dsec-pull "$REGISTRY/test/busybox:v1"
  [ -z "$output" ]
  [[ "$stderr" == *"$REGISTRY/test/busybox"* ]]
  [[ "$stderr" =~ SSL|TLS ]]
  assert_store_has_no_image
}

@test "a closed port exits 1" {
  port=$(registry_free_port)
  run -1 --separate-stderr dsec-pull --insecure "127.0.0.1:$port/test/busybox:v1"
  [ -z "$output" ]
  [[ "$stderr" == *"127.0.0.1:$port"* ]]
  [[ "$stderr" =~ [Cc]onnect ]]
  assert_store_has_no_image
}

@test "an index: linux/amd64 by default, --platform picks another, a missing one exits 3" {
  idx="$BATS_FILE_TMPDIR/multi-index.json"
  amd64=$(jq -r '.manifests[] | select(.platform.architecture == "amd64") | .digest' "$idx")
  arm64=$(jq -r '.manifests[] | select(.platform.architecture == "arm64") | .digest' "$idx")
  [ -n "$amd64" ]
  [ -n "$arm64" ]
  [ "$amd64" != "$arm64" ]

  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/multi:v1"
  echo "$output" | jq -e --arg d "$amd64" '.digest == $d and .platform == "linux/amd64"'

  run -0 --separate-stderr dsec-pull --insecure --platform linux/arm64 "$REGISTRY/test/multi:v1"
  echo "$output" | jq -e --arg d "$arm64" '.digest == $d and .platform == "linux/arm64"'
  run -0 --separate-stderr dsec-layer inspect "$arm64"
  echo "$output" | jq -e '.platform == "linux/arm64"'

  rm -rf "$DSEC_ROOT"
  run -3 --separate-stderr dsec-pull --insecure --platform linux/s390x "$REGISTRY/test/multi:v1"
  [ -z "$output" ]
  [[ "$stderr" == *"no manifest for platform linux/s390x"* ]]
  assert_store_has_no_image
}

@test "two concurrent pulls of one image into one store" {
  t=$BATS_TEST_TMPDIR
  timeout 300 dsec-pull --insecure "$REGISTRY/test/big:v1" >"$t/1.json" 2>"$t/1.err" 3>&- &
  p1=$!
  timeout 300 dsec-pull --insecure "$REGISTRY/test/big:v1" >"$t/2.json" 2>"$t/2.err" 3>&- &
  p2=$!
  s1=0 s2=0
  wait "$p1" || s1=$?
  wait "$p2" || s2=$?
  cat "$t/1.err" "$t/2.err"
  [ "$s1" -eq 0 ]
  [ "$s2" -eq 0 ]
  jq -e --arg d "$BIG_DIGEST" '.digest == $d' "$t/1.json"
  jq -e --arg d "$BIG_DIGEST" '.digest == $d' "$t/2.json"
  # one blob per layer, plus the config and the manifest; nothing else
  n=$(jq '[.layers[].digest] | unique | length' "$t/1.json")
  for d in $(jq -r '.layers[].digest, .config_digest, .digest' "$t/1.json"); do
    [ -f "$(store_dir)/blobs/sha256/${d#sha256:}" ]
  done
  [ "$(blob_count)" -eq $((n + 2)) ]
  assert_blobs_verified
  assert_store_clean_tmp
}

@test "a pull killed with SIGKILL leaves no corrupt blob, and a new pull succeeds" {
  # Kill at three points: at once, once a download has begun, once it is
  # well on.  A pull may already have finished by then: only invariants are
  # checked, never the timing.
  for min_kb in 0 1 8192; do
    dsec-pull --insecure "$REGISTRY/test/big:v1" >/dev/null 2>&1 3>&- &
    pid=$!
    if [ "$min_kb" -gt 0 ]; then
      for ((i = 0; i < 1000; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        [ -n "$(find "$(store_dir)/tmp" -type f -size +"${min_kb}k" 2>/dev/null | head -1)" ] && break
        sleep 0.01
      done
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" || true
    assert_blobs_verified
  done

  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/big:v1"
  echo "$output" | jq -e --arg d "$BIG_DIGEST" '.digest == $d and (.layers | length) == 2'
  for d in $(echo "$output" | jq -r '.layers[].digest, .config_digest, .digest'); do
    [ -f "$(store_dir)/blobs/sha256/${d#sha256:}" ]
  done
  assert_blobs_verified
  run -0 --separate-stderr dsec-layer compose "$REGISTRY/test/big:v1"
}

@test "materialise turns whiteouts into 0/0 devices and opaque dirs into trusted.overlay.opaque and user.overlay.opaque" {
  require_root
  run -0 --separate-stderr dsec-pull --insecure "$REGISTRY/test/layers:v1"
  l2=$(echo "$output" | jq -r '.layers[1].digest')
  run -0 --separate-stderr dsec-layer materialise "$REGISTRY/test/layers:v1"
  root="$(store_dir)/layers/${l2#sha256:}/rootfs"
  [ -d "$root" ]
  [ "$(stat -c '%F %t:%T %s' "$root/etc/gone")" = "character special file 0:0 0" ]
  [ "$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "trusted.overlay.opaque").decode())' "$root/a")" = y ]
  # an overlay with userxattr (containers) reads this one
  [ "$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "user.overlay.opaque").decode())' "$root/a")" = y ]
  [ "$(cat "$root/a/new")" = new ]
  [ -z "$(find "$(store_dir)/layers" -name '.wh.*')" ]
}

@test "bearer-token auth: a pull through the token server" {
  [ -n "${TOKEN_REGISTRY:-}" ] || {
    echo "the token registry did not start; see setup_file's output" >&2
    return 1
  }
  # the registry wants a token ...
  code=$(curl -s -o /dev/null -w '%{http_code}' \
    "http://$TOKEN_REGISTRY/v2/test/busybox/manifests/v1")
  [ "$code" = 401 ]
  : >"$BATS_FILE_TMPDIR/registry-token/tokens.log"
  # ... and dsec-pull gets one
  run -0 --separate-stderr dsec-pull --insecure "$TOKEN_REGISTRY/test/busybox:v1"
  echo "$output" | jq -e --arg d "$BUSYBOX_DIGEST" '.digest == $d and (.layers | length) >= 1'
  jq -se 'length >= 1 and all(.[]; .service == "dsec-test-registry") and
    any(.[]; .scopes | index("repository:test/busybox:pull"))' \
    "$BATS_FILE_TMPDIR/registry-token/tokens.log"
  assert_blobs_verified
}
