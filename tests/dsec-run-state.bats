#!/usr/bin/env bats
# dsec-run's rollout state, end to end with busybox: trajectory replay by
# seq, checkpoint, suspend (frozen, or --release), resume, fork, and their
# events.  Every test gets its own store with busybox:1 in it; teardown
# removes every sandbox of that store (forks and released ones included)
# and checks that no cgroup and no process of them is left (the cgroup
# tree is shared with other users).

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
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
  # helpers/common puts $DSEC_BUILDDIR first again each time it is loaded
  # (once per test): use the copies run_file_setup made, so that a rebuild
  # while this file runs does not pull the programs from under it
  PATH="$BATS_FILE_TMPDIR/bin:$PATH"
  run_setup
}

teardown() {
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# sb_file ID PATH: where PATH of the sandbox's writable layer is on the host
# (a sandbox that was neither resumed nor given a disk limit).
sb_file() {
  echo "$DSEC_ROOT/sandboxes/$1/upper/${2#/}"
}

# size_of FILE: its size in bytes, 0 when it does not exist.
size_of() {
  stat -c %s "$1" 2>/dev/null || echo 0
}

# in_sb ID CMD: stdout of `sh -c CMD` in the sandbox (a failing exec fails).
in_sb() {
  local res
  res=$(dsec-run exec "$1" -- sh -c "$2") || {
    echo "exec in $1 failed: $res" >&2
    return 1
  }
  jq -j '.stdout' <<<"$res"
}

# start_counter ID: a background process in ID that appends a line to
# /tmp/t every 0.1 s; returns once the file has grown.
start_counter() {
  dsec-run exec "$1" -- sh -c \
    "sh -c 'while :; do echo x >> /tmp/t; sleep 0.1; done' </dev/null >/dev/null 2>&1 &" \
    >/dev/null
  wait_file_grows "$(sb_file "$1" /tmp/t)" 0
}

# wait_file_grows FILE SIZE: polls (10 s) until FILE is bigger than SIZE.
wait_file_grows() {
  local i
  for ((i = 0; i < 100; i++)); do
    [ "$(size_of "$1")" -gt "$2" ] && return 0
    sleep 0.1
  done
  echo "$1 did not grow past $2 bytes in 10 s" >&2
  return 1
}

# in_sb_grows ID: /tmp/t in ID grows within 10 s (read through exec: a
# resumed sandbox's file lives in its checkpoint, not in upper/).
in_sb_grows() {
  local a b i
  a=$(in_sb "$1" 'wc -c < /tmp/t') || return
  for ((i = 0; i < 50; i++)); do
    sleep 0.2
    b=$(in_sb "$1" 'wc -c < /tmp/t') || return
    [ "$b" -gt "$a" ] && return 0
  done
  echo "/tmp/t in $1 stayed at $a bytes" >&2
  return 1
}

# The non-idempotent commands of the replay tests: a counter, the clock, a
# random number, and the removal of a file that exists once.
COUNTER='n=$(cat /root/counter 2>/dev/null || echo 0); n=$((n + 1)); echo $n > /root/counter; echo $n'
RANDOM_CMD='head -c 16 /dev/urandom | od -An -tx1 | tr -d " \n"'

# requests_file FILE FIRST LAST: the trainer's requests FIRST..LAST (seq)
# of the replay scenario, as JSON Lines.
requests_file() {
  local out=$1 first=$2 last=$3 s cmd
  : >"$out"
  for ((s = first; s <= last; s++)); do
    case $s in
      1) cmd=$COUNTER ;;
      2) cmd='date +%s' ;;
      3) cmd=$RANDOM_CMD ;;
      4) cmd='rm /root/once && echo removed' ;;
      5) cmd='echo failing >&2; exit 3' ;;
      *) cmd="echo step $s" ;;
    esac
    jq -cn --arg c "$cmd" --argjson s "$s" '{cmd: ["sh", "-c", $c], seq: $s}' >>"$out"
  done
}

# --- the command-line contract ----------------------------------------------

@test "--help names checkpoint, suspend, resume, fork and trajectory" {
  run -0 --separate-stderr dsec-run --help
  for verb in checkpoint suspend resume fork trajectory; do
    [[ "$output" == *"  $verb "* ]]
  done
  [[ "$output" == *"--release"* ]]
  [[ "$output" == *"--count"* ]]
  [ -z "$stderr" ]
}

@test "state verbs without an ID, with two, or with another verb's option are usage errors (2)" {
  local args
  for args in checkpoint suspend resume fork trajectory "checkpoint a b" \
    "fork a b" "resume a b" "checkpoint --release x" "suspend --count 2 x" \
    "resume --release x" "fork --release x" "trajectory --count 2 x" \
    "fork --count 0 x" "fork --count 1025 x" "fork --count two x"; do
    # shellcheck disable=SC2086
    run -2 --separate-stderr dsec-run $args
    [ -z "$output" ]
    [ -n "$stderr" ]
  done
  [ ! -e "$DSEC_ROOT/sandboxes" ]
}

