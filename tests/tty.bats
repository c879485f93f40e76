#!/usr/bin/env bats
# Terminals (issue #14): dsec-run exec --tty and --tty-size, dsec-run shell
# driven from a pseudo-terminal of the test's own (helpers/ptydrive.py),
# and the exec protocol's "tty" and "interactive" requests from the wire
# (helpers/ttyproto.py), on the container and fncall backends;
# tests/dsec-vm.bats has the microvm's.  Every wait is for output the test
# itself asks for; timeouts are only there so that a broken build fails
# instead of hanging.

bats_require_minimum_version 1.5.0
load helpers/common
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
  command -v python3 >/dev/null || skip "needs python3"
  run_setup
}

# every sandbox of the test's store removed, no cgroup or process left
teardown() {
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# busybox ash's prompt, as root in /
PROMPT='/ # '

# drive [--size CxR] [STEP]... -- CMD...: CMD on a terminal of its own,
# typed at (helpers/ptydrive.py); one JSON line: status, restored, raw,
# output.
drive() {
  python3 "$DSEC_SRCDIR/tests/helpers/ptydrive.py" --timeout 60 "$@"
}

# proto [--pipeline] ID REQUEST [STEP]...: REQUEST on sandbox ID's exec
# socket, then the steps (helpers/ttyproto.py); the records received, one
# per line.
proto() {
  local opt=()
  [ "$1" != --pipeline ] || { opt=(--pipeline); shift; }
  local id=$1 req=$2
  shift 2
  python3 "$DSEC_SRCDIR/tests/helpers/ttyproto.py" --timeout 60 "${opt[@]}" \
    "$DSEC_RUN/$id/ctl.sock" "$req" "$@"
}

# bash_layer_dir: a directory holding the host's /bin/bash and the
# libraries ldd names for it, made once per file; its path.  (As in
# tests/sessions.bats.)
bash_layer_dir() {
  local d="$BATS_FILE_TMPDIR/bash-layer" f
  if [ ! -d "$d" ]; then
    mkdir -p "$d.tmp/bin"
    cp /bin/bash "$d.tmp/bin/bash"
    for f in $(ldd /bin/bash | grep -o '/[^ ]*'); do
      mkdir -p "$d.tmp$(dirname "$f")"
      cp -L "$f" "$d.tmp$f"
    done
    mv "$d.tmp" "$d"
  fi
  echo "$d"
}

# traj_count ID: how many records the sandbox's trajectory has.
traj_count() {
  dsec-run trajectory "$1" | wc -l
}

# wait_traj ID N: polls (30 s) until the trajectory has N records.
wait_traj() {
  local i
  for ((i = 0; i < 300; i++)); do
    [ "$(traj_count "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  echo "trajectory of $1 has $(traj_count "$1") records, not $2" >&2
  return 1
}

# --- exec --tty ---------------------------------------------------------------

@test "exec --tty: the command's stdin, stdout and stderr are a terminal of the sandbox; output has its \\r\\n, stderr comes with it" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty "$id" -- \
    sh -c 'tty; stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-tty; echo err >&2'
  out_jq '.stdout | test("^/dev/pts/[0-9]+\r\n24 80\r\nall-tty\r\nerr\r\n$")'
  out_jq '.stderr == "" and .stderr_bytes == 0 and .stdout_bytes == (.stdout | length)'
  out_jq '.exit_code == 0 and .signal == null and .truncated == false'
  [ -z "$stderr" ]
  # without it, no terminal: the contrast
  run -1 --separate-stderr dsec-run exec "$id" -- tty
  out_jq '.stdout == "not a tty\n"'
  # the command's status passes through
  run -5 --separate-stderr dsec-run exec --tty "$id" -- sh -c 'exit 5'
  out_jq '.exit_code == 5'
  run -143 --separate-stderr dsec-run exec --tty "$id" -- sh -c 'kill -TERM $$'
  out_jq '.exit_code == 143 and .signal == 15'
}

@test "exec --tty: it is the command's controlling terminal (/dev/tty), on the sandbox's own devpts" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty "$id" -- \
    sh -c 'echo via-dev-tty >/dev/tty; ls -1 /dev/pts'
  # a fresh devpts: its one terminal and ptmx, none of the host's
  out_jq '.stdout == "via-dev-tty\r\n0\r\nptmx\r\n"'
  run -1 --separate-stderr dsec-run exec "$id" -- sh -c 'echo x >/dev/tty'
  out_jq '.stderr | test("No such device or address")'
}

