#!/usr/bin/env bats
# dsec-run exec --session (a persistent shell per name), session ls|rm,
# their serve ops, and streamed exec (exec --stream, serve exec "stream"),
# on the container and fncall backends; tests/dsec-vm.bats has the
# microvm's.  Waits poll for a state or a file the test itself makes;
# timeouts are only there so that a broken build fails instead of hanging.

bats_require_minimum_version 1.5.0
load helpers/common
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
  bash_layer_dir >/dev/null
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
}

# every sandbox of the test's store removed, no cgroup or process left
teardown() {
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# bash_layer_dir: a directory holding the host's /bin/bash and the
# libraries ldd names for it, made once per file; its path.
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

# sb_create_bash [CREATE OPTION]...: a busybox sandbox with bash on top.
sb_create_bash() {
  dsec-layer create --dir "$(bash_layer_dir)" --name test/bash@1 >/dev/null &&
    sb_create --layer test/bash@1 "$@"
}

# sess ID NAME [EXEC OPTION]... -- LINE: the result of LINE in session NAME.
sess() {
  local id=$1 name=$2
  shift 2
  dsec-run exec --session "$name" "$id" "$@"
}

# wait_session ID NAME JQ: polls (10 s) session ls until NAME's entry
# satisfies JQ.
wait_session() {
  local i
  for ((i = 0; i < 100; i++)); do
    dsec-run session ls "$1" "$2" 2>/dev/null |
      jq -e ".sessions[0] | $3" >/dev/null && return 0
    sleep 0.1
  done
  echo "session $2 of $1 never satisfied $3: $(dsec-run session ls "$1" 2>&1)" >&2
  return 1
}

# wait_file ID PATH: polls (10 s) until PATH exists in sandbox ID.
wait_file() {
  local i
  for ((i = 0; i < 100; i++)); do
    dsec-run exec "$1" -- test -e "$2" >/dev/null && return 0
    sleep 0.1
  done
  echo "$2 never appeared in $1" >&2
  return 1
}

# A command line that waits for the file $1 (made by a plain exec).
wait_for() {
  echo "while [ ! -e $1 ]; do sleep 0.05; done"
}

# stream_bytes FILE FD: the bytes the output records of FD in FILE (an
# exec --stream's stdout) carry, decoded from data_b64, on stdout.
stream_bytes() {
  jq -r --argjson fd "$2" 'select(.type == "output" and .fd == $fd) | .data_b64' "$1" |
    while IFS= read -r b; do base64 -d <<<"$b"; done
}

# --- sessions: what persists -------------------------------------------------

@test "session: cd, variables, exports and functions persist; results say the session" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s1 -- 'cd /tmp && V=v1 && export E=e1 && f() { echo "f:$1"; }'
  out_jq '.type == "result" and .session == "s1" and .exit_code == 0 and .stdout == ""'
  out_jq 'has("session_lost") | not'
  run -0 --separate-stderr sess "$id" s1 -- 'pwd; echo "$V"; f x; sh -c '\''echo "$E"'\'
  out_jq '.stdout == "/tmp\nv1\nf:x\ne1\n" and .stderr == "" and .session == "s1"'
  # a plain exec is not in the session, and its result has no session
  run -0 --separate-stderr dsec-run exec "$id" -- pwd
  out_jq '.stdout == "/\n" and (has("session") | not)'
}

@test "session: the words after -- are joined with spaces into one command line" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- echo a '&&' echo b '|' tr b c
  out_jq '.stdout == "a\nc\n"'
  # the request holds the one line
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq '.request.cmd == ["echo a && echo b | tr b c"] and .request.session == "s"'
}

@test "session: bash where the image has it, else /bin/sh" {
  local bb bs
  bb=$(sb_create)
  bs=$(sb_create_bash)
  run -0 --separate-stderr sess "$bb" s -- 'echo "[${BASH_VERSION-}]"'
  out_jq '.stdout == "[]\n"'
  run -0 --separate-stderr sess "$bs" s -- 'echo "[${BASH_VERSION-}]"'
  out_jq '.stdout | test("^\\[[0-9]+\\.[0-9]+.*\\]\n$")'
  # bash's aliases are expanded from one command to the next
  run -0 --separate-stderr sess "$bs" s -- "alias hello='echo aliased'"
  run -0 --separate-stderr sess "$bs" s -- 'hello'
  out_jq '.stdout == "aliased\n"'
}

