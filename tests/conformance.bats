#!/usr/bin/env bats
# The backend conformance suite: one exec contract (DESIGN.md, dsec-run(1)
# "EXEC PROTOCOL"), asserted the same way on every backend, all driven
# through dsec-run (one front end for the four backends).
#
# Each backend gets one sandbox for the file (setup_file), so a microVM
# boots once; tests that need a sandbox of their own (failures at create,
# a dead supervisor) make it and remove it.  Where a backend cannot do
# something, the test says so by name (cannot BACKEND WHAT), never
# silently.  Backends: fncall, container, microvm; vm too with
# DSEC_CONFORMANCE_VM=1 (a q35 boot under TCG takes longer).
#
# Needs root, QEMU and a guest kernel (bootstrap.sh installs them; in CI a
# missing one is a failure).

bats_require_minimum_version 1.5.0

load helpers/common

BACKENDS=(fncall container microvm)
[ "${DSEC_CONFORMANCE_VM-}" = 1 ] && BACKENDS+=(vm)

setup_file() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  export DSEC_ROOT="$BATS_FILE_TMPDIR/root" DSEC_RUN="$BATS_FILE_TMPDIR/run"
  unset DSEC_STORE DSEC_LOG_FORMAT DSEC_DEBUG
  if ! command -v qemu-system-x86_64 >/dev/null ||
    ! compgen -G "/boot/vmlinuz-*" >/dev/null; then
    if [ "${CI-}" = true ]; then
      echo "QEMU or a guest kernel is missing" >&2
      return 1
    fi
    skip "QEMU or a guest kernel is missing"
  fi
  dsec-pull --name busybox:1 "tar:$(busybox_tar)" >/dev/null
  # a layer the protect tests use: a real path and a symlink to it
  mkdir -p "$BATS_FILE_TMPDIR/layer/opt/grader"
  echo answer >"$BATS_FILE_TMPDIR/layer/opt/grader/secret"
  ln -s opt/grader "$BATS_FILE_TMPDIR/layer/grader"
  dsec-layer create --dir "$BATS_FILE_TMPDIR/layer" --name conf/grader@1 >/dev/null
  : >"$BATS_FILE_TMPDIR/ids"
  local b id
  for b in "${BACKENDS[@]}"; do
    id=$(dsec-run create --backend "$b" --image busybox:1 --layer conf/grader@1 \
      --env FROM_SPEC=spec --env BOTH=spec --workdir /tmp --memory 256 |
      jq -r .id) || return 1
    [ -n "$id" ] && [ "$id" != null ] || return 1
    echo "$b $id" >>"$BATS_FILE_TMPDIR/ids"
  done
}