@test "state verbs on an ID that matches no sandbox are bad input (3)" {
  local verb
  for verb in checkpoint suspend resume fork trajectory; do
    run -3 --separate-stderr dsec-run "$verb" sb-0123456789abcdef
    [ -z "$output" ]
    stderr_has "sb-0123456789abcdef"
  done
}

@test "resume of a running sandbox fails (1) and leaves it running" {
  local id
  id=$(sb_create)
  run -1 --separate-stderr dsec-run resume "$id"
  [ -z "$output" ]
  stderr_has "not suspended"
  [ "$(sb_state "$id")" = running ]
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

# --- replay -------------------------------------------------------------------

@test "replay: a restarted trainer re-sending its first K commands gets identical results, nothing runs twice" {
  local id s first=() again
  id=$(sb_create)
  # a file that exists once, made by a request without seq
  run -0 --separate-stderr dsec-run exec "$id" -- touch /root/once
  out_jq '.seq == null and .replayed == false'

  # the trainer's first run: seq 1..5
  requests_file "$BATS_TEST_TMPDIR/first.jsonl" 1 5
  run -3 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/first.jsonl"
  [ "${#lines[@]}" -eq 5 ]
  first=("${lines[@]}")
  jq -e '.seq == 1 and .stdout == "1\n" and .replayed == false' <<<"${first[0]}"
  jq -e '.seq == 2 and (.stdout | test("^[0-9]+\n$"))' <<<"${first[1]}"
  jq -e '.seq == 3 and (.stdout | test("^[0-9a-f]{32}$"))' <<<"${first[2]}"
  jq -e '.seq == 4 and .exit_code == 0 and .stdout == "removed\n"' <<<"${first[3]}"
  jq -e '.seq == 5 and .exit_code == 3 and .stderr == "failing\n"' <<<"${first[4]}"
  [ ! -e "$(sb_file "$id" /root/once)" ]
  [ "$(cat "$(sb_file "$id" /root/counter)")" = 1 ]

  # a request without seq in between runs as usual (and every time)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c "$COUNTER"
  out_jq '.seq == null and .replayed == false and .stdout == "2\n"'

  # the clock moves on: `date +%s` run now would answer something else
  # (the sandbox's clock is the host's)
  local then i
  then=$(jq -r '.stdout' <<<"${first[1]}")
  for ((i = 0; i < 50; i++)); do
    [ "$(date +%s)" -gt "$then" ] && break
    sleep 0.1
  done
  [ "$(date +%s)" -gt "$then" ] || { echo "the clock is still at $then" >&2; false; }
  run -0 --separate-stderr dsec-run exec "$id" -- date +%s
  jq -e --argjson f "${first[1]}" '.stdout != $f.stdout' <<<"$output"

  # the trainer restarts and re-sends seq 1..4, one exec each, then 5
  for s in 1 2 3 4; do
    again=$(jq -c --argjson s "$s" 'select(.seq == $s)' "$BATS_TEST_TMPDIR/first.jsonl")
    run -0 --separate-stderr dsec-run exec --seq "$s" "$id" -- sh -c "$(jq -r '.cmd[2]' <<<"$again")"
    out_jq --argjson f "${first[s - 1]}" '.replayed == true and .id == $f.id
      and del(.replayed) == ($f | del(.replayed))'
  done
  run -3 --separate-stderr dsec-run exec --seq 5 "$id" -- sh -c 'echo failing >&2; exit 3'
  out_jq --argjson f "${first[4]}" '.replayed == true and .exit_code == 3
    and del(.replayed) == ($f | del(.replayed))'

  # nothing ran again: the counter is where the no-seq request left it,
  # and the removal of a file that is gone "succeeded" from the record
  [ "$(cat "$(sb_file "$id" /root/counter)")" = 2 ]
  run -0 --separate-stderr dsec-run exec "$id" -- cat /root/counter
  out_jq '.stdout == "2\n"'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "exec" and .seq != null) | .seq] == [1, 2, 3, 4, 5]'
  out_jq -s '[.[] | select(.type == "replay") | .seq] == [1, 2, 3, 4, 5]'

  # each seq is in the trajectory once; the no-seq requests with seq null
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s '[.[] | select(.type == "exec") | .seq] == [null, 1, 2, 3, 4, 5, null, null, null]'

  # the trainer goes on past what was recorded: seq 6 runs
  run -0 --separate-stderr dsec-run exec --seq 6 "$id" -- sh -c "$COUNTER"
  out_jq '.seq == 6 and .replayed == false and .stdout == "3\n"'
}