@test "session: a syntax error answers exit 2 and the session goes on (sh and bash)" {
  local id
  for id in "$(sb_create)" "$(sb_create_bash)"; do
    run -0 --separate-stderr sess "$id" s -- 'cd /tmp'
    run -2 --separate-stderr sess "$id" s -- 'if'
    out_jq '.exit_code == 2 and (.stderr | test("syntax|unexpected")) and (has("session_lost") | not)'
    run -0 --separate-stderr sess "$id" s -- 'pwd'
    out_jq '.stdout == "/tmp\n"'
  done
}

# --- sessions: output ----------------------------------------------------------

@test "session: output without a trailing newline is exact, on stdout and stderr" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- 'printf abc; printf "x\ny" >&2'
  out_jq '.stdout == "abc" and .stderr == "x\ny" and .stdout_bytes == 3 and .stderr_bytes == 3'
  run -0 --separate-stderr sess "$id" s -- 'printf ""'
  out_jq '.stdout == "" and .stderr == "" and .stdout_bytes == 0'
  run -0 --separate-stderr sess "$id" s -- 'echo next'
  out_jq '.stdout == "next\n" and .stderr == ""'
}

@test "session: output that looks like the end-of-command marker is output" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- 'printf "\036dsec:fake:0\036x\036dsec:"; printf "\036dsec" >&2'
  out_jq '.stdout == "\u001edsec:fake:0\u001ex\u001edsec:" and .stderr == "\u001edsec"'
  out_jq '.stdout_bytes == 20 and .stderr_bytes == 5 and .exit_code == 0'
  run -0 --separate-stderr sess "$id" s -- 'echo after'
  out_jq '.stdout == "after\n" and .stderr == ""'
}

@test "session: 1 MiB and more of output is capped (default and --max-output); the overflow is counted" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- "head -c 1200000 /dev/zero | tr '\\0' a; echo err >&2"
  out_jq '.stdout_bytes == 1200000 and (.stdout | length) == 1048576 and .truncated == true'
  out_jq '(.stdout | test("^a+$")) and .stderr == "err\n" and .exit_code == 0'
  run -0 --separate-stderr sess "$id" s --max-output 4096 -- "head -c 2000000 /dev/zero | tr '\\0' b"
  out_jq '.stdout_bytes == 2000000 and .stdout == ("b" * 4096) and .truncated == true'
  run -0 --separate-stderr sess "$id" s -- 'echo after'
  out_jq '.stdout == "after\n" and .truncated == false and .stdout_bytes == 6'
}

@test "session: background output after a command ended is not in the next result" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- "($(wait_for /tmp/go); echo LATE; echo LATE-ERR >&2; touch /tmp/done) &"
  out_jq '.stdout == "" and .stderr == "" and .exit_code == 0'
  dsec-run exec "$id" -- touch /tmp/go >/dev/null
  wait_file "$id" /tmp/done
  run -0 --separate-stderr sess "$id" s -- 'echo next; echo err >&2'
  out_jq '.stdout == "next\n" and .stderr == "err\n"'
}

@test "session: a command reads /dev/null, not the commands after it" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s --timeout 20 -- 'cat; echo "cat=$?"; read -r x; echo "read=$?"'
  out_jq '.stdout == "cat=0\nread=1\n" and .timed_out == false'
  run -0 --separate-stderr sess "$id" s -- 'echo second'
  out_jq '.stdout == "second\n"'
}

@test "session: two sessions of one sandbox are independent" {
  local id
  id=$(sb_create)
  sess "$id" one -- 'cd /tmp; V=one; f() { echo f-one; }' >/dev/null
  sess "$id" two -- 'cd /work; V=two' >/dev/null
  run -0 --separate-stderr sess "$id" one -- 'pwd; echo $V; f'
  out_jq '.stdout == "/tmp\none\nf-one\n" and .session == "one"'
  run -127 --separate-stderr sess "$id" two -- 'pwd; echo $V; f'
  out_jq '.stdout == "/work\ntwo\n" and .session == "two"'
  # ending one leaves the other as it was
  run -0 --separate-stderr dsec-run session rm "$id" one
  run -0 --separate-stderr sess "$id" two -- 'pwd; echo $V'
  out_jq '.stdout == "/work\ntwo\n"'
}

