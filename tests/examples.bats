#!/usr/bin/env bats
# Every example script runs end to end with the programs just built, exits
# 0, and leaves neither temporary files nor anything in the caller's store.
# mkrootfs-busybox.sh is a helper the others call, not an example.

load helpers/common

bats_require_minimum_version 1.5.0

setup() {
  common_setup
  [ -x /bin/busybox ] || skip "needs busybox-static (/bin/busybox)"
  command -v jq >/dev/null || skip "needs jq"
  export TMPDIR="$BATS_TEST_TMPDIR/tmp"
  mkdir -p "$TMPDIR"
}

# The example scripts, one per line.
examples() {
  local f
  for f in "$DSEC_SRCDIR"/examples/*.sh; do
    [ "$(basename "$f")" = mkrootfs-busybox.sh ] || echo "$f"
  done
}

@test "there are examples to run" {
  [ -n "$(examples)" ]
}

@test "every example exits 0 with the built programs" {
  local ex failed=0
  while IFS= read -r ex; do
    # PATH starts with $DSEC_BUILDDIR (helpers/common)
    run --separate-stderr "$ex"
    if [ "$status" -ne 0 ] || [ -z "$output" ]; then
      echo "$(basename "$ex"): exit $status" >&2
      echo "stdout: $output" >&2
      echo "stderr: $stderr" >&2
      failed=1
    fi
  done < <(examples)
  [ "$failed" -eq 0 ]
}

@test "examples clean up and leave the caller's store alone" {
  local ex left
  export DSEC_STORE="$BATS_TEST_TMPDIR/callers-store"
  while IFS= read -r ex; do
    run -0 --separate-stderr "$ex"
    left=$(find "$TMPDIR" -mindepth 1 | head -n 5)
    [ -z "$left" ] || { echo "$(basename "$ex") left: $left" >&2; false; }
  done < <(examples)
  [ ! -e "$DSEC_ROOT" ]
  [ ! -e "$DSEC_STORE" ]
}

@test "examples fail, and still clean up, when a program fails" {
  local ex prog left
  mkdir -p "$BATS_TEST_TMPDIR/bin"
  for prog in dsec-pull dsec-layer; do
    printf '#!/bin/sh\necho "%s: broken" >&2\nexit 1\n' "$prog" \
      >"$BATS_TEST_TMPDIR/bin/$prog"
    chmod +x "$BATS_TEST_TMPDIR/bin/$prog"
  done
  while IFS= read -r ex; do
    PATH="$BATS_TEST_TMPDIR/bin:$PATH" run ! --separate-stderr "$ex"
    [[ $stderr == *broken* ]]
    left=$(find "$TMPDIR" -mindepth 1 | head -n 5)
    [ -z "$left" ] || { echo "$(basename "$ex") left: $left" >&2; false; }
  done < <(examples)
}