@test "replay: a different cmd, stdin, env or workdir at a recorded seq is refused (4) naming the seq; nothing runs" {
  local id orig
  id=$(sb_create)
  printf 'input\n' >"$BATS_TEST_TMPDIR/in"
  printf 'other\n' >"$BATS_TEST_TMPDIR/in2"
  run -0 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in" \
    --env K=1 --workdir /tmp "$id" -- sh -c 'cat >> /root/log; pwd'
  orig=$output
  out_jq '.seq == 7 and .stdout == "/tmp\n" and .replayed == false'

  run -4 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in" \
    --env K=1 --workdir /tmp "$id" -- sh -c 'cat >> /root/log; pwd; echo changed'
  out_jq '.type == "error" and .seq == 7 and .exit_code == 4
    and (.error | test("seq 7")) and (.error | test("cmd"))'
  run -4 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in2" \
    --env K=1 --workdir /tmp "$id" -- sh -c 'cat >> /root/log; pwd'
  out_jq '.type == "error" and .seq == 7 and (.error | test("seq 7")) and (.error | test("stdin"))'
  run -4 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in" \
    --env K=2 --workdir /tmp "$id" -- sh -c 'cat >> /root/log; pwd'
  out_jq '.type == "error" and .seq == 7 and (.error | test("seq 7")) and (.error | test("env"))'
  run -4 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in" \
    --env K=1 --workdir /root "$id" -- sh -c 'cat >> /root/log; pwd'
  out_jq '.type == "error" and .seq == 7 and (.error | test("seq 7")) and (.error | test("workdir"))'

  # none of them ran, and none was recorded
  [ "$(cat "$(sb_file "$id" /root/log)")" = input ]
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s '[.[] | select(.type == "exec")] | length == 1'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "replay_conflict") | [.seq, .field]]
    == [[7, "cmd"], [7, "stdin"], [7, "env"], [7, "workdir"]]'

  # the same request still replays
  run -0 --separate-stderr dsec-run exec --seq 7 --stdin "$BATS_TEST_TMPDIR/in" \
    --env K=1 --workdir /tmp "$id" -- sh -c 'cat >> /root/log; pwd'
  out_jq --argjson f "$orig" '.replayed == true and del(.replayed) == ($f | del(.replayed))'
  [ "$(cat "$(sb_file "$id" /root/log)")" = input ]
}

@test "replay: a seq past the next one is refused (4); a seq that is running is refused (4)" {
  local id i
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo 1 >> /root/log'
  run -4 --separate-stderr dsec-run exec --seq 3 "$id" -- sh -c 'echo 3 >> /root/log'
  out_jq '.type == "error" and .seq == 3 and .exit_code == 4 and (.error | test("seq 3"))'
  [ "$(cat "$(sb_file "$id" /root/log)")" = 1 ]

  # seq 2 runs for a while; sending it again meanwhile is refused
  bg dsec-run exec --seq 2 "$id" -- sh -c 'echo 2 >> /root/log; sleep 3'
  for ((i = 0; i < 50; i++)); do
    [ "$(dsec-run inspect "$id" | jq '.execs_running')" = 1 ] && break
    sleep 0.1
  done
  [ "$(dsec-run inspect "$id" | jq '.execs_running')" = 1 ] ||
    { echo "seq 2 did not start" >&2; false; }
  run -4 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'echo 2 >> /root/log; sleep 3'
  out_jq '.type == "error" and .seq == 2 and (.error | test("seq 2"))'
  wait "$BG"
  [ "$(cat "$(sb_file "$id" /root/log)")" = "$(printf '1\n2')" ]
  # now 3 is the next one
  run -0 --separate-stderr dsec-run exec --seq 3 "$id" -- sh -c 'echo 3 >> /root/log'
  out_jq '.seq == 3 and .replayed == false'
}

@test "exec --requests with seq'd lines replays what is recorded and runs the rest" {
  local id
  id=$(sb_create)
  requests_file "$BATS_TEST_TMPDIR/a.jsonl" 1 3
  run -0 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/a.jsonl"
  [ "${#lines[@]}" -eq 3 ]
  local r1=${lines[0]} r3=${lines[2]}
  # a restarted trainer streams 1..3 again and goes on with 6..7 (4 and 5
  # would be the rm and the failure: a plain step each here)
  requests_file "$BATS_TEST_TMPDIR/b.jsonl" 1 3
  printf '%s\n' '{"cmd":["sh","-c","echo step 4"],"seq":4}' \
    '{"cmd":["sh","-c","echo no seq"]}' '{"cmd":["sh","-c","echo step 5"],"seq":5}' \
    >>"$BATS_TEST_TMPDIR/b.jsonl"
  run -0 --separate-stderr dsec-run exec "$id" --requests - <"$BATS_TEST_TMPDIR/b.jsonl"
  [ "${#lines[@]}" -eq 6 ]
  jq -e --argjson f "$r1" '.replayed == true and del(.replayed) == ($f | del(.replayed))' <<<"${lines[0]}"
  jq -e '.seq == 2 and .replayed == true' <<<"${lines[1]}"
  jq -e --argjson f "$r3" '.replayed == true and .stdout == $f.stdout' <<<"${lines[2]}"
  jq -e '.seq == 4 and .replayed == false and .stdout == "step 4\n"' <<<"${lines[3]}"
  jq -e '.seq == null and .replayed == false and .stdout == "no seq\n"' <<<"${lines[4]}"
  jq -e '.seq == 5 and .replayed == false' <<<"${lines[5]}"
  [ "$(cat "$(sb_file "$id" /root/counter)")" = 1 ]

  # a conflicting line gets an error record naming its seq; the next line
  # is still read; the exit status is the last answer's
  printf '%s\n' '{"cmd":["sh","-c","echo not step 2"],"seq":2}' \
    '{"cmd":["sh","-c","echo step 6"],"seq":6}' '{"cmd":["true"],"seq":9}' \
    >"$BATS_TEST_TMPDIR/c.jsonl"
  run -4 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/c.jsonl"
  [ "${#lines[@]}" -eq 3 ]
  jq -e '.type == "error" and .seq == 2 and .exit_code == 4 and (.error | test("seq 2"))' <<<"${lines[0]}"
  jq -e '.seq == 6 and .stdout == "step 6\n"' <<<"${lines[1]}"
  jq -e '.type == "error" and .seq == 9 and .exit_code == 4' <<<"${lines[2]}"
}