# --- sessions: ends, timeouts and refusals ---------------------------------------

@test "session: exit N ends the shell: exit_code N, session_lost; the next command gets a fresh shell" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp; V=kept' >/dev/null
  run -4 --separate-stderr sess "$id" s -- 'echo bye; exit 4'
  out_jq '.exit_code == 4 and .session_lost == true and .session == "s" and .stdout == "bye\n"'
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo "[$V]"'
  out_jq '.stdout == "/\n[]\n" and (has("session_lost") | not)'
}

@test "session: a shell that ends between commands is listed lost; its next command gets error 125, the one after a fresh shell" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s -- "cd /tmp; ($(wait_for /tmp/go); kill -9 \$\$) &"
  dsec-run exec "$id" -- touch /tmp/go >/dev/null
  wait_session "$id" s '.state == "lost"'
  run -0 --separate-stderr dsec-run events "$id"
  jq -e -s 'map(select(.type == "session_lost" and .session == "s"))[0] | .cause | test("ended")' <<<"$output"
  run -125 --separate-stderr sess "$id" s -- pwd
  out_jq '.type == "error" and .exit_code == 125 and .session_lost == true and .session == "s"'
  run -0 --separate-stderr sess "$id" s -- pwd
  out_jq '.type == "result" and .stdout == "/\n" and (has("session_lost") | not)'
}

@test "session: at its timeout a command is interrupted (124, signal 2); the session keeps its state" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp; V=kept' >/dev/null
  run -124 --separate-stderr sess "$id" s --timeout 1 -- 'echo before; sleep 60'
  out_jq '.exit_code == 124 and .timed_out == true and .signal == 2 and .stdout == "before\n"'
  out_jq 'has("session_lost") | not'
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo $V'
  out_jq '.stdout == "/tmp\nkept\n" and .timed_out == false'
  sb_wait_no_proc "$id" sleep
}

@test "session: a command that ignores SIGINT is killed with its shell (signal 9, session_lost)" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp' >/dev/null
  run -124 --separate-stderr sess "$id" s --timeout 1 -- "trap '' INT; sleep 60"
  out_jq '.exit_code == 124 and .timed_out == true and .signal == 9 and .session_lost == true'
  sb_wait_no_proc "$id" sleep
  run -0 --separate-stderr sess "$id" s -- pwd
  out_jq '.stdout == "/\n" and (has("session_lost") | not)'
}

@test "session: --stdin and --exclusive are refused (3)" {
  local id
  id=$(sb_create)
  printf 'data' >"$BATS_TEST_TMPDIR/in"
  run -3 --separate-stderr sess "$id" s --stdin "$BATS_TEST_TMPDIR/in" -- cat
  out_jq '.type == "error" and .exit_code == 3 and (.error | test("stdin"))'
  run -3 --separate-stderr sess "$id" s --exclusive -- true
  out_jq '.type == "error" and .exit_code == 3 and (.error | test("exclusive"))'
  # neither started a session
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions == []'
}

@test "session: --workdir and --env apply to its first command; on an existing session they are refused (3)" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s --workdir /tmp --env A=1 -- 'pwd; echo $A'
  out_jq '.stdout == "/tmp\n1\n"'
  run -3 --separate-stderr sess "$id" s --workdir /work -- pwd
  out_jq '.type == "error" and .exit_code == 3'
  run -3 --separate-stderr sess "$id" s --env A=2 -- 'echo $A'
  out_jq '.type == "error" and .exit_code == 3'
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo $A'
  out_jq '.stdout == "/tmp\n1\n"'
}

@test "session: a bad name is a usage error (2); 64 characters are fine" {
  local id long
  id=$(sb_create)
  long=$(printf 'x%.0s' {1..64})
  for name in 'a b' '' "${long}y" 'a/b' "a'b" 'é'; do
    run -2 --separate-stderr sess "$id" "$name" -- true
    [[ $stderr == *"--session"* ]]
  done
  run -0 --separate-stderr sess "$id" "$long" -- true
  out_jq --arg n "$long" '.session == $n'
  run -0 --separate-stderr sess "$id" "a.B_c-9" -- true
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions | length == 2'
}

# --- session ls and rm -------------------------------------------------------

