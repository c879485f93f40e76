# Assertions shared by tests/dsec-layer.bats and tests/dsec-pull.bats.

# jq_ok FILTER [JQ-ARGS...]: $output (stdout of the last `run`) satisfies
# `jq -e FILTER`; on failure prints the filter and the output.
jq_ok() {
  local filter=$1
  shift
  if ! jq -e "$@" "$filter" <<<"$output" >/dev/null; then
    echo "jq -e '$filter' failed on stdout: $output" >&2
    echo "stderr: ${stderr-}" >&2
    return 1
  fi
}

# jq_err FILTER: every line of $stderr is a JSON record satisfying FILTER.
jq_err() {
  if [ -z "${stderr-}" ] || ! jq -e -s "length > 0 and all($1)" <<<"$stderr" >/dev/null; then
    echo "stderr is not JSON records satisfying $1: ${stderr-}" >&2
    return 1
  fi
}

# one_line: stdout is exactly one line holding one JSON object.
one_line() {
  if [ "${#lines[@]}" -ne 1 ] || ! jq -e 'type == "object"' <<<"$output" >/dev/null; then
    echo "expected one JSON object line on stdout, got: $output" >&2
    return 1
  fi
}

# stderr_has TEXT: stderr contains TEXT.
stderr_has() {
  case "${stderr-}" in
    *"$1"*) return 0 ;;
  esac
  echo "stderr lacks '$1': ${stderr-}" >&2
  return 1
}

# blobs_verify DIR: every file in DIR hashes to its name.
blobs_verify() {
  local f h bad=0
  for f in "$1"/*; do
    [ -e "$f" ] || continue
    h=$(sha256sum <"$f" | cut -d' ' -f1)
    if [ "$h" != "$(basename "$f")" ]; then
      echo "blob $(basename "$f") hashes to $h" >&2
      bad=1
    fi
  done
  return "$bad"
}

# A busybox rootfs tarball with another compression (OUT suffix: .tar,
# .tar.zst, .tar.xz), built once per bats file.
busybox_tar_as() {
  local out="$BATS_FILE_TMPDIR/busybox.$1"
  [ -f "$out" ] || "$DSEC_SRCDIR/examples/mkrootfs-busybox.sh" "$out" >&2
  echo "$out"
}