@test "trajectory ID shows every exec with its request and result" {
  local id res=()
  id=$(sb_create --workdir /work)
  printf 'in\n' >"$BATS_TEST_TMPDIR/in"
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- echo one
  res+=("$output")
  run -0 --separate-stderr dsec-run exec --stdin "$BATS_TEST_TMPDIR/in" --env A=b \
    --workdir /tmp --timeout 30 --max-output 1000 "$id" -- sh -c 'cat; echo $A; pwd'
  res+=("$output")
  run -7 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'exit 7'
  res+=("$output")
  run -7 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'exit 7'
  out_jq '.replayed == true'

  run -0 --separate-stderr dsec-run trajectory "$id"
  [ "${#lines[@]}" -eq 3 ]
  jq -e --argjson r "${res[0]}" '.type == "exec" and .seq == 1
    and .request == {"cmd":["echo","one"],"stdin":"","workdir":"/work","env":{},
                     "timeout_s":0,"max_output_bytes":1048576,"seq":1}
    and .result == $r' <<<"${lines[0]}"
  jq -e --argjson r "${res[1]}" '.type == "exec" and .seq == null
    and .request.cmd == ["sh","-c","cat; echo $A; pwd"] and .request.stdin == "in\n"
    and .request.env == {"A":"b"} and .request.workdir == "/tmp"
    and .request.timeout_s == 30 and .request.max_output_bytes == 1000
    and (.request | has("seq") | not)
    and .result == $r and .result.stdout == "in\nb\n/tmp\n"' <<<"${lines[1]}"
  jq -e --argjson r "${res[2]}" '.seq == 2 and .result == $r
    and .result.exit_code == 7' <<<"${lines[2]}"
  # the same as the file, which survives until rm
  cmp <(printf '%s\n' "${lines[@]}") "$DSEC_ROOT/sandboxes/$id/trajectory.jsonl"
}

# --- checkpoint ----------------------------------------------------------------

@test "checkpoint: a layer in the store and a trajectory record after the last seq" {
  local id digest
  id=$(sb_create)
  # before any seq, the checkpoint follows none
  run -0 --separate-stderr dsec-run checkpoint "$id"
  out_jq --arg id "$id" '.type == "checkpoint" and .id == $id and .after_seq == null'
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo a > /root/a'
  run -0 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'echo b > /root/b'
  run -0 --separate-stderr dsec-run exec "$id" -- true
  run -0 --separate-stderr dsec-run checkpoint "$id"
  out_jq --arg id "$id" '.type == "checkpoint" and .id == $id and .after_seq == 2
    and .consistent == true and .layer.type == "layer"
    and (.layer.digest | test("^sha256:[0-9a-f]{64}$"))'
  digest=$(jq -r '.layer.digest' <<<"$output")
  [ -z "$stderr" ]
  run -0 --separate-stderr dsec-layer ls
  out_jq -s --arg d "$digest" 'any(.[]; .type == "layer" and .digest == $d)'
  run -0 --separate-stderr dsec-layer inspect "$digest"
  out_jq '.entries >= 2'
  run -0 --separate-stderr dsec-run trajectory "$id"
  jq -e --arg d "$digest" '.type == "checkpoint" and .after_seq == 2 and .layer == $d' \
    <<<"${lines[-1]}"
  jq -e '.type == "checkpoint" and .after_seq == null' <<<"${lines[0]}"
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq --arg d "$digest" '.state == "running" and .checkpoint == $d'
  # the sandbox takes execs and its seqs go on
  run -0 --separate-stderr dsec-run exec --seq 3 "$id" -- cat /root/a /root/b
  out_jq '.stdout == "a\nb\n" and .replayed == false'
}