@test "exec --tty on a --user 1000:1000 sandbox: the terminal is owned by the command's user" {
  local id
  id=$(sb_create --user 1000:1000)
  run -0 --separate-stderr dsec-run exec --tty "$id" -- sh -c 'stat -c %u $(tty); id -u'
  out_jq '.stdout == "1000\r\n1000\r\n"'
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty "$id" -- sh -c 'stat -c %u $(tty)'
  out_jq '.stdout == "0\r\n"'
}

@test "exec --tty: all the command's output is there, and a process it leaves behind on the terminal does not hold the exec" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty "$id" -- \
    sh -c 'trap "" HUP; sleep 600 & i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done; id -u'
  out_jq '.stdout | split("\r\n") | length == 302 and .[0] == "line0" and .[299] == "line299" and .[300] == "0" and .[301] == ""'
  # the sleep still runs, on the terminal the exec had
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'ps -o comm | grep -c "^sleep"'
  out_jq '.stdout == "1\n"'
}

@test "exec --tty: the supervisor holds the terminal's other end while the command runs, and lets it go after" {
  local id sup i
  id=$(sb_create)
  sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
  # (held: so the master never says "no one is there" before it gave the
  # command's last output)
  bg dsec-run exec --tty "$id" -- sh -c 'touch /tmp/up; exec sleep 600'
  for ((i = 0; i < 600; i++)); do
    dsec-run exec "$id" -- test -e /tmp/up | jq -e '.exit_code == 0' >/dev/null && break
    sleep 0.1
  done
  ls -l "/proc/$sup/fd" | grep -qE 'pts/[0-9]+$'
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'kill $(pidof sleep)'
  wait "$BG" || true
  ! ls -l "/proc/$sup/fd" | grep -E 'pts/'
}

@test "exec --tty-size: stty size gives it, it implies --tty; trajectory records tty and tty_size, events say tty" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty-size 100x30 "$id" -- stty size
  out_jq '.stdout == "30 100\r\n"'
  run -0 --separate-stderr dsec-run exec --tty-size 2x3 "$id" -- stty size
  out_jq '.stdout == "3 2\r\n"'
  # (busybox's stty reports a side of 1 as unknown, 24 or 80: the record
  # says what the terminal was given)
  run -0 --separate-stderr dsec-run exec --tty-size 1x1 "$id" -- true
  run -0 --separate-stderr dsec-run exec --tty-size=10000x10000 "$id" -- stty size
  out_jq '.stdout == "10000 10000\r\n"'
  run -0 --separate-stderr dsec-run exec --tty "$id" -- stty size
  out_jq '.stdout == "24 80\r\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- true
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s 'length == 6 and (map(.request.tty_size) == [[100, 30], [2, 3], [1, 1], [10000, 10000], [80, 24], null])'
  out_jq -s 'map(.request.tty) == [true, true, true, true, true, null]'
  out_jq -s '.[4].result.stdout == "24 80\r\n"'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "exec") | .tty] == [true, true, true, true, true, null]'
}

@test "exec --tty-size: a size out of 1..10000, or not COLSxROWS, is a usage error (2) and runs nothing" {
  local id s
  id=$(sb_create)
  for s in 0x5 5x0 10001x5 5x10001 abc 80x x24 80x24x 80X24 80x24z '' 1.5x2; do
    run -2 --separate-stderr dsec-run exec --tty-size "$s" "$id" -- true
    [ -z "$output" ]
    [[ $stderr == *--tty-size* ]]
  done
  [ "$(traj_count "$id")" -eq 0 ]
}

@test "exec --tty-size: a negative number is no size (2)" {
  local id
  id=$(sb_create)
  run -2 --separate-stderr dsec-run exec --tty-size=-4294967216x24 "$id" -- stty size
  run -2 --separate-stderr dsec-run exec --tty-size=80x-4294967272 "$id" -- stty size
  [ "$(traj_count "$id")" -eq 0 ]
}