@test "session ls: name, state, created, commands and queued; NAME picks one; unknown NAME fails (1)" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq --arg id "$id" '.type == "sessions" and .id == $id and .sessions == []'
  sess "$id" a -- true >/dev/null
  sess "$id" a -- true >/dev/null
  sess "$id" b -- true >/dev/null
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions | length == 2'
  out_jq '.sessions | map(select(.name == "a"))[0] | .state == "idle" and .commands == 2 and .queued == 0'
  out_jq '.sessions | map(select(.name == "b"))[0] | .commands == 1'
  out_jq '.sessions | all(.created | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$"))'
  run -0 --separate-stderr dsec-run session ls "$id" b
  out_jq '.sessions | length == 1 and .[0].name == "b"'
  run -1 --separate-stderr dsec-run session ls "$id" c
  [ -z "$output" ]
  [[ $stderr == *"no session c"* ]]
  run -3 --separate-stderr dsec-run session ls "$id" 'a b'
  run -2 --separate-stderr dsec-run session list "$id"
  run -2 --separate-stderr dsec-run session ls
  run -3 --separate-stderr dsec-run session ls no-such-sandbox
}

@test "session: commands of one session run one at a time, in order; the second waits (busy, queued 1)" {
  local id first second
  id=$(sb_create)
  bg sh -c "dsec-run exec --session s --timeout 60 '$id' -- '$(wait_for /tmp/go); echo 1 >>/tmp/order' >'$BATS_TEST_TMPDIR/first'"
  first=$BG
  wait_session "$id" s '.state == "busy" and .queued == 0'
  bg sh -c "dsec-run exec --session s '$id' -- 'echo 2 >>/tmp/order; cat /tmp/order' >'$BATS_TEST_TMPDIR/second'"
  second=$BG
  wait_session "$id" s '.state == "busy" and .queued == 1'
  # the second has not run
  run -1 --separate-stderr dsec-run exec "$id" -- test -e /tmp/order
  dsec-run exec "$id" -- touch /tmp/go >/dev/null
  wait "$first"
  wait "$second"
  jq -e '.exit_code == 0 and .timed_out == false' "$BATS_TEST_TMPDIR/first"
  jq -e '.stdout == "1\n2\n"' "$BATS_TEST_TMPDIR/second"
  wait_session "$id" s '.state == "idle" and .queued == 0 and .commands == 2'
}

@test "session rm NAME: ends its shell, the name starts afresh; unknown NAME fails (1)" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp' >/dev/null
  run -0 --separate-stderr dsec-run session rm "$id" s
  out_jq --arg id "$id" '.type == "session_removed" and .id == $id and .name == "s"'
  sb_wait_no_proc "$id" sh
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions == []'
  run -0 --separate-stderr sess "$id" s -- pwd
  out_jq '.stdout == "/\n"'
  run -1 --separate-stderr dsec-run session rm "$id" nosuch
  [ -z "$output" ]
  run -3 --separate-stderr dsec-run session rm "$id" 'a b'
}

@test "session rm without NAME ends every session, one record each" {
  local id
  id=$(sb_create)
  sess "$id" a -- true >/dev/null
  sess "$id" b -- true >/dev/null
  run -0 --separate-stderr dsec-run session rm "$id"
  [ "$(wc -l <<<"$output")" -eq 2 ]
  jq -e -s 'map(select(.type == "session_removed")) | map(.name) | sort == ["a", "b"]' <<<"$output"
  run -0 --separate-stderr dsec-run session ls "$id"
  out_jq '.sessions == []'
  sb_wait_no_proc "$id" sh
  # none left: nothing to print
  run -0 --separate-stderr dsec-run session rm "$id"
  [ -z "$output" ]
}

@test "session rm of a busy session: the running command answers session_lost, a waiting one error 125" {
  local id first second
  id=$(sb_create)
  bg sh -c "dsec-run exec --session s --timeout 60 '$id' -- 'while :; do sleep 0.05; done' >'$BATS_TEST_TMPDIR/first'"
  first=$BG
  wait_session "$id" s '.state == "busy"'
  bg sh -c "dsec-run exec --session s '$id' -- 'echo ran' >'$BATS_TEST_TMPDIR/second'"
  second=$BG
  wait_session "$id" s '.queued == 1'
  run -0 --separate-stderr dsec-run session rm "$id" s
  wait "$first" || true
  wait "$second" || true
  jq -e '.type == "result" and .session_lost == true and .signal == 9 and .timed_out == false' "$BATS_TEST_TMPDIR/first"
  jq -e '.type == "error" and .exit_code == 125 and .session_lost == true and .session == "s"' "$BATS_TEST_TMPDIR/second"
  sb_wait_no_proc "$id" sleep
}