@test "checkpoint --name NAME@VERSION names the layer" {
  local id digest
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo named > /root/n'
  run -0 --separate-stderr dsec-run checkpoint --name step-ck@3 "$id"
  digest=$(jq -r '.layer.digest' <<<"$output")
  out_jq '.layer.name == "step-ck@3"'
  run -0 --separate-stderr dsec-layer inspect step-ck@3
  out_jq --arg d "$digest" '.type == "layer" and .digest == $d and (.refs | index("step-ck@3"))'
  # a sandbox made with it on top sees the file
  local other
  other=$(sb_create --layer step-ck@3)
  [ "$(in_sb "$other" 'cat /root/n')" = named ]
}

@test "checkpoint leaves the sandbox running: its background process goes on" {
  local id t s
  id=$(sb_create)
  start_counter "$id"
  run -0 --separate-stderr dsec-run checkpoint "$id"
  out_jq '.consistent == true'
  [ "$(sb_state "$id")" = running ]
  # not left frozen
  t=$(sb_file "$id" /tmp/t)
  s=$(size_of "$t")
  wait_file_grows "$t" "$s"
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

@test "a fork sees files written, a file deleted from the image and a directory replaced by a file" {
  local id child
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c '
    echo written > /root/new; mkdir -p /work/d; echo deep > /work/d/f
    echo tmp > /tmp/f; echo changed > /etc/hostname
    rm /etc/group; rm -rf /var/tmp; echo file > /var/tmp'
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  [ "$(in_sb "$child" 'cat /root/new /work/d/f /tmp/f /etc/hostname')" = \
    "$(printf 'written\ndeep\ntmp\nchanged')" ]
  # the whiteout: gone from the image's layer
  run -0 --separate-stderr dsec-run exec "$child" -- sh -c 'test ! -e /etc/group && ls /etc'
  out_jq '.stdout == "hostname\npasswd\n"'
  # the directory is a file now
  [ "$(in_sb "$child" 'test -f /var/tmp && cat /var/tmp')" = file ]
}

@test "a fork sees a directory that was removed and made again without the image's entries (opaque)" {
  local id child
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'rm -rf /var; mkdir /var; echo new > /var/only'
  run -0 --separate-stderr dsec-run exec "$id" -- ls -A /var
  out_jq '.stdout == "only\n"'
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  # the image's /var/tmp must not show through the new /var
  run -0 --separate-stderr dsec-run exec "$child" -- ls -A /var
  out_jq '.stdout == "only\n"'
}

@test "checkpoint of a sandbox that deleted two files of the image" {
  local id child
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- rm /etc/group /etc/hostname
  run --separate-stderr dsec-run checkpoint "$id"
  [ "$status" -eq 0 ] || {
    echo "checkpoint exited $status: $stderr" >&2
    false
  }
  out_jq '.type == "checkpoint"'
  [ -z "$stderr" ]
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  run -0 --separate-stderr dsec-run exec "$child" -- ls -A /etc
  out_jq '.stdout == "passwd\n"'
}

# --- suspend (frozen) and resume ----------------------------------------------

@test "suspend: every process stops, exec is refused; resume: they go on" {
  local id t s1 s2 st
  id=$(sb_create)
  start_counter "$id"
  t=$(sb_file "$id" /tmp/t)
  run -0 --separate-stderr dsec-run suspend "$id"
  out_jq --arg id "$id" '. == {"type":"suspended","id":$id,"released":false}'
  [ "$(sb_state "$id")" = suspended ]
  # ps without --all lists it
  run -0 --separate-stderr dsec-run ps
  out_jq -s --arg id "$id" 'any(.[]; .id == $id and .state == "suspended")'
  # frozen: the counter does not move at all
  sleep 0.5
  s1=$(size_of "$t")
  sleep 1.5
  s2=$(size_of "$t")
  [ "$s1" -eq "$s2" ] || { echo "/tmp/t grew from $s1 to $s2 while frozen" >&2; false; }
  # its memory cgroup (and the rest) is still there, and frozen
  [ -d "$(dirname "$(cg_file "$id" memory x)")" ]
  st=$(dsec-run inspect "$id" | jq -r '.cgroup.freezer.version')
  if [ "$st" = 1 ]; then
    [ "$(cat "$(cg_file "$id" freezer freezer.state)")" = FROZEN ]
  else
    [ "$(cat "$(cg_file "$id" freezer cgroup.freeze)")" = 1 ]
  fi
  # exec answers an error, and nothing runs
  run -125 --separate-stderr dsec-run exec "$id" -- touch /root/while-frozen
  out_jq '.type == "error" and (.error | test("suspended"))'
  [ ! -e "$(sb_file "$id" /root/while-frozen)" ]

  run -0 --separate-stderr dsec-run resume "$id"
  out_jq --arg id "$id" '.type == "resumed" and .id == $id and .state == "running"'
  [ "$(sb_state "$id")" = running ]
  wait_file_grows "$t" "$s2"
  [ -d "$(dirname "$(cg_file "$id" memory x)")" ]
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

# --- suspend --release and resume ---------------------------------------------

@test "suspend --release: processes, memory and cgroups go; spec, trajectory and checkpoint stay" {
  local id sup init digest seq1
  id=$(sb_create --name rollout-1)
  start_counter "$id"
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c "$COUNTER; $RANDOM_CMD"
  seq1=$output
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo before > /root/before'
  sup=$(dsec-run inspect "$id" | jq -r '.supervisor_pid')
  init=$(dsec-run inspect "$id" | jq -r '.init_pid')
  [ -n "$(sb_cgroups)" ]

  run -0 --separate-stderr dsec-run suspend --release rollout-1
  out_jq --arg id "$id" '.type == "suspended" and .id == $id and .released == true
    and .after_seq == 1 and (.layer.digest | test("^sha256:"))'
  digest=$(jq -r '.layer.digest' <<<"$output")
  # the supervisor, init and everything else are gone, and the cgroups
  sb_dead "$sup"
  sb_dead "$init"
  [ -z "$(sb_pids)" ]
  [ -z "$(ls -d /sys/fs/cgroup/*/dsec/"$id" /sys/fs/cgroup/dsec/"$id" 2>/dev/null)" ]
  # the state says so
  run -0 --separate-stderr dsec-run inspect rollout-1
  out_jq --arg d "$digest" '.state == "suspended" and .released == true and .checkpoint == $d'
  run -0 --separate-stderr dsec-run ps
  out_jq -s --arg id "$id" 'any(.[]; .id == $id and .state == "suspended")'
  run -0 --separate-stderr dsec-layer inspect "$digest"
  # the trajectory is readable; exec is refused
  run -0 --separate-stderr dsec-run trajectory "$id"
  out_jq -s --argjson f "$seq1" --arg d "$digest" 'map(.type) == ["exec", "exec", "exec", "checkpoint"]
    and .[1].result == $f and .[3].layer == $d and .[3].after_seq == 1'
  run -125 --separate-stderr dsec-run exec "$id" -- true
  [ -z "$(sb_pids)" ]
}

@test "resume of a released sandbox: same id, its files, replay goes on, background processes are lost" {
  local id digest seq1
  id=$(sb_create --name rollout-2 --env FROM_SPEC=kept --workdir /work)
  start_counter "$id"
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c "$COUNTER; $RANDOM_CMD"
  seq1=$output
  run -0 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'echo before > /root/before; rm /etc/group'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  digest=$(jq -r '.layer.digest' <<<"$output")

  run -0 --separate-stderr dsec-run resume rollout-2
  out_jq --arg id "$id" --arg d "$digest" '.type == "resumed" and .id == $id
    and .state == "running" and .lost == "processes" and .checkpoint == $d
    and .name == "rollout-2"'
  [ "$(sb_state "$id")" = running ]
  [ -n "$(sb_cgroups)" ]
  # its files, its deletion, its spec's environment and workdir
  [ "$(in_sb rollout-2 'cat /root/before /root/counter; echo $FROM_SPEC; pwd')" = \
    "$(printf 'before\n1\nkept\n/work')" ]
  run -1 --separate-stderr dsec-run exec "$id" -- test -e /etc/group
  # the seq'd command from before is replayed, not run again
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c "$COUNTER; $RANDOM_CMD"
  out_jq --argjson f "$seq1" '.replayed == true and del(.replayed) == ($f | del(.replayed))'
  [ "$(in_sb "$id" 'cat /root/counter')" = 1 ]
  run -4 --separate-stderr dsec-run exec --seq 2 "$id" -- echo other
  run -4 --separate-stderr dsec-run exec --seq 4 "$id" -- echo beyond
  run -0 --separate-stderr dsec-run exec --seq 3 "$id" -- echo three
  out_jq '.replayed == false'
  # the background counter did not come back (documented loss)
  run -0 --separate-stderr sb_procs_in "$id"
  [ "$(grep -cxE 'sh|sleep' <<<"$output")" -eq 0 ] || {
    echo "processes after resume: $output" >&2
    false
  }
}

@test "a trajectory whose last record a crash cut (unsynced, \"durable\": false) keeps the next seq's record whole" {
  local id traj
  id=$(sb_create)
  traj=$DSEC_ROOT/sandboxes/$id/trajectory.jsonl
  run -0 --separate-stderr dsec-run exec --seq 0 "$id" -- echo zero
  run -0 --separate-stderr dsec-run suspend --release "$id"
  # what a host crash leaves of an unsynced record: its first bytes
  printf '{"type":"exec","seq":null,"request":{"cmd":["ech' >>"$traj"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- echo one
  out_jq '.replayed == false and .stdout == "one\n"'
  # seq 1's record is a line of its own: the next supervisor replays it
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- echo one
  out_jq '.replayed == true and .stdout == "one\n"'
  grep -qx '{"type":"exec","seq":null,"request":{"cmd":\["ech' "$traj"
}

@test "two resumes of a released sandbox at once: one boots it, the other is refused (1); one supervisor" {
  local id a b
  id=$(sb_create)
  run -0 --separate-stderr dsec-run suspend --release "$id"
  dsec-run resume "$id" >"$BATS_TEST_TMPDIR/a" 2>&1 & a=$!
  dsec-run resume "$id" >"$BATS_TEST_TMPDIR/b" 2>&1 & b=$!
  local ra=0 rb=0
  wait "$a" || ra=$?
  wait "$b" || rb=$?
  # exactly one succeeded; the other says why
  [ $((ra == 0)) -ne $((rb == 0)) ] || {
    cat "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b" >&2
    false
  }
  [ "$ra" -eq 1 ] || [ "$rb" -eq 1 ]
  grep -qE "being resumed|resumed meanwhile|not suspended" "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
  [ "$(sb_state "$id")" = running ]
  [ "$(sb_pids "DSEC_ROOT=$DSEC_ROOT" | while read -r p; do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dsec-supervise ] && echo "$p"
      done | wc -l)" -eq 1 ]
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

@test "checkpoint after a resume from release records the seq it follows" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- true
  run -0 --separate-stderr dsec-run exec --seq 2 "$id" -- true
  run -0 --separate-stderr dsec-run suspend --release "$id"
  out_jq '.after_seq == 2'
  run -0 --separate-stderr dsec-run resume "$id"
  # the trajectory's last seq is still 2
  run -0 --separate-stderr dsec-run checkpoint "$id"
  out_jq '.after_seq == 2'
  run -0 --separate-stderr dsec-run trajectory "$id"
  jq -e '.type == "checkpoint" and .after_seq == 2' <<<"${lines[-1]}"
}

@test "a sandbox can be released and resumed twice, keeping what each epoch wrote" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo one > /root/one'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'echo two > /root/two; rm /root/one'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  out_jq '.released == true and .after_seq == 2'
  run -0 --separate-stderr dsec-run resume "$id"
  out_jq '.lost == "processes"'
  [ "$(in_sb "$id" 'cat /root/two; test ! -e /root/one && echo gone')" = "$(printf 'two\ngone')" ]
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo one > /root/one'
  out_jq '.replayed == true'
  run -0 --separate-stderr dsec-run exec "$id" -- test ! -e /root/one
}

# --- fork ---------------------------------------------------------------------

@test "fork --count 2 of a running sandbox: two children with its files, each on its own" {
  local id a b t s
  id=$(sb_create --name parent-1 --label job=f)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo shared > /root/shared'
  start_counter "$id"
  run -0 --separate-stderr dsec-run fork --count 2 parent-1
  [ "${#lines[@]}" -eq 2 ]
  jq -e --arg p "$id" '.type == "sandbox" and .index == 0 and .parent == $p
    and .state == "running" and (.checkpoint | test("^sha256:")) and (has("name") | not)' \
    <<<"${lines[0]}"
  jq -e --arg p "$id" '.type == "sandbox" and .index == 1 and .parent == $p' <<<"${lines[1]}"
  a=$(jq -r '.id' <<<"${lines[0]}")
  b=$(jq -r '.id' <<<"${lines[1]}")
  [ "$a" != "$b" ]
  [ "$a" != "$id" ]
  [ "$b" != "$id" ]
  [ "$(jq -r '.checkpoint' <<<"${lines[0]}")" = "$(jq -r '.checkpoint' <<<"${lines[1]}")" ]
  # each sees the parent's files
  [ "$(in_sb "$a" 'cat /root/shared')" = shared ]
  [ "$(in_sb "$b" 'cat /root/shared')" = shared ]
  # writes in one are seen by nobody else
  in_sb "$a" 'echo mine > /root/a-only; echo a > /root/shared' >/dev/null
  run -1 --separate-stderr dsec-run exec "$b" -- test -e /root/a-only
  run -1 --separate-stderr dsec-run exec "$id" -- test -e /root/a-only
  [ "$(in_sb "$b" 'cat /root/shared')" = shared ]
  [ "$(in_sb "$id" 'cat /root/shared')" = shared ]
  # nor the parent's later writes by the children
  in_sb "$id" 'echo later > /root/later' >/dev/null
  run -1 --separate-stderr dsec-run exec "$a" -- test -e /root/later
  # the parent keeps running, its background process too
  [ "$(sb_state "$id")" = running ]
  t=$(sb_file "$id" /tmp/t)
  s=$(size_of "$t")
  wait_file_grows "$t" "$s"
  # the children are listed as running sandboxes
  run -0 --separate-stderr dsec-run ps
  out_jq -s --arg a "$a" --arg b "$b" '([.[] | select(.id == $a or .id == $b)
    | .state] == ["running", "running"])'
}