@test "exec --tty --stdin: the input is typed, then ^D: cat echoes it and ends; a last line without a newline too" {
  local id
  id=$(sb_create)
  printf 'hello\n' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-run exec --tty --stdin "$BATS_TEST_TMPDIR/in" "$id" -- cat
  # the terminal's echo, then cat's copy
  out_jq '.stdout == "hello\r\nhello\r\n" and .exit_code == 0'
  printf 'partial' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-run exec --tty --stdin "$BATS_TEST_TMPDIR/in" "$id" -- cat
  out_jq '.stdout == "partialpartial"'
  # what a command reads: the line as typed, not the ^D (od prints at the
  # end of its input, after the echo)
  printf 'abc\n' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-run exec --tty --stdin "$BATS_TEST_TMPDIR/in" "$id" -- od -An -c
  out_jq '.stdout | test("^abc\r\n +a +b +c +\\\\n *\r\n$")'
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s '.[0].request.stdin == "hello\n" and .[1].request.stdin == "partial"'
}

@test "exec --tty: not with --session or --exclusive (3), nothing runs" {
  local id
  id=$(sb_create)
  run -3 --separate-stderr dsec-run exec --tty --session s "$id" -- true
  out_jq '.type == "error" and .exit_code == 3'
  run -3 --separate-stderr dsec-run exec --tty-size 90x20 --session s "$id" -- true
  out_jq '.type == "error" and .exit_code == 3'
  run -3 --separate-stderr dsec-run exec --tty --exclusive "$id" -- true
  out_jq '.type == "error" and .exit_code == 3'
  [ "$(traj_count "$id")" -eq 0 ]
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions == []'
}

@test "exec --tty --stream: output records (fd 1) as it comes, then the result holding all of it" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --tty --stream "$id" -- sh -c 'echo one; echo two >&2'
  out_jq -s '.[-1].type == "result" and .[-1].stdout == "one\r\ntwo\r\n" and .[-1].stderr == ""'
  out_jq -s '.[:-1] | length > 0 and all(.type == "output" and .fd == 1)'
  out_jq -s '[.[:-1][] | .data_b64 | @base64d] | add == "one\r\ntwo\r\n"'
}

@test "exec --tty: a timeout (124) and the output cap hold as for any exec; a recorded seq is replayed, not re-run" {
  local id
  id=$(sb_create)
  run -124 --separate-stderr dsec-run exec --tty --timeout 1 "$id" -- sleep 600
  out_jq '.timed_out == true and .exit_code == 124'
  run -0 --separate-stderr dsec-run exec --tty --max-output 100 "$id" -- \
    sh -c "head -c 5000 /dev/zero | tr '\\0' z"
  out_jq '(.stdout | length) == 100 and .stdout_bytes == 5000 and .truncated == true'
  run -0 --separate-stderr dsec-run exec --seq 1 --tty-size 100x30 "$id" -- \
    sh -c 'echo ran >>/tmp/count; stty size'
  out_jq '.stdout == "30 100\r\n" and .replayed == false'
  run -0 --separate-stderr dsec-run exec --seq 1 --tty-size 100x30 "$id" -- \
    sh -c 'echo ran >>/tmp/count; stty size'
  out_jq '.stdout == "30 100\r\n" and .replayed == true'
  run -0 --separate-stderr dsec-run exec "$id" -- cat /tmp/count
  out_jq '.stdout == "ran\n"'
}

@test "fncall: exec --tty runs on a terminal too (tty, size, typed input)" {
  local id
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr dsec-run exec --tty-size 100x30 "$id" -- sh -c 'tty; stty size; echo err >&2'
  out_jq '.stdout | test("^/dev/pts/[0-9]+\r\n30 100\r\nerr\r\n$")'
  out_jq '.stderr == ""'
  printf 'hey\n' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-run exec --tty --stdin "$BATS_TEST_TMPDIR/in" "$id" -- cat
  out_jq '.stdout == "hey\r\nhey\r\n"'
}

# --- dsec-run shell -------------------------------------------------------------

@test "ptydrive: the checks below can fail (a status, a terminal left raw)" {
  run -0 --separate-stderr drive -- sh -c 'stty raw -echo; exit 4'
  out_jq '.status == 4 and .restored == false'
  run -0 --separate-stderr drive --expect 'ready' -- sh -c 'echo ready'
  out_jq '.status == 0 and .restored == true'
  run -1 --separate-stderr drive --timeout 1 --expect 'never' -- sh -c 'echo other'
}