teardown_file() {
  local b id left=0
  [ -n "${DSEC_ROOT-}" ] || return 0
  while read -r b id; do
    dsec-run rm --force "$id" >/dev/null 2>&1 || left=1
  done <"$BATS_FILE_TMPDIR/ids"
  # nothing of them is left: supervisors, QEMUs, cgroups
  while read -r b id; do
    if ls -d /sys/fs/cgroup/*/dsec/"$id" /sys/fs/cgroup/dsec/"$id" 2>/dev/null; then
      echo "cgroup of $b sandbox $id left" >&2
      left=1
    fi
  done <"$BATS_FILE_TMPDIR/ids"
  layer_mounts_clean || left=1
  return $left
}

setup() {
  export DSEC_ROOT="$BATS_FILE_TMPDIR/root" DSEC_RUN="$BATS_FILE_TMPDIR/run"
  MINE=()
}

teardown() {
  local id
  for id in "${MINE[@]}"; do
    dsec-run rm --force "$id" >/dev/null 2>&1 || true
  done
}

# sb B: the file's sandbox of backend B.
sb() {
  awk -v b="$1" '$1 == b { print $2 }' "$BATS_FILE_TMPDIR/ids"
}

# x B [EXEC OPTION]... -- CMD...: runs CMD in backend B's sandbox; $status
# and $output (the result record) as bats' run sets them.
x() {
  local b=$1
  shift
  run --separate-stderr dsec-run exec "$(sb "$b")" "$@"
}

# expect B FILTER: the last result satisfies the jq FILTER, or the test
# fails naming the backend.
expect() {
  jq -e "$2" <<<"$output" >/dev/null || {
    echo "$1: result $output does not satisfy $2 (exit $status; stderr ${stderr-})" >&2
    return 1
  }
}

# status_is B N: the last exec exited N, or the test fails naming the
# backend.
status_is() {
  [ "$status" -eq "$2" ] || {
    echo "$1: exit $status, not $2 (result $output; stderr ${stderr-})" >&2
    return 1
  }
}

# cannot B WHAT: B does not do WHAT, said by name in the test's output.
cannot() {
  echo "# cannot $1: $2" >&3
}

@test "exit codes: 0, 1, any status, 126 not executable, 127 not found" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" -- true
    status_is "$b" 0
    expect "$b" '.exit_code == 0 and .signal == null'
    x "$b" -- false
    status_is "$b" 1
    expect "$b" '.exit_code == 1'
    x "$b" -- sh -c 'exit 42'
    status_is "$b" 42
    expect "$b" '.exit_code == 42'
    x "$b" -- /etc/passwd
    status_is "$b" 126
    expect "$b" '.exit_code == 126'
    x "$b" -- no-such-command-here
    status_is "$b" 127
    expect "$b" '.exit_code == 127 and (.stderr | test("no-such-command-here"))'
    x "$b" --workdir /no/such/dir -- true
    status_is "$b" 126
    expect "$b" '.exit_code == 126'
  done
}

@test "signals: 128+N with the signal named, SIGKILL and SIGTERM" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" -- sh -c 'kill -9 $$'
    status_is "$b" 137
    expect "$b" '.exit_code == 137 and .signal == 9'
    x "$b" -- sh -c 'kill -TERM $$'
    status_is "$b" 143
    expect "$b" '.exit_code == 143 and .signal == 15'
  done
}

@test "every signal disposition is the default: SIGPIPE ends a writer, none is ignored or blocked" {
  local b
  for b in "${BACKENDS[@]}"; do
    # (the command itself: a shell may change its own, as busybox's ash
    # does when it is PID 1, which an fncall call's command is)
    # (signals 32 and 33 are the C library's own: no program sets them,
    # and glibc installs its handlers whatever they were)
    x "$b" -- grep -E "^Sig(Ign|Blk):" /proc/self/status
    expect "$b" '.stdout | test("^SigBlk:\t0000000000000000\nSigIgn:\t0000000[01][08]0000000\n$")'
    # yes | head -1: yes dies of SIGPIPE (141), not of a write error
    x "$b" -- sh -c '(yes; echo "yes ended $?" >&2) | head -1'
    expect "$b" '.exit_code == 0 and .stdout == "y\n" and (.stderr | test("yes ended 141"))'
  done
}

@test "stdin: given bytes reach the command, none is an empty input" {
  local b f=$BATS_FILE_TMPDIR/in.txt
  printf 'line one\nline two\n' >"$f"
  for b in "${BACKENDS[@]}"; do
    x "$b" --stdin "$f" -- cat
    expect "$b" '.exit_code == 0 and .stdout == "line one\nline two\n"'
    x "$b" -- cat
    expect "$b" '.exit_code == 0 and .stdout == ""'
  done
}

@test "env and workdir: the spec's, overridden by the request's" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" --env BOTH=request --env ONLY=req -- sh -c 'echo "$FROM_SPEC $BOTH $ONLY $(pwd)"'
    expect "$b" '.stdout == "spec request req /tmp\n"'
    x "$b" --workdir / -- pwd
    expect "$b" '.stdout == "/\n"'
    x "$b" -- sh -c 'echo "[$ONLY]"'
    expect "$b" '.stdout == "[]\n"'
  done
}

@test "timeouts: 124, timed_out, a limit event, and the sandbox goes on" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" --timeout 1 -- sleep 60
    status_is "$b" 124
    expect "$b" '.exit_code == 124 and .timed_out == true'
    x "$b" -- echo after
    expect "$b" '.stdout == "after\n"'
    run -0 dsec-run events "$(sb "$b")"
    jq -e -s 'any(.[]; .type == "limit" and .limit == "timeout")' <<<"$output" >/dev/null ||
      { echo "$b: no timeout event" >&2; false; }
  done
}

@test "output caps: what is past max_output_bytes is counted, not kept" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" --max-output 1000 -- sh -c 'yes | head -c 100000; yes e | head -c 5000 >&2'
    expect "$b" '.exit_code == 0 and .truncated == true and (.stdout | length) == 1000 and
      .stdout_bytes == 100000 and (.stderr | length) == 1000 and .stderr_bytes == 5000'
    run -0 dsec-run events "$(sb "$b")"
    jq -e -s 'any(.[]; .type == "limit" and .limit == "output")' <<<"$output" >/dev/null ||
      { echo "$b: no output limit event" >&2; false; }
  done
}

@test "replay: a recorded seq answers from the trajectory; a different one is a conflict (4)" {
  local b id
  for b in "${BACKENDS[@]}"; do
    id=$(sb "$b")
    x "$b" --seq 0 -- sh -c 'echo $$ >>/tmp/ran; cat /tmp/ran | wc -l'
    expect "$b" '.replayed == false and .seq == 0'
    local first=$output
    x "$b" --seq 0 -- sh -c 'echo $$ >>/tmp/ran; cat /tmp/ran | wc -l'
    expect "$b" '.replayed == true'
    [ "$(jq -c 'del(.replayed, .duration_ms)' <<<"$output")" = "$(jq -c 'del(.replayed, .duration_ms)' <<<"$first")" ] ||
      { echo "$b: the replay differs: $first / $output" >&2; false; }
    x "$b" --seq 0 -- echo different
    status_is "$b" 4
    expect "$b" '.type == "error"'
    x "$b" --seq 5 -- true
    status_is "$b" 4
    expect "$b" '.type == "error"'
    run -0 dsec-run events "$id"
    jq -e -s 'any(.[]; .type == "replay_conflict" and .seq == 0 and .field == "cmd") and
      any(.[]; .type == "replay" and .seq == 0)' <<<"$output" >/dev/null ||
      { echo "$b: replay events missing" >&2; false; }
  done
}

@test "durable: false (run --rm's) is checked and still recorded by every backend; never with a seq (3)" {
  local b id
  for b in "${BACKENDS[@]}"; do
    id=$(sb "$b")
    run -0 --separate-stderr dsec-run exec "$id" --requests - <<'EOF_'
{"cmd":["true"],"durable":"no"}
{"cmd":["true"],"durable":false,"seq":900}
{"cmd":["echo","not synced"],"durable":false}
EOF_
    jq -e -s '.[0].type == "error" and .[0].exit_code == 3 and
      .[1].type == "error" and .[1].exit_code == 3 and
      .[2].type == "result" and .[2].stdout == "not synced\n"' <<<"$output" >/dev/null ||
      { echo "$b: $output" >&2; false; }
    run -0 dsec-run trajectory "$id"
    jq -e -s 'any(.[]; .request.cmd == ["echo", "not synced"] and
      (.request | has("durable") | not))' <<<"$output" >/dev/null ||
      { echo "$b: not in the trajectory: $output" >&2; false; }
  done
}

@test "events: every exec is recorded with its seq and status" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" --seq 1 -- sh -c 'exit 3'
    run -0 dsec-run events "$(sb "$b")"
    jq -e -s 'any(.[]; .type == "created") and
      any(.[]; .type == "exec" and .seq == 1 and .exit_code == 3)' <<<"$output" >/dev/null ||
      { echo "$b: exec event missing: $output" >&2; false; }
  done
}

@test "concurrent execs in one sandbox each get their own answer" {
  local b i
  for b in "${BACKENDS[@]}"; do
    for i in 1 2 3 4; do
      dsec-run exec "$(sb "$b")" -- sh -c "sleep 0.$i; echo $i" >"$BATS_TEST_TMPDIR/$b.$i" 3>&- &
    done
    wait
    for i in 1 2 3 4; do
      jq -e --arg i "$i" '.exit_code == 0 and .stdout == "\($i)\n"' "$BATS_TEST_TMPDIR/$b.$i" >/dev/null ||
        { echo "$b: exec $i: $(cat "$BATS_TEST_TMPDIR/$b.$i")" >&2; false; }
    done
  done
}

@test "protect and hide: a missing or symlinked protect path fails the create (3), nothing is left" {
  local b
  for b in "${BACKENDS[@]}"; do
    run -3 --separate-stderr dsec-run create --backend "$b" --image busybox:1 \
      --layer conf/grader@1 --protect /no/such/path
    run -3 --separate-stderr dsec-run create --backend "$b" --image busybox:1 \
      --layer conf/grader@1 --protect /grader/secret
    [[ $stderr == *"symbolic link"* ]] || { echo "$b: $stderr" >&2; false; }
  done
  # nothing but the file's sandboxes
  [ "$(dsec-run ps --all | jq -s length)" -eq "${#BACKENDS[@]}" ]
}

@test "protect and hide hold on every backend" {
  local b id
  for b in "${BACKENDS[@]}"; do
    id=$(dsec-run create --backend "$b" --image busybox:1 --layer conf/grader@1 \
      --protect /opt/grader --hide /etc/passwd | jq -r .id)
    MINE+=("$id")
    run --separate-stderr dsec-run exec "$id" -- sh -c 'echo forged >/opt/grader/secret'
    # the shell's own failure to open the file, not one of dsec's (125)
    status_is "$b" 1
    run -0 --separate-stderr dsec-run exec "$id" -- cat /opt/grader/secret
    expect "$b" '.stdout == "answer\n"'
    run --separate-stderr dsec-run exec "$id" -- cat /etc/passwd
    expect "$b" '.stdout == ""'
    dsec-run rm "$id" >/dev/null
  done
}

@test "exclusive execs: run where the backend can keep them apart, refused by name where not" {
  local b
  for b in "${BACKENDS[@]}"; do
    x "$b" --exclusive -- echo alone
    case $b in
    microvm | vm)
      status_is "$b" 3
      expect "$b" '.type == "error"'
      cannot "$b" "exclusive execs (a guest's processes share one PID namespace)"
      ;;
    *)
      status_is "$b" 0
      expect "$b" '.stdout == "alone\n"'
      ;;
    esac
  done
}

@test "an exec into a sandbox whose supervisor died is dsec's failure (125)" {
  local b id pid
  for b in "${BACKENDS[@]}"; do
    id=$(dsec-run create --backend "$b" --image busybox:1 | jq -r .id)
    MINE+=("$id")
    pid=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
    kill -9 "$pid"
    for _ in $(seq 100); do
      [ "$(dsec-run inspect "$id" | jq -r .state)" = died ] && break
      sleep 0.1
    done
    run --separate-stderr dsec-run exec "$id" -- true
    [ "$status" -eq 125 ] || { echo "$b: exit $status ($stderr)" >&2; false; }
  done
}

@test "one serve: a container and a microVM created, exec'd, suspended, resumed and removed by one process" {
  local out=$BATS_TEST_TMPDIR/serve.out in=$BATS_TEST_TMPDIR/serve.in ids c v
  mkfifo "$in"
  dsec-run serve <"$in" >"$out" 2>"$BATS_TEST_TMPDIR/serve.err" 3>&- &
  local serve=$!
  exec 4>"$in"
  # wait_answer RID: the answer to RID, once it came (a line being
  # written may be incomplete: it is read again next time)
  wait_answer() {
    local a
    for _ in $(seq 1200); do
      a=$(jq -R -c --arg r "$1" 'fromjson? | select(.rid == $r)' "$out")
      if [ -n "$a" ]; then
        echo "$a"
        return 0
      fi
      sleep 0.1
    done
    echo "no answer to $1: $(cat "$out")" >&2
    return 1
  }
  # both creates in one write: both are answered
  printf '%s\n%s\n' \
    '{"op":"create","rid":"c","spec":{"image":"busybox:1","backend":"container"}}' \
    '{"op":"create","rid":"v","spec":{"image":"busybox:1","backend":"microvm"}}' >&4
  # (an assignment fails with its command: a pipeline's would not)
  c=$(wait_answer c)
  v=$(wait_answer v)
  c=$(jq -r .id <<<"$c")
  v=$(jq -r .id <<<"$v")
  MINE+=("$c" "$v")
  [ "$(dsec-run inspect "$c" | jq -r .backend)" = container ]
  [ "$(dsec-run inspect "$v" | jq -r .backend)" = microvm ]
  for id in "$c" "$v"; do
    printf '{"op":"exec","rid":"x-%s","id":"%s","cmd":["sh","-c","echo up > /tmp/f; cat /tmp/f"]}\n' "$id" "$id" >&4
    wait_answer "x-$id" | jq -e '.exit_code == 0 and .stdout == "up\n"'
    printf '{"op":"suspend","rid":"s-%s","id":"%s"}\n' "$id" "$id" >&4
    wait_answer "s-$id" | jq -e '.type == "suspended"'
    printf '{"op":"resume","rid":"r-%s","id":"%s"}\n' "$id" "$id" >&4
    wait_answer "r-$id" | jq -e '.type == "resumed"'
    printf '{"op":"exec","rid":"y-%s","id":"%s","cmd":["cat","/tmp/f"]}\n' "$id" "$id" >&4
    wait_answer "y-$id" | jq -e '.stdout == "up\n"'
    printf '{"op":"rm","rid":"d-%s","id":"%s"}\n' "$id" "$id" >&4
    wait_answer "d-$id" | jq -e '.type == "removed"'
  done
  exec 4>&-
  wait "$serve"
  # one process answered all of it
  [ "$(jq -s 'length' "$out")" -eq 12 ]
}