@test "fork of a released sandbox starts from its checkpoint; it stays released" {
  local id digest child
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo saved > /root/saved'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  digest=$(jq -r '.layer.digest' <<<"$output")
  run -0 --separate-stderr dsec-run fork "$id"
  out_jq --arg p "$id" --arg d "$digest" '.index == 0 and .parent == $p and .checkpoint == $d'
  child=$(jq -r '.id' <<<"$output")
  [ "$(in_sb "$child" 'cat /root/saved')" = saved ]
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq --arg d "$digest" '.state == "suspended" and .released == true and .checkpoint == $d'
  [ -z "$(ls -d /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null)" ]
  # the child has a trajectory of its own: seq 1 runs there
  run -0 --separate-stderr dsec-run exec --seq 1 "$child" -- true
  out_jq '.replayed == false'
}

@test "fork and resume of a sandbox resumed twice with nothing changed (its checkpoint is its top layer already)" {
  local id child
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo saved > /root/saved'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  # nothing changed: the empty layer on top
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  # the next checkpoint is that same empty layer: stacked once
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  echo "$child" >>"$SB_IDS"
  [ "$(in_sb "$child" 'cat /root/saved')" = saved ]
  run -0 --separate-stderr dsec-run suspend --release "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  [ "$(in_sb "$id" 'cat /root/saved')" = saved ]
}