@test "shell: a person's shell: lines typed run, the window's size, raw mode while it runs, exit's status, our terminal given back" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr env TERM=vt100 \
    python3 "$DSEC_SRCDIR/tests/helpers/ptydrive.py" --timeout 60 --size 91x33 \
    --expect "$PROMPT" --modes \
    --send 'echo $((6*7))\n' --expect '\r\n42\r\n' --expect "$PROMPT" \
    --send 'stty size\n' --expect '\r\n33 91\r\n' --expect "$PROMPT" \
    --send 'echo $TERM; tty\n' --expect '\r\nvt100\r\n/dev/pts/[0-9]+\r\n' --expect "$PROMPT" \
    --send 'exit 3\n' -- dsec-run shell "$id"
  out_jq '.status == 3 and .restored == true and .raw == [true]'
  # no bash in the image: its sh
  out_jq '.output | test("built-in shell \\(ash\\)")'
  # no JSON: only what the terminal showed
  out_jq '.output | test("\\{\"type\"") | not'
  # recorded like any exec, with tty and interactive
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s 'length == 1 and .[0].request.tty == true and .[0].request.interactive == true'
  out_jq -s '.[0].request.tty_size == [91, 33] and .[0].request.env.TERM == "vt100"'
  out_jq -s '.[0].result.exit_code == 3 and (.[0].result.stdout | test("\r\n42\r\n"))'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "exec")] | length == 1 and .[0].tty == true'
}

@test "shell: bash where the image has it, as a login shell" {
  local id
  dsec-layer create --dir "$(bash_layer_dir)" --name test/bash@1 >/dev/null
  id=$(sb_create --layer test/bash@1)
  run -0 --separate-stderr drive --expect 'bash-[0-9.]+# ' \
    --send '[ -n "$BASH_VERSION" ] && shopt -q login_shell && echo login-bash\n' \
    --expect '\r\nlogin-bash\r\n' --expect 'bash-[0-9.]+# ' --send 'exit 3\n' -- \
    dsec-run shell "$id"
  out_jq '.status == 3 and .restored == true'
}

@test "shell -- CMD: the command's status (7, 143 for SIGTERM, 127), standard input need not be a terminal, nothing on stdout but the terminal's output" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr drive --size 100x30 -- dsec-run shell "$id" -- sh -c 'stty size; exit 7'
  out_jq '.status == 7 and .restored == true and .output == "30 100\r\n"'
  run -7 --separate-stderr dsec-run shell "$id" -- sh -c 'exit 7' </dev/null
  [ -z "$output" ]
  run -143 --separate-stderr dsec-run shell "$id" -- sh -c 'kill -TERM $$' </dev/null
  run -127 --separate-stderr dsec-run shell "$id" -- nosuchcmd </dev/null
  [[ $output == *nosuchcmd* ]]
  # not on a terminal: its size is the default, TERM ours unless --env says
  run -0 --separate-stderr env TERM=vt100 dsec-run shell "$id" -- \
    sh -c 'stty size; echo $TERM; pwd; echo $FOO' </dev/null
  [ "$output" = $'24 80\r\nvt100\r\n/\r\n\r' ]
  run -0 --separate-stderr env TERM=vt100 dsec-run shell --env TERM=dumb \
    --env FOO=bar --workdir /tmp "$id" -- sh -c 'echo $TERM; pwd; echo $FOO' </dev/null
  [ "$output" = $'dumb\r\n/tmp\r\nbar\r' ]
}

@test "shell: its usage: no ID or an exec-only option (2), a sandbox that is not there (3)" {
  local id
  id=$(sb_create)
  run -2 --separate-stderr dsec-run shell </dev/null
  run -2 --separate-stderr dsec-run shell "$id" "$id" </dev/null
  run -2 --separate-stderr dsec-run shell --tty "$id" -- true </dev/null
  run -3 --separate-stderr dsec-run shell sb-0000000000000000 </dev/null
  [[ $stderr == *sb-0000000000000000* ]]
  [ "$(traj_count "$id")" -eq 0 ]
}

@test "shell: a resize of our window resizes the sandbox's terminal (its foreground gets SIGWINCH)" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr drive --size 91x33 --expect 'READY\r\n' \
    --resize 120x40 --expect '40 120\r\n' -- \
    dsec-run shell "$id" -- sh -c 'trap "stty size; exit 0" WINCH; stty size; echo READY; while :; do sleep 1; done'
  out_jq '.status == 0 and .restored == true'
  out_jq '.output == "33 91\r\nREADY\r\n40 120\r\n"'
  # and an interactive shell goes on after it
  run -0 --separate-stderr drive --size 91x33 --expect "$PROMPT" --resize 100x30 \
    --send 'echo $((6*7))\n' --expect '\r\n42\r\n' --expect "$PROMPT" \
    --send 'exit 4\n' -- dsec-run shell "$id"
  out_jq '.status == 4 and .restored == true'
}