# --- sessions: seq, suspend, resume, backends --------------------------------------

@test "session: a re-sent seq is replayed from the trajectory, not run; its records carry session" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr sess "$id" s --seq 1 -- 'echo x >>/tmp/count; wc -l </tmp/count'
  out_jq '.seq == 1 and .replayed == false and .stdout == "1\n" and .session == "s"'
  run -0 --separate-stderr sess "$id" s --seq 1 -- 'echo x >>/tmp/count; wc -l </tmp/count'
  out_jq '.seq == 1 and .replayed == true and .stdout == "1\n" and .session == "s"'
  run -0 --separate-stderr dsec-run exec "$id" -- cat /tmp/count
  out_jq '.stdout == "x\n"'
  run -4 --separate-stderr sess "$id" s --seq 1 -- 'echo other'
  out_jq '.type == "error" and .exit_code == 4'
  run -0 --separate-stderr dsec-run trajectory "$id"
  jq -e -s 'map(select(.seq == 1)) | length == 1 and (.[0] | .request.session == "s" and .result.session == "s")' <<<"$output"
}

@test "session: a seq re-sent in another session, or as a plain exec, is a conflict (4)" {
  local id
  id=$(sb_create)
  sess "$id" s --seq 1 -- 'echo x >>/tmp/count' >/dev/null
  run -4 --separate-stderr sess "$id" other --seq 1 -- 'echo x >>/tmp/count'
  out_jq '.type == "error" and .exit_code == 4'
  # as a plain exec the same string is a program name, not a command line
  run -4 --separate-stderr dsec-run exec --seq 1 "$id" -- 'echo x >>/tmp/count'
  out_jq '.type == "error" and .exit_code == 4'
}

@test "session: survives suspend and resume (frozen)" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp; V=kept' >/dev/null
  run -0 --separate-stderr dsec-run suspend "$id"
  out_jq '.released == false'
  run -0 --separate-stderr dsec-run session ls "$id" s
  out_jq '.sessions[0].state == "idle"'
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo $V'
  out_jq '.stdout == "/tmp\nkept\n" and (has("session_lost") | not)'
}

@test "session: after suspend --release and resume it is lost: listed, an event, error 125 once, then a new shell" {
  local id
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp; V=kept' >/dev/null
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run session ls "$id" s
  out_jq '.sessions[0].state == "lost"'
  run -0 --separate-stderr dsec-run events "$id"
  jq -e -s 'map(select(.type == "session_lost" and .session == "s")) | length == 1 and (.[0].cause | test("released"))' <<<"$output"
  run -125 --separate-stderr sess "$id" s -- pwd
  out_jq '.type == "error" and .exit_code == 125 and .session_lost == true and .session == "s"'
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo "[$V]"'
  out_jq '.type == "result" and .stdout == "/\n[]\n" and (has("session_lost") | not)'
  run -0 --separate-stderr dsec-run session ls "$id" s
  out_jq '.sessions[0].state == "idle"'
}

@test "session: fncall keeps the session's shell, and its /tmp, between calls" {
  local id
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr sess "$id" s -- 'cd /tmp; V=kept; echo file >/tmp/f'
  run -0 --separate-stderr sess "$id" s -- 'pwd; echo $V; cat /tmp/f'
  out_jq '.stdout == "/tmp\nkept\nfile\n" and .session == "s"'
  # a plain call still starts clean
  run -1 --separate-stderr dsec-run exec "$id" -- cat /tmp/f
  run -4 --separate-stderr sess "$id" s -- 'exit 4'
  out_jq '.session_lost == true'
  run -0 --separate-stderr sess "$id" s -- 'pwd'
  out_jq '.stdout == "/\n"'
}

# --- sessions through serve ---------------------------------------------------