@test "a fork released without a change resumes: its checkpoint, the same layer as its parent's, is stacked once" {
  local id child digest
  # nothing changed in the parent nor in the child: both checkpoints are
  # the same (empty) layer
  id=$(sb_create)
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  digest=$(jq -r '.checkpoint' <<<"$output")
  run -0 --separate-stderr dsec-run suspend --release "$child"
  out_jq --arg d "$digest" '.layer.digest == $d'
  run -0 --separate-stderr dsec-run resume "$child"
  [ "$(in_sb "$child" 'echo alive')" = alive ]
  run -0 --separate-stderr dsec-layer compose busybox:1 "$digest" "$digest"
  out_jq --arg d "$digest" '[.layers[] | select(.digest == $d)] | length == 1'
  out_jq --arg d "$digest" '.layers[-1].digest == $d'
}

@test "fork of a frozen sandbox works and leaves it frozen" {
  local id child t s
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo x > /root/x'
  start_counter "$id"
  run -0 --separate-stderr dsec-run suspend "$id"
  run -0 --separate-stderr dsec-run fork "$id"
  child=$(jq -r '.id' <<<"$output")
  [ "$(in_sb "$child" 'cat /root/x')" = x ]
  [ "$(sb_state "$id")" = suspended ]
  t=$(sb_file "$id" /tmp/t)
  sleep 0.5
  s=$(size_of "$t")
  sleep 1.5
  [ "$(size_of "$t")" -eq "$s" ]
  run -0 --separate-stderr dsec-run resume "$id"
  wait_file_grows "$t" "$s"
}