@test "shell: what comes on standard input before the sandbox's terminal is ready is typed all the same" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr bash -c 'printf "hi\n" | timeout 60 dsec-run shell "$1" -- cat' _ "$id"
  [ "$output" = $'hi\r\nhi\r' ]
}

# --- the protocol ---------------------------------------------------------------

@test "protocol: an interactive exec on a terminal: input typed and echoed, ^D ends it; output records (fd 1) before the result" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr proto "$id" \
    '{"op":"exec","cmd":["sh","-c","echo READY; exec cat"],"tty":true,"interactive":true}' \
    --expect 'READY\r\n' --input 'hello\n' --expect 'hello\r\nhello\r\n' --eof
  out_jq -s '.[-1].type == "result" and .[-1].exit_code == 0'
  out_jq -s '.[:-1] | length > 0 and all(.type == "output" and .fd == 1)'
  out_jq -s '[.[:-1][] | .data_b64 | @base64d] | add == "READY\r\nhello\r\nhello\r\n"'
  out_jq -s '.[-1].stdout == "READY\r\nhello\r\nhello\r\n" and .[-1].stderr == ""'
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq '.request.tty == true and .request.interactive == true and .result.exit_code == 0'
}

@test "protocol: resize sets the terminal's size (stty size in sh) and its foreground gets SIGWINCH" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr proto "$id" '{"op":"exec","cmd":["sh"],"tty":true,"interactive":true}' \
    --expect "$PROMPT" --resize 100x30 --input 'stty size\n' --expect '\r\n30 100\r\n' \
    --expect "$PROMPT" --eof
  out_jq -s '.[-1].type == "result" and .[-1].exit_code == 0'
  out_jq -s '.[-1].stdout | test("\r\n30 100\r\n")'
  run -0 --separate-stderr proto "$id" \
    '{"op":"exec","cmd":["sh","-c","trap \"stty size; exit 0\" WINCH; stty size; echo READY; while :; do sleep 1; done"],"tty":true,"tty_size":[91,33],"interactive":true}' \
    --expect 'READY\r\n' --resize 120x40 --expect '40 120\r\n'
  out_jq -s '.[-1].exit_code == 0 and .[-1].stdout == "33 91\r\nREADY\r\n40 120\r\n"'
  # a size out of 1..10000 is ignored, not applied
  run -0 --separate-stderr proto "$id" '{"op":"exec","cmd":["sh"],"tty":true,"interactive":true}' \
    --expect "$PROMPT" --resize 0x30 --resize 100x10001 --input 'stty size\n' --expect '\r\n24 80\r\n' \
    --expect "$PROMPT" --eof
  out_jq -s '.[-1].exit_code == 0'
}

@test "protocol: a signal line reaches the command's process group" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr proto "$id" \
    '{"op":"exec","cmd":["sh","-c","echo READY; sleep 600; echo not-reached"],"tty":true,"interactive":true}' \
    --expect 'READY\r\n' --signal 15
  out_jq -s '.[-1].type == "result" and .[-1].exit_code == 143 and .[-1].signal == 15'
  out_jq -s '.[-1].stdout == "READY\r\n"'
  sb_wait_no_proc "$id" sleep
}

@test "protocol: input sent with the request, before the terminal is ready, is typed all the same" {
  local id c f
  c=$(sb_create)
  f=$(sb_create --backend fncall)
  for id in "$c" "$f"; do
    run -0 --separate-stderr proto --pipeline "$id" \
      '{"op":"exec","cmd":["cat"],"tty":true,"interactive":true}' --input 'hello\n' --eof
    out_jq -s '.[-1].type == "result" and .[-1].exit_code == 0 and .[-1].stdout == "hello\r\nhello\r\n"'
  done
}

@test "protocol: a client that closes its side ends the terminal's input; the command's result is recorded all the same" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr proto "$id" \
    '{"op":"exec","cmd":["sh","-c","echo READY; cat; echo END"],"tty":true,"interactive":true}' \
    --expect 'READY\r\n' --close
  wait_traj "$id" 1
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq '.result.stdout | startswith("READY\r\n")'
}