@test "serve: exec with session, sessions and session_rm; bad requests get error records" {
  local id
  id=$(sb_create --name srv)
  run -0 --separate-stderr dsec-run serve <<<'{"op":"exec","rid":1,"id":"srv","cmd":["cd /tmp; V=kept"],"session":"s"}'
  out_jq '.rid == 1 and .type == "result" and .session == "s" and .exit_code == 0'
  run -0 --separate-stderr dsec-run serve <<<'{"op":"exec","rid":2,"id":"srv","cmd":["pwd; echo $V"],"session":"s"}'
  out_jq '.rid == 2 and .stdout == "/tmp\nkept\n"'
  run -0 --separate-stderr dsec-run serve <<'EOF'
{"op":"sessions","rid":3,"id":"srv"}
{"op":"session_rm","rid":4,"id":"srv","name":"nosuch"}
{"op":"exec","rid":5,"id":"srv","cmd":["pwd","x"],"session":"s"}
{"op":"exec","rid":6,"id":"srv","cmd":["pwd"],"session":"a b"}
{"op":"exec","rid":7,"id":"srv","cmd":["cat"],"session":"s","stdin":"data"}
{"op":"sessions","rid":8,"id":"srv","name":7}
EOF
  [ "$(wc -l <<<"$output")" -eq 6 ]
  jq -e -s --arg id "$id" 'map(select(.rid == 3))[0] | .type == "sessions" and .id == $id and .sessions[0].name == "s" and .sessions[0].commands == 2' <<<"$output"
  jq -e -s 'map(select(.rid == 4))[0] | .type == "error" and .exit_code == 1' <<<"$output"
  jq -e -s 'map(select(.rid == 5 or .rid == 6 or .rid == 7 or .rid == 8)) | length == 4 and all(.type == "error" and .exit_code == 3)' <<<"$output"
  run -0 --separate-stderr dsec-run serve <<<'{"op":"session_rm","rid":9,"id":"srv","name":"s"}'
  out_jq --arg id "$id" '.rid == 9 and .type == "session_removed" and .id == $id and .name == "s"'
  sess "$id" a -- true >/dev/null
  sess "$id" b -- true >/dev/null
  run -0 --separate-stderr dsec-run serve <<<'{"op":"session_rm","rid":10,"id":"srv"}'
  jq -e -s 'length == 2 and all(.rid == 10 and .type == "session_removed") and (map(.name) | sort == ["a", "b"])' <<<"$output"
}

# --- streamed exec -------------------------------------------------------------

@test "exec --stream: an output record comes while the command still runs" {
  local id out=$BATS_TEST_TMPDIR/stream i
  id=$(sb_create)
  bg sh -c "dsec-run exec --stream --timeout 60 '$id' -- sh -c 'echo first; $(wait_for /tmp/go); echo second' >'$out'"
  for ((i = 0; i < 100; i++)); do
    grep -q '"type":"output"' "$out" && break
    sleep 0.1
  done
  # the command waits for /tmp/go: what came is the first line alone
  jq -e -s 'length == 1 and .[0].type == "output" and .[0].fd == 1 and .[0].data == "first\n"' "$out"
  dsec-run exec "$id" -- touch /tmp/go >/dev/null
  wait "$BG"
  jq -e -s '.[-1] | .type == "result" and .exit_code == 0 and .timed_out == false and .stdout == "first\nsecond\n"' "$out"
  jq -e -s 'map(select(.type == "output") | .data) | add == "first\nsecond\n"' "$out"
}

@test "exec --stream: output records per stream, then the result; binary output in data_b64 (container, fncall)" {
  local id backend out=$BATS_TEST_TMPDIR/stream sum
  for backend in container fncall; do
    id=$(sb_create --backend "$backend")
    run -5 --separate-stderr dsec-run exec --stream "$id" -- sh -c 'echo out; echo err >&2; exit 5'
    jq -e -s 'map(.type) | .[-1] == "result" and (.[:-1] | all(. == "output"))' <<<"$output"
    jq -e -s 'map(select(.type == "output" and .fd == 1)) | all(.stream == "stdout") and (map(.data) | add == "out\n")' <<<"$output"
    jq -e -s 'map(select(.type == "output" and .fd == 2)) | all(.stream == "stderr") and (map(.data) | add == "err\n")' <<<"$output"
    jq -e -s '.[-1] | .stdout == "out\n" and .stderr == "err\n" and .exit_code == 5' <<<"$output"
    # every byte value, and what data_b64 carries is what the command
    # wrote (one call: fncall's /tmp is the call's own)
    dsec-run exec --stream "$id" -- sh -c 'i=0; while [ $i -lt 256 ]; do printf "\\$(printf %o $i)"; i=$((i+1)); done >/tmp/bin; head -c 70000 /dev/urandom >>/tmp/bin; sha256sum /tmp/bin >&2; cat /tmp/bin' >"$out"
    sum=$(stream_bytes "$out" 2 | cut -d' ' -f1)
    [ "${#sum}" -eq 64 ]
    [ "$(stream_bytes "$out" 1 | sha256sum | cut -d' ' -f1)" = "$sum" ]
    jq -e -s '.[-1] | .type == "result" and .stdout_bytes == 70256 and .truncated == false' "$out"
  done
}