@test "an fncall sandbox cannot be checkpointed or forked (3)" {
  local id
  id=$(sb_create --backend fncall)
  run -3 --separate-stderr dsec-run checkpoint "$id"
  [ -z "$output" ]
  stderr_has "fncall"
  run -3 --separate-stderr dsec-run fork --count 2 "$id"
  stderr_has "fncall"
  run -3 --separate-stderr dsec-run suspend --release "$id"
  # it keeps running, and nothing was made of it
  [ "$(sb_state "$id")" = running ]
  run -0 --separate-stderr dsec-run exec "$id" -- true
  local all=("$DSEC_ROOT"/sandboxes/sb-*)
  [ "${#all[@]}" -eq 1 ]
}

# --- events --------------------------------------------------------------------

@test "events: checkpoint, suspended and resumed are recorded with type, time and sandbox" {
  local id d1 d2
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- true
  run -0 --separate-stderr dsec-run checkpoint "$id"
  d1=$(jq -r '.layer.digest' <<<"$output")
  run -0 --separate-stderr dsec-run suspend "$id"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run suspend --release "$id"
  d2=$(jq -r '.layer.digest' <<<"$output")
  run -0 --separate-stderr dsec-run resume "$id"

  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s --arg id "$id" '[.[] | select(.type == "checkpoint" or .type == "suspended"
      or .type == "resumed")] | length == 6 and all(.[];
      .sandbox == $id and (.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$")))'
  out_jq -s --arg d1 "$d1" --arg d2 "$d2" '[.[] | select(.type == "checkpoint"
      or .type == "suspended" or .type == "resumed")
    | [.type, (.layer // .checkpoint // null), (if has("released") then .released else null end), (.from // null)]]
    == [["checkpoint", $d1, null, null], ["suspended", null, false, null],
        ["resumed", null, null, "freezer"], ["checkpoint", $d2, null, null],
        ["suspended", null, true, null], ["resumed", $d2, null, "checkpoint"]]'
  out_jq -s '[.[] | select(.type == "checkpoint") | .after_seq] == [1, 1]'
  # in time order
  out_jq -s '[.[].time] == ([.[].time] | sort)'
}