@test "exec --stream: no more than max_output_bytes streamed per stream; the rest is counted" {
  local id out=$BATS_TEST_TMPDIR/stream
  id=$(sb_create)
  dsec-run exec --stream --max-output 1000 "$id" -- sh -c "head -c 1100000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero | tr '\\0' b >&2" >"$out"
  [ "$(stream_bytes "$out" 1 | wc -c)" -eq 1000 ]
  [ "$(stream_bytes "$out" 2 | wc -c)" -eq 1000 ]
  [ "$(stream_bytes "$out" 1)" = "$(printf 'a%.0s' {1..1000})" ]
  jq -e -s '.[-1] | .stdout_bytes == 1100000 and .stderr_bytes == 5000 and .truncated == true and (.stdout | length) == 1000' "$out"
  # the default cap, 1 MiB
  dsec-run exec --stream "$id" -- head -c 3000000 /dev/urandom >"$out"
  [ "$(stream_bytes "$out" 1 | wc -c)" -eq 1048576 ]
  jq -e -s '.[-1] | .stdout_bytes == 3000000 and .truncated == true' "$out"
}

@test "exec --stream --session: the command line's output records, then the result with session" {
  local id out=$BATS_TEST_TMPDIR/stream
  id=$(sb_create)
  sess "$id" s -- 'cd /tmp' >/dev/null
  dsec-run exec --stream --session s --max-output 100 "$id" -- "pwd; echo err >&2; head -c 5000 /dev/zero | tr '\\0' z" >"$out"
  jq -e -s 'map(.type) | .[-1] == "result" and (.[:-1] | all(. == "output"))' "$out"
  [ "$(stream_bytes "$out" 1)" = "/tmp
$(printf 'z%.0s' {1..95})" ]
  [ "$(stream_bytes "$out" 2)" = err ]
  jq -e -s '.[-1] | .session == "s" and .stdout_bytes == 5005 and .truncated == true' "$out"
  # the marker that ends a command never shows
  run -1 grep -c dsec: "$out"
  run -0 --separate-stderr sess "$id" s -- 'echo next'
  out_jq '.stdout == "next\n"'
}

@test "serve: exec with stream answers output records, then the result, each with its rid" {
  run -0 --separate-stderr dsec-run create --image busybox:1 --name st
  run -0 --separate-stderr dsec-run serve <<'EOF'
{"op":"exec","rid":"a","id":"st","cmd":["sh","-c","echo one; echo two >&2"],"stream":true}
{"op":"exec","rid":"b","id":"st","cmd":["echo","plain"]}
{"op":"exec","rid":"c","id":"st","cmd":["echo in-session"],"session":"s","stream":true}
EOF
  jq -e -s 'map(select(.rid == "a")) | (map(.type) | .[-1] == "result" and (.[:-1] | length >= 2 and all(. == "output")))' <<<"$output"
  jq -e -s 'map(select(.rid == "a" and .type == "output" and .fd == 1) | .data) | add == "one\n"' <<<"$output"
  jq -e -s 'map(select(.rid == "a" and .type == "output" and .fd == 2) | .data) | add == "two\n"' <<<"$output"
  # without stream: the result alone
  jq -e -s 'map(select(.rid == "b")) | length == 1 and .[0].type == "result" and .[0].stdout == "plain\n"' <<<"$output"
  jq -e -s 'map(select(.rid == "c")) | .[-1].session == "s" and (map(select(.type == "output") | .data) | add == "in-session\n")' <<<"$output"
  jq -e -s 'all(has("rid"))' <<<"$output"
}
