#!/usr/bin/env bats
# dsec-run end to end: the command line, create/ps/inspect, exec and its
# result, run, the fncall backend, kill, events, limits, crashes of every
# process involved, and many sandboxes at once.  Every test gets its own
# store with busybox:1 in it; teardown removes every sandbox of that store
# and checks that no cgroup and no process of them is left (the cgroup
# tree is shared with other users).

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run

setup_file() {
  # build the busybox rootfs once for the file
  busybox_tar >/dev/null
  run_file_setup
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
}

teardown() {
  # a test that pinned a file with chattr +i
  if [ -f "$BATS_TEST_TMPDIR/immutable" ]; then
    chattr -R -i "$(cat "$BATS_TEST_TMPDIR/immutable")/removing" \
      "$(cat "$BATS_TEST_TMPDIR/immutable")/sandboxes" 2>/dev/null || true
  fi
  sb_teardown
}

# --- the command-line contract ---------------------------------------------

@test "--help prints usage naming every verb on stdout, exit 0" {
  run -0 --separate-stderr dsec-run --help
  [[ "$output" == Usage:\ dsec-run* ]]
  for verb in create exec run ps inspect events rm kill; do
    [[ "$output" == *"  $verb "* ]]
  done
  [[ "$output" == *"--requests"* ]]
  [ -z "$stderr" ]
  [ ! -e "$DSEC_ROOT/sandboxes" ]
}

@test "-h is --help, also after a verb" {
  run -0 --separate-stderr dsec-run -h
  [[ "$output" == Usage:\ dsec-run* ]]
  run -0 --separate-stderr dsec-run create --help
  [[ "$output" == Usage:\ dsec-run* ]]
  [ ! -e "$DSEC_ROOT/sandboxes" ]
}

@test "--version prints the program and version, exit 0" {
  run -0 --separate-stderr dsec-run --version
  [[ "$output" =~ ^dsec-run\ [0-9]+\.[0-9]+ ]]
  [ "${#lines[@]}" -eq 1 ]
  [ -z "$stderr" ]
}

@test "no command is a usage error (2)" {
  run -2 --separate-stderr dsec-run
  [ -z "$output" ]
  stderr_has "COMMAND"
}

@test "an unknown command is a usage error (2) naming it" {
  run -2 --separate-stderr dsec-run frobnicate
  [ -z "$output" ]
  stderr_has "frobnicate"
}

@test "an unknown option is a usage error (2)" {
  run -2 --separate-stderr dsec-run create --no-such-option
  [ -z "$output" ]
  stderr_has "no-such-option"
  run -2 --separate-stderr dsec-run --no-such-option ps
  [ -z "$output" ]
  [ ! -e "$DSEC_ROOT/sandboxes" ]
}

@test "an option of another verb is a usage error (2)" {
  local args
  for args in "ps --force" "rm --all x" "exec --rm x -- true" \
    "create --requests f" "events --seq 1 x" "inspect --memory 5 x" \
    "kill --follow x" "create --attach --image busybox:1"; do
    # shellcheck disable=SC2086
    run -2 --separate-stderr dsec-run $args
    [ -z "$output" ]
    stderr_has "does not apply"
  done
  [ ! -e "$DSEC_ROOT/sandboxes" ]
}

@test "exec without ID, without command, or with both forms is a usage error (2)" {
  run -2 --separate-stderr dsec-run exec
  [ -z "$output" ]
  run -2 --separate-stderr dsec-run exec -- true
  [ -z "$output" ]
  stderr_has "ID"
  run -2 --separate-stderr dsec-run exec sb-0123456789abcdef
  [ -z "$output" ]
  stderr_has "--requests"
  run -2 --separate-stderr dsec-run exec sb-0123456789abcdef --requests f -- true
  [ -z "$output" ]
  run -2 --separate-stderr dsec-run exec --seq 1 sb-0123456789abcdef --requests f
  [ -z "$output" ]
}

@test "other argument mistakes are usage errors (2)" {
  run -2 --separate-stderr dsec-run create --image busybox:1 extra
  run -2 --separate-stderr dsec-run run --image busybox:1
  stderr_has "--"
  run -2 --separate-stderr dsec-run inspect
  run -2 --separate-stderr dsec-run events a b
  run -2 --separate-stderr dsec-run rm
  run -2 --separate-stderr dsec-run kill
  run -2 --separate-stderr dsec-run ps extra
  run -2 --separate-stderr dsec-run create --image busybox:1 --memory lots
  run -2 --separate-stderr dsec-run create --image busybox:1 --cpus 0
  run -2 --separate-stderr dsec-run create --image busybox:1 --env NOEQUALS
  run -2 --separate-stderr dsec-run exec --timeout soon x -- true
  [ ! -e "$DSEC_ROOT/sandboxes" ] || [ -z "$(ls -A "$DSEC_ROOT/sandboxes")" ]
}

@test "a missing image is bad input (3) and leaves nothing under sandboxes/" {
  run -3 --separate-stderr dsec-run create --image nosuch:1
  [ -z "$output" ]
  stderr_has "nosuch:1"
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
  run -3 --separate-stderr dsec-run run --rm --image nosuch:1 -- true
  [ -z "$output" ]
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$output" ]
}

@test "a spec without image is bad input (3)" {
  run -3 --separate-stderr dsec-run create
  stderr_has "image"
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "malformed --spec JSON is bad input (3), from a file or stdin" {
  printf '{"image": "busybox:1",' >"$BATS_TEST_TMPDIR/spec.json"
  run -3 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
  [ -z "$output" ]
  stderr_has "JSON"
  run -3 --separate-stderr dsec-run create --spec - <<<'{"image":'
  [ -z "$output" ]
  run -3 --separate-stderr dsec-run create --spec - <<<'["busybox:1"]'
  [ -z "$output" ]
  run -3 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/none.json"
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "an unknown key in the spec is bad input (3) and the message names it" {
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","gpus_please":4}'
  [ -z "$output" ]
  stderr_has "gpus_please"
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","resources":{"cpus":1,"gpus":2}}'
  stderr_has "gpus"
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "a duplicate key in the spec is bad input (3)" {
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","image":"busybox:1"}'
  [ -z "$output" ]
  stderr_has "image"
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","resources":{"pids":5,"pids":6}}'
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "an invalid mount is bad input (3): missing source, bad form, relative paths" {
  run -3 --separate-stderr dsec-run create --image busybox:1 \
    --mount "$BATS_TEST_TMPDIR/nonexistent:/data"
  [ -z "$output" ]
  stderr_has "nonexistent"
  run -3 --separate-stderr dsec-run create --spec - <<EOF
{"image":"busybox:1","mounts":[{"source":"$BATS_TEST_TMPDIR/nonexistent","target":"/data"}]}
EOF
  stderr_has "nonexistent"
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","mounts":[{"source":"relative","target":"/data"}]}'
  run -3 --separate-stderr dsec-run create --spec - \
    <<<'{"image":"busybox:1","mounts":[{"source":"/tmp","target":"/../x"}]}'
  # a malformed flag is a usage error
  run -2 --separate-stderr dsec-run create --image busybox:1 --mount /tmp:/x:rx
  run -2 --separate-stderr dsec-run create --image busybox:1 --mount /tmp
  # a path that is not UTF-8 (it crashed dsec-run; found by fuzzing)
  run -2 --separate-stderr dsec-run create --image busybox:1 \
    --mount $'/tmp/\xff:/x'
  stderr_has "UTF-8"
  # so is any value that goes into the spec: a --protect not UTF-8 was
  # left out without a word
  run -2 --separate-stderr dsec-run create --image busybox:1 \
    --protect $'/grader\xff'
  stderr_has "--protect"
  stderr_has "UTF-8"
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
  [ -z "$(sb_pids)" ]
}

@test "a bad --user is bad input (3)" {
  local u
  for u in abc 70000:0 1:x -1 ""; do
    run -3 --separate-stderr dsec-run create --image busybox:1 --user "$u"
    [ -z "$output" ]
    stderr_has "user"
  done
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
}

@test "an unknown sandbox is bad input (3) for exec, inspect, events, kill and rm; rm --force ignores it" {
  run -3 --separate-stderr dsec-run exec sb-0123456789abcdef -- true
  [ -z "$output" ]
  stderr_has "sb-0123456789abcdef"
  run -3 --separate-stderr dsec-run inspect nosuchname
  run -3 --separate-stderr dsec-run events nosuchname
  run -3 --separate-stderr dsec-run kill nosuchname
  run -3 --separate-stderr dsec-run rm nosuchname
  run -0 --separate-stderr dsec-run rm --force nosuchname
  [ -z "$output" ]
}

# --- create, ps, inspect -----------------------------------------------------

@test "create prints one sandbox record, state running" {
  run -0 --separate-stderr dsec-run create --image busybox:1
  sb_track
  one_line
  out_jq '.type == "sandbox" and (.id | test("^sb-[0-9a-f]{16}$"))
         and .state == "running" and .backend == "container"
         and (.init_pid | type == "number") and (.supervisor_pid | type == "number")'
  [ -d "$DSEC_ROOT/sandboxes/$(jq -r .id <<<"$output")" ]
}

@test "ps lists running sandboxes as JSON Lines; --label filters" {
  local a b
  a=$(sb_create --label team=red)
  b=$(sb_create --label team=blue)
  run -0 --separate-stderr dsec-run ps
  [ "${#lines[@]}" -eq 2 ]
  for l in "${lines[@]}"; do
    jq -e '.type == "sandbox" and .state == "running" and .image == "busybox:1"' <<<"$l"
  done
  out_jq -s --arg a "$a" --arg b "$b" '[.[].id] | sort == ([$a, $b] | sort)'
  run -0 --separate-stderr dsec-run ps --label team=red
  [ "${#lines[@]}" -eq 1 ]
  out_jq --arg a "$a" '.id == $a and .labels.team == "red"'
  run -0 --separate-stderr dsec-run ps --label team=green
  [ -z "$output" ]
}

@test "inspect shows pids, cgroup paths, limits and the spec" {
  local id
  id=$(sb_create --memory 64 --pids 100 --cpus 1 --label k=v)
  run -0 --separate-stderr dsec-run inspect "$id"
  one_line
  out_jq --arg id "$id" '.type == "sandbox" and .id == $id and .state == "running"
    and (.init_pid | type == "number" and . > 1)
    and (.supervisor_pid | type == "number" and . > 1)
    and .limits.memory_mb == 64 and .limits.pids == 100 and .limits.cpus == 1
    and .limits == .spec.resources
    and .spec.image == "busybox:1" and .spec.labels.k == "v"
    and (.cgroup | length > 0)
    and all(.cgroup | to_entries[] | select(.key != "unavailable");
            .value.path | test("^/sys/fs/cgroup/.*/dsec/" + $id + "$"))'
  local sup init p
  sup=$(jq -r .supervisor_pid <<<"$output")
  init=$(jq -r .init_pid <<<"$output")
  [ "$(cat "/proc/$sup/comm")" = dsec-supervise ]
  [ "$(cat "/proc/$init/comm")" = dsec-init ]
  for p in $(jq -r '.cgroup | to_entries[] | select(.key != "unavailable") | .value.path' <<<"$output"); do
    [ -d "$p" ]
  done
  # the memory and pids cgroups hold init
  p=$(jq -r '.cgroup.pids.path' <<<"$output")
  grep -qx "$init" "$p/cgroup.procs"
}

@test "every process of a sandbox is in each of its cgroups: init, an exec's, an exclusive exec's" {
  local id init p
  id=$(sb_create --memory 64 --pids 100 --cpus 1)
  run -0 --separate-stderr dsec-run inspect "$id"
  init=$(jq -r .init_pid <<<"$output")
  out_jq '[.cgroup | to_entries[] | select(.key != "unavailable")] | length > 0'
  for p in $(jq -r '.cgroup | to_entries[] | select(.key != "unavailable") | .value.path' <<<"$output"); do
    grep -qx "$init" "$p/cgroup.procs"
  done
  # seen from inside (its cgroup namespace's root is the sandbox's
  # cgroups): no line leads out of them, an exclusive exec's neither,
  # which joins the namespace from outside
  run -0 --separate-stderr dsec-run exec "$id" -- cat /proc/self/cgroup
  out_jq '.stdout | split("\n") | map(select(. != "")) | length > 0 and all(endswith(":/"))'
  run -0 --separate-stderr dsec-run exec --exclusive "$id" -- cat /proc/self/cgroup
  out_jq '.stdout | split("\n") | map(select(. != "")) | length > 0 and all(endswith(":/"))'
}

@test "--name: exec, inspect, kill and rm take the name; a name in use is refused" {
  local id
  id=$(sb_create --name web-1)
  run -0 --separate-stderr dsec-run exec web-1 -- echo hi
  out_jq --arg id "$id" '.id == $id and .stdout == "hi\n"'
  run -0 --separate-stderr dsec-run inspect web-1
  out_jq --arg id "$id" '.id == $id and .name == "web-1" and .spec.name == "web-1"'
  run -0 --separate-stderr dsec-run ps
  out_jq '.name == "web-1"'
  run -3 --separate-stderr dsec-run create --image busybox:1 --name web-1
  stderr_has "web-1"
  [ "$(ls "$DSEC_ROOT/sandboxes")" = "$id" ]
  run -0 --separate-stderr dsec-run rm web-1
  out_jq --arg id "$id" '.type == "removed" and .id == $id'
  sb_gone "$id"
  run -3 --separate-stderr dsec-run inspect web-1
  # the name is free again
  id=$(sb_create --name web-1)
  run -0 --separate-stderr dsec-run inspect web-1
  out_jq --arg id "$id" '.id == $id'
}

@test "--spec FILE gives the spec; flags override its fields" {
  cat >"$BATS_TEST_TMPDIR/spec.json" <<'EOF'
{"image": "busybox:1", "env": {"A": "spec", "B": "spec"}, "workdir": "/work",
 "resources": {"pids": 50, "memory_mb": 64}, "labels": {"job": "t"}}
EOF
  run -0 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json" \
    --env A=flag --pids 30 --workdir /srv
  sb_track
  local id
  id=$(jq -r .id <<<"$output")
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq '.spec.resources.pids == 30 and .spec.resources.memory_mb == 64
         and .spec.env == {"A": "flag", "B": "spec"} and .spec.workdir == "/srv"
         and .spec.labels.job == "t"'
  [ "$(cat "$(cg_file "$id" pids pids.max)")" = 30 ]
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo "$A $B"; pwd'
  out_jq '.stdout == "flag spec\n/srv\n"'
}

@test "--spec - reads the spec from stdin" {
  run -0 --separate-stderr dsec-run create --spec - --label from=flag <<'EOF'
{"image": "busybox:1", "env": {"FROM": "stdin"}, "labels": {"a": 1}}
EOF
  sb_track
  local id
  id=$(jq -r .id <<<"$output")
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq '.spec.labels == {"a": 1, "from": "flag"} and .spec.env.FROM == "stdin"'
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo $FROM'
  out_jq '.stdout == "stdin\n"'
}

# --- exec --------------------------------------------------------------------

@test "exec prints a result with every field of the contract" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo out; echo err >&2'
  one_line
  out_jq --arg id "$id" '.id == $id and .seq == null and .exit_code == 0
    and .signal == null and .stdout == "out\n" and .stderr == "err\n"
    and .stdout_bytes == 4 and .stderr_bytes == 4 and .truncated == false
    and .timed_out == false and .oom_killed == false
    and (.duration_ms | type == "number" and . >= 0) and .replayed == false'
  out_jq '[keys[]] - ["type"] | sort == (["id","seq","exit_code","signal",
    "stdout","stderr","stdout_bytes","stderr_bytes","truncated","timed_out",
    "oom_killed","duration_ms","replayed"] | sort)'
  [ -z "$stderr" ]
}

@test "exec passes the exit status through" {
  local id
  id=$(sb_create)
  run -7 --separate-stderr dsec-run exec "$id" -- sh -c 'exit 7'
  out_jq '.exit_code == 7 and .signal == null'
  run -1 --separate-stderr dsec-run exec "$id" -- false
  out_jq '.exit_code == 1'
}

@test "exec of a command killed by a signal: 128+N and signal N" {
  local id
  id=$(sb_create)
  run -137 --separate-stderr dsec-run exec "$id" -- sh -c 'kill -9 $$'
  out_jq '.exit_code == 137 and .signal == 9 and .timed_out == false and .oom_killed == false'
  run -143 --separate-stderr dsec-run exec "$id" -- sh -c 'kill -TERM $$'
  out_jq '.exit_code == 143 and .signal == 15'
}

@test "exec of a missing command is 127, of a non-executable file 126" {
  local id
  id=$(sb_create)
  run -127 --separate-stderr dsec-run exec "$id" -- no-such-command
  out_jq '.exit_code == 127 and (.stderr | test("no-such-command"))'
  run -127 --separate-stderr dsec-run exec "$id" -- /no/such/path
  out_jq '.exit_code == 127'
  run -126 --separate-stderr dsec-run exec "$id" -- /etc/passwd
  out_jq '.exit_code == 126 and (.stderr | test("/etc/passwd"))'
  run -126 --separate-stderr dsec-run exec "$id" -- /tmp
  out_jq '.exit_code == 126'
}

@test "exec finds its command as execvp does: a later PATH entry, past a non-executable file, a script without #!" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c '
    mkdir -p /p1 /p2 /p3 /p4
    printf "echo one \$1\n" >/p1/cmd
    printf "echo two \$1\n" >/p2/cmd && chmod 755 /p2/cmd
    printf "echo three\n" >/p3/only
    ln -s /p2/cmd /p4/hello && ln -s /nowhere /p4/dangling'
  # /p1/cmd is not executable: the search goes on, and /p2/cmd (no #!)
  # runs with /bin/sh
  run -0 --separate-stderr dsec-run exec --env PATH=/nope:/p1:/p2 "$id" -- cmd x
  out_jq '.stdout == "two x\n"'
  # found, but nowhere executable: 126
  run -126 --separate-stderr dsec-run exec --env PATH=/nope:/p1 "$id" -- cmd
  out_jq '.stderr == "dsec: cmd: Permission denied\n"'
  run -126 --separate-stderr dsec-run exec --env PATH=/p3 "$id" -- only
  # not anywhere (a dangling link is not there): 127
  run -127 --separate-stderr dsec-run exec --env PATH=/nope:/p2 "$id" -- hello
  out_jq '.stderr == "dsec: hello: No such file or directory\n"'
  run -127 --separate-stderr dsec-run exec --env PATH=/p4 "$id" -- dangling
  # an absolute path without #! runs with /bin/sh too; a link as any file
  run -0 --separate-stderr dsec-run exec "$id" -- /p2/cmd y
  out_jq '.stdout == "two y\n"'
  run -0 --separate-stderr dsec-run exec --env PATH=/p4 "$id" -- hello z
  out_jq '.stdout == "two z\n"'
  # the same in an fncall call
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr dsec-run exec --env PATH=/nope:/usr/bin:/bin "$id" -- sh -c 'echo $0'
  out_jq '.stdout == "sh\n"'
  run -127 --separate-stderr dsec-run exec --env PATH=/nope "$id" -- sh
}

@test "exec --timeout: 124, timed_out, and the command is really gone" {
  local id
  id=$(sb_create)
  run -124 --separate-stderr timeout 20 dsec-run exec --timeout 1 "$id" -- sleep 30
  out_jq '.exit_code == 124 and .timed_out == true and .duration_ms >= 900
         and .duration_ms < 10000'
  sb_wait_no_proc "$id" sleep 20
  # a shell's children go with it
  run -124 --separate-stderr timeout 20 dsec-run exec --timeout 0.5 "$id" -- \
    sh -c 'sleep 31; echo never'
  out_jq '.timed_out == true and .stdout == ""'
  sb_wait_no_proc "$id" sleep 20
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "limit" and .limit == "timeout")] | length == 2'
}

@test "exec --max-output keeps that much and counts the rest" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --max-output 100 "$id" -- \
    sh -c 'yes | head -c 100000'
  out_jq '(.stdout | length) == 100 and .stdout_bytes == 100000
         and .truncated == true and .exit_code == 0'
  run -0 --separate-stderr dsec-run exec --max-output 100 "$id" -- \
    sh -c 'yes | head -c 300 >&2; echo small'
  out_jq '.stdout == "small\n" and (.stderr | length) == 100
         and .stderr_bytes == 300 and .truncated == true'
  run -0 --separate-stderr dsec-run exec --max-output 100 "$id" -- echo fits
  out_jq '.truncated == false'
}

@test "exec --stdin FILE feeds the command" {
  local id
  id=$(sb_create)
  printf 'line one\nline two\n' >"$BATS_TEST_TMPDIR/in.txt"
  run -0 --separate-stderr dsec-run exec --stdin "$BATS_TEST_TMPDIR/in.txt" "$id" -- cat
  out_jq '.stdout == "line one\nline two\n"'
  # a bigger input than a pipe holds
  head -c 300000 /dev/zero | tr '\0' x >"$BATS_TEST_TMPDIR/big.txt"
  run -0 --separate-stderr dsec-run exec --stdin "$BATS_TEST_TMPDIR/big.txt" "$id" -- wc -c
  out_jq '.stdout | test("^ *300000\n$")'
  # without --stdin the command reads EOF
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- cat
  out_jq '.stdout == ""'
  run -3 --separate-stderr dsec-run exec --stdin "$BATS_TEST_TMPDIR/none" "$id" -- cat
}

@test "exec --env and --workdir" {
  local id
  id=$(sb_create --env FROM_SPEC=1 --workdir /work)
  run -0 --separate-stderr dsec-run exec --env GREETING=hello "$id" -- sh -c 'echo "$GREETING $FROM_SPEC"; pwd'
  out_jq '.stdout == "hello 1\n/work\n"'
  run -0 --separate-stderr dsec-run exec --workdir /tmp --env FROM_SPEC=2 "$id" -- sh -c 'echo $FROM_SPEC; pwd'
  out_jq '.stdout == "2\n/tmp\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo "[$GREETING]"'
  out_jq '.stdout == "[]\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo $PATH'
  out_jq '.stdout | test("/bin")'
}

@test "exec --seq N is echoed in the result and recorded" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- true
  out_jq '.seq == 1 and .replayed == false'
  run -0 --separate-stderr dsec-run exec --seq 2 "$id" -- echo two
  out_jq '.seq == 2 and .stdout == "two\n"'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s '[.[] | select(.type == "exec") | .seq] == [1, 2]'
  jq -e -s '[.[] | .seq] == [1, 2]' "$DSEC_ROOT/sandboxes/$id/trajectory.jsonl"
}

@test "exec --seq of a recorded request replays it; a different one is refused" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo ran >> /root/count; wc -l < /root/count'
  out_jq '.seq == 1 and .replayed == false and (.stdout | test("^ *1\n$"))'
  local first=$output
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'echo ran >> /root/count; wc -l < /root/count'
  out_jq --argjson f "$first" '.replayed == true and (del(.replayed) == ($f | del(.replayed)))'
  run -5 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'exit 5'
  run -5 --separate-stderr dsec-run exec --seq 2 "$id" -- sh -c 'exit 5'
  out_jq '.replayed == true and .exit_code == 5'
  # nothing ran twice
  [ "$(cat "$DSEC_ROOT/sandboxes/$id/upper/root/count")" = ran ]
  run -4 --separate-stderr dsec-run exec --seq 1 "$id" -- echo different
  out_jq '.type == "error" and (.error | test("seq"))'
  [ "$(cat "$DSEC_ROOT/sandboxes/$id/upper/root/count")" = ran ]
}

@test "a sandbox keeps its state across execs" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo kept > /root/state; mkdir -p /work/d'
  run -0 --separate-stderr dsec-run exec "$id" -- cat /root/state
  out_jq '.stdout == "kept\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- test -d /work/d
  # the host sees it in the sandbox's upper layer, not in the image
  [ "$(cat "$DSEC_ROOT/sandboxes/$id/upper/root/state")" = kept ]
}

@test "a background process does not make exec wait for it" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- sh -c 'sleep 100 & echo started'
  out_jq '.exit_code == 0 and .stdout == "started\n" and .duration_ms < 10000'
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- sh -c 'sleep 101 >/dev/null 2>&1 </dev/null &'
  out_jq '.exit_code == 0'
  # they still run, and a next exec works
  sb_wait_proc "$id" sleep 2
}

@test "exec --requests FILE: one result line per request, in order" {
  local id
  id=$(sb_create)
  cat >"$BATS_TEST_TMPDIR/req.jsonl" <<'EOF'
{"cmd": ["echo", "one"], "seq": 1}
{"cmd": ["sh", "-c", "echo two >&2; exit 4"], "seq": 2}

{"cmd": ["cat"], "stdin": "three\n", "seq": 3}
EOF
  run -0 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/req.jsonl"
  [ "${#lines[@]}" -eq 3 ]
  jq -e '.seq == 1 and .stdout == "one\n" and .exit_code == 0' <<<"${lines[0]}"
  jq -e '.seq == 2 and .stderr == "two\n" and .exit_code == 4' <<<"${lines[1]}"
  jq -e '.seq == 3 and .stdout == "three\n" and .exit_code == 0' <<<"${lines[2]}"
  # the same from stdin
  run -0 --separate-stderr dsec-run exec "$id" --requests - <"$BATS_TEST_TMPDIR/req.jsonl"
  [ "${#lines[@]}" -eq 3 ]
  out_jq -s '[.[].seq] == [1, 2, 3]'
}

@test "exec --requests: a malformed line is bad input (3) naming the line" {
  local id
  id=$(sb_create)
  printf '%s\n' '{"cmd": ["echo", "one"]}' '{"cmd": ' '{"cmd": ["echo", "three"]}' \
    >"$BATS_TEST_TMPDIR/bad.jsonl"
  run -3 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/bad.jsonl"
  stderr_has "line 2"
  # what came before the bad line ran; nothing after it
  [ "${#lines[@]}" -le 1 ]
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s 'all(.[]; .argv != ["echo", "three"])'
  printf '%s\n' '{"cmd": ["true"]}' '[1, 2]' >"$BATS_TEST_TMPDIR/bad2.jsonl"
  run -3 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/bad2.jsonl"
  stderr_has "line 2"
  run -3 --separate-stderr dsec-run exec "$id" --requests "$BATS_TEST_TMPDIR/none.jsonl"
}

@test "exec in a removed sandbox is bad input (3), it does not hang" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run rm "$id"
  run -3 --separate-stderr timeout 20 dsec-run exec "$id" -- true
}

# --- run ---------------------------------------------------------------------

@test "run --rm prints the result and removes the sandbox" {
  run -6 --separate-stderr dsec-run run --rm --image busybox:1 -- sh -c 'echo hi; exit 6'
  one_line
  out_jq '.type == "result" and .exit_code == 6 and .stdout == "hi\n"'
  local id
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  sb_gone "$id"
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$output" ]
  [ -z "$(sb_pids)" ]
}

@test "run --rm's exec record is written but not synced (\"durable\": false); run's is synced" {
  local id
  run -0 --separate-stderr env DSEC_CRASH_LIST="$BATS_TEST_TMPDIR/rm" \
    dsec-run run --rm --image busybox:1 -- true
  echo "$(jq -r .id <<<"$output")" >>"$SB_IDS"
  grep -q ' trajectory written$' "$BATS_TEST_TMPDIR/rm"
  run ! grep -q ' trajectory synced$' "$BATS_TEST_TMPDIR/rm"
  run -0 --separate-stderr env DSEC_CRASH_LIST="$BATS_TEST_TMPDIR/keep" \
    dsec-run run --image busybox:1 -- true
  id=$(jq -r .id <<<"$output")
  echo "$id" >>"$SB_IDS"
  grep -q ' trajectory written$' "$BATS_TEST_TMPDIR/keep"
  grep -q ' trajectory synced$' "$BATS_TEST_TMPDIR/keep"
  # with a seq, run --rm's exec is durable (a seq's record always is)
  run -0 --separate-stderr env DSEC_CRASH_LIST="$BATS_TEST_TMPDIR/seq" \
    dsec-run run --rm --seq 0 --image busybox:1 -- true
  echo "$(jq -r .id <<<"$output")" >>"$SB_IDS"
  out_jq '.seq == 0 and .exit_code == 0'
  grep -q ' trajectory synced$' "$BATS_TEST_TMPDIR/seq"
}

@test "exec request \"durable\": a boolean, never with a seq; false still records the exec" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" --requests - <<'EOF_'
{"cmd":["true"],"durable":"no"}
{"cmd":["true"],"durable":false,"seq":0}
{"cmd":["echo","kept"],"durable":false}
{"cmd":["echo","synced"],"durable":true}
EOF_
  jq -e -s '.[0].type == "error" and .[0].exit_code == 3 and
    (.[0].error | test("durable")) and
    .[1].type == "error" and .[1].exit_code == 3 and (.[1].error | test("seq")) and
    .[2].stdout == "kept\n" and .[3].stdout == "synced\n"' <<<"$output"
  run -0 --separate-stderr dsec-run trajectory "$id"
  jq -e -s 'length == 2 and (map(.request.cmd[1]) == ["kept", "synced"]) and
    all(.[]; .request | has("durable") | not)' <<<"$output"
}

@test "rm: the directories are moved aside and rm answers; a process that holds none of its descriptors removes them" {
  local id pinned left pid fd
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- \
    sh -c 'mkdir /w && for i in $(seq 3000); do echo x >/w/$i; done'
  # a file the remover cannot remove keeps its tree where it moved it
  pinned=$DSEC_ROOT/sandboxes/$id/upper/w/1
  [ -f "$pinned" ]
  chattr +i "$pinned" || skip "no immutable files where DSEC_ROOT is"
  echo "$DSEC_ROOT" >"$BATS_TEST_TMPDIR/immutable"
  # run waits for rm's output to end: a remover holding it would be waited for
  run -0 --separate-stderr dsec-run rm "$id"
  out_jq '.type == "removed"'
  [ -z "$stderr" ]
  sb_gone "$id"
  # caught while it removes (when it is that slow): /dev/null on 0-2, and
  # nothing else but the directories it removes and the supervisor whose
  # exit it waits for (a pidfd)
  for pid in $(grep -lx dsec-rm /proc/[0-9]*/comm 2>/dev/null | cut -d/ -f3); do
    grep -qzx "DSEC_ROOT=$DSEC_ROOT" "/proc/$pid/environ" 2>/dev/null || continue
    for fd in /proc/"$pid"/fd/*; do
      case ${fd##*/} in
        0 | 1 | 2) [ "$(readlink "$fd")" = /dev/null ] || [ ! -e "$fd" ] ;;
        *) [[ $(readlink "$fd") == */removing/"$id".tmp-* ||
          $(readlink "$fd") == "anon_inode:[pidfd]" ]] || [ ! -e "$fd" ] ;;
      esac
    done
  done
  left=$(echo "$DSEC_ROOT/removing/$id".tmp-*)
  [ -d "$left" ]
  until_unlocked "$left"
  # it stopped at the pinned file; the run directory went whole
  [ -f "$left/upper/w/1" ]
  [ -z "$(ls -A "$DSEC_RUN/removing")" ]
  # what a remover left is the reaper's
  chattr -i "$left/upper/w/1"
  rm "$BATS_TEST_TMPDIR/immutable"
  run -0 --separate-stderr dsec-reap
  out_jq -s --arg p "$left" 'any(.[]; .what == "tmp" and .id == $p and .action == "removed")'
  [ -z "$(ls -A "$DSEC_ROOT/removing")" ]
}

@test "rm: its remover is out of rm's process group when rm returns: a kill of that group does not stop the removal" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- \
    sh -c 'mkdir /w && for i in $(seq 2000); do echo x >/w/$i; done'
  # the group of a caller that rm answered is killed at once (as a
  # harness's timeout kills a process group)
  run -137 setsid bash -c 'dsec-run rm "$1" >/dev/null && kill -KILL 0' _ "$id"
  sb_gone "$id"
  # the files go all the same: the remover finishes
  local i
  for i in $(seq 100); do
    [ -z "$(ls -A "$DSEC_ROOT/removing")$(ls -A "$DSEC_RUN/removing")" ] && break
    sleep 0.1
  done
  [ -z "$(ls -A "$DSEC_ROOT/removing")$(ls -A "$DSEC_RUN/removing")" ]
}

@test "rm's shutdown (\"remove\":true) does not record the end; a plain shutdown does" {
  local a b
  a=$(sb_create)
  b=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$a" --requests - <<<'{"op":"shutdown"}'
  out_jq '.type == "stopping"'
  run -0 --separate-stderr dsec-run exec "$b" --requests - <<<'{"op":"shutdown","remove":true}'
  out_jq '.type == "stopping"'
  # once both supervisors are gone (10 s at most)
  for _ in $(seq 100); do
    run -0 --separate-stderr dsec-run ps --all
    jq -e -s 'all(.[]; .state != "running")' <<<"$output" >/dev/null && break
    sleep 0.1
  done
  jq -e -s --arg a "$a" --arg b "$b" \
    'any(.[]; .id == $a and .state == "stopped" and .cause == "removed") and
     any(.[]; .id == $b and .state == "died")' <<<"$output"
  run -0 --separate-stderr dsec-run rm "$a" "$b"
  sb_gone "$a"
  sb_gone "$b"
}

@test "rm's shutdown is answered \"stopped\" once the sandbox's processes and cgroups are gone" {
  local id sock cgs pid
  id=$(sb_create)
  # a process the exec leaves behind, in the sandbox's cgroups
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'sleep 1000 >/dev/null 2>&1 &'
  cgs=$(dsec-run inspect "$id" | jq -r '.cgroup[].path')
  [ -n "$cgs" ]
  pid=$(cat "$(head -n 1 <<<"$cgs")/cgroup.procs" | while read -r p; do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = sleep ] && echo "$p"; done)
  [ -n "$pid" ]
  sock=$(dsec-run inspect "$id" | jq -r .socket)
  # each answer as it comes, with what is left of the sandbox at that
  # moment; then the end of the connection (the supervisor's exit)
  run -0 --separate-stderr python3 -c '
import json, os, socket, sys
sock, pid, cgs = sys.argv[1], sys.argv[2], sys.argv[3].split()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
s.sendall(b"{\"op\":\"shutdown\",\"remove\":true}\n")
f = s.makefile("rb")
for line in f:
    rec = json.loads(line)
    rec["left"] = [p for p in cgs if os.path.exists(p)]
    rec["alive"] = os.path.exists("/proc/" + pid)
    print(json.dumps(rec), flush=True)
print(json.dumps({"type": "eof"}))
' "$sock" "$pid" "$cgs"
  [ "${#lines[@]}" -eq 3 ]
  jq -e '.type == "stopping"' <<<"${lines[0]}"
  jq -e --arg id "$id" '.type == "stopped" and .id == $id and .left == [] and
    .alive == false' <<<"${lines[1]}"
  jq -e '.type == "eof"' <<<"${lines[2]}"
  run -0 --separate-stderr dsec-run rm "$id"
  sb_gone "$id"
}

# last_one_reaped WHAT ID DIR: with no sandbox left, dsec-reap plans the
# unmount of the host-wide mount WHAT (id ID) at $DSEC_RUN/layers/DIR/mnt,
# a dry run leaves it, the real run unmounts it and nothing is left
# under $DSEC_RUN/layers
last_one_reaped() {
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s --arg w "$1" --arg id "$2" \
    'any(.[]; .what == $w and .id == $id and .action == "would unmount")'
  mountpoint -q "$DSEC_RUN/layers/$3/mnt"
  run -0 --separate-stderr dsec-reap
  out_jq -s --arg w "$1" --arg id "$2" \
    'any(.[]; .what == $w and .id == $id and .action == "unmounted")'
  [ -z "$(awk -v r="$DSEC_RUN/layers" 'index($2, r) == 1' /proc/self/mounts)" ]
}

@test "/sys: one read-only sysfs for every sandbox of the host, with no interface; dsec-reap unmounts it after the last one" {
  local a b c da db
  a=$(sb_create)
  b=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.sysfs == "shared" and .environment.sysfs == "shared" and
    (has("sysfs_unshared") | not)'
  mountpoint -q "$DSEC_RUN/layers/sysfs/mnt"
  for id in "$a" "$b"; do
    run -0 --separate-stderr dsec-run exec "$id" -- sh -c \
      'stat -c %d /sys; ls -A /sys/class/net | wc -l; ls /sys/devices/system/cpu | grep -c "^cpu[0-9]"; ls -A /sys/firmware | wc -l; touch /sys/x 2>&1 || echo refused'
    mapfile -t lines < <(jq -r .stdout <<<"$output")
    [ "${lines[1]}" = 0 ]   # no interface
    [ "${lines[2]}" -ge 1 ] # the host's devices
    [ "${lines[3]}" = 0 ]   # masks as before
    [[ ${lines[4]} == *Read-only* ]]
    [ "${lines[5]}" = refused ]
    if [ "$id" = "$a" ]; then da=${lines[0]}; else db=${lines[0]}; fi
  done
  # one file system for both, not the host's
  [ "$da" = "$db" ]
  [ "$da" != "$(stat -c %d /sys)" ]
  # DSEC_SYSFS=own: one of its own, read-only too
  c=$(DSEC_SYSFS=own sb_create)
  run -0 --separate-stderr dsec-run inspect "$c"
  jq_ok '.sysfs == "own" and .sysfs_unshared == "DSEC_SYSFS=own"'
  run -0 --separate-stderr dsec-run exec "$c" -- sh -c \
    'stat -c %d /sys; touch /sys/x 2>&1 || echo refused'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  [ "${lines[0]}" != "$da" ]
  [ "${lines[2]}" = refused ]
  dsec-run rm "$c" >/dev/null
  # it stays while a sandbox is left
  dsec-run rm "$a" >/dev/null
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s 'all(.[]; .what != "sysfs_mount")'
  dsec-run rm "$b" >/dev/null
  last_one_reaped sysfs_mount sysfs sysfs
}

@test "/dev: a directory of one tmpfs for every sandbox of the host with a memory limit, out of each other's sight, gone with its sandbox (DSEC_DEV=own, or no limit: a tmpfs of its own); dsec-reap removes orphans and unmounts it after the last one" {
  local a b c d da top=$DSEC_RUN/layers/dev/mnt
  a=$(sb_create --memory 64)
  b=$(sb_create --memory 64)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.dev == "shared" and .environment.dev == "shared" and
    (has("dev_unshared") | not)'
  mountpoint -q "$top"
  run -0 --separate-stderr dsec-run exec "$a" -- sh -c \
    'echo secret >/dev/shm/a; stat -c %d /dev/shm; touch /dev/x 2>&1 || echo refused; grep -E " /dev(/shm)? " /proc/self/mountinfo | cut -d" " -f5,6'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  da=${lines[0]}
  [[ ${lines[1]} == *Read-only* ]]
  [ "${lines[2]}" = refused ]
  [[ ${lines[3]} == "/dev ro,nosuid,nodev,noexec,"* ]]
  [[ ${lines[4]} == "/dev/shm rw,nosuid,nodev,"* ]]
  [ "$(cat "$top/$a/shm/a")" = secret ]
  # b: the same file system, none of a's files
  run -0 --separate-stderr dsec-run exec "$b" -- sh -c \
    'stat -c %d /dev/shm; ls -A /dev/shm | wc -l; cat /dev/shm/a 2>/dev/null || echo none'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  [ "${lines[0]}" = "$da" ]
  [ "${lines[1]}" = 0 ]
  [ "${lines[2]}" = none ]
  # DSEC_DEV=own: a tmpfs of its own, read-only too
  c=$(DSEC_DEV=own sb_create --memory 64)
  run -0 --separate-stderr dsec-run inspect "$c"
  jq_ok '.dev == "own" and .dev_unshared == "DSEC_DEV=own"'
  [ ! -e "$top/$c" ]
  # no memory limit, nothing would bound its /dev/shm: a tmpfs of its own
  d=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$d"
  jq_ok '.dev == "own" and (.dev_unshared | startswith("no memory limit"))'
  [ ! -e "$top/$d" ]
  run -0 --separate-stderr dsec-run exec "$d" -- sh -c \
    'dd if=/dev/zero of=/dev/shm/big bs=1M count=65 2>/dev/null; stat -c %s /dev/shm/big; df -k /dev/shm | tail -1'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  [ "${lines[0]}" -le $((64 << 20)) ]
  [[ ${lines[1]} == *" 65536 "* ]]
  dsec-run rm "$d" >/dev/null
  run -0 --separate-stderr dsec-run exec "$c" -- sh -c \
    'stat -c %d /dev/shm; echo x >/dev/shm/c && echo wrote; touch /dev/x 2>/dev/null || echo refused'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  [ "${lines[0]}" != "$da" ]
  [ "${lines[1]}" = wrote ]
  [ "${lines[2]}" = refused ]
  dsec-run rm "$c" >/dev/null
  # a's directory goes with it (its remover may finish after rm)
  dsec-run rm "$a" >/dev/null
  for _ in $(seq 100); do [ -e "$top/$a" ] || break; sleep 0.1; done
  [ ! -e "$top/$a" ]
  [ -d "$top/$b/shm" ]
  # an orphan a minute old goes, a younger one (a creation's) stays
  mkdir "$top/sb-0123456789abcdef" "$top/sb-fedcba9876543210"
  touch "$top/sb-0123456789abcdef/x"
  touch -d '-2 minutes' "$top/sb-0123456789abcdef"
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s 'any(.[]; .what == "dev_dir" and .id == "sb-0123456789abcdef" and
    .action == "would remove") and all(.[]; .id != "sb-fedcba9876543210") and
    all(.[]; .what != "dev_mount")'
  run -0 --separate-stderr dsec-reap
  out_jq -s 'any(.[]; .what == "dev_dir" and .id == "sb-0123456789abcdef" and
    .action == "removed" and .reason == "orphan")'
  [ ! -e "$top/sb-0123456789abcdef" ]
  [ -d "$top/sb-fedcba9876543210" ]
  dsec-run rm "$b" >/dev/null
  last_one_reaped dev_mount dev dev
}

@test "/dev: what a sandbox left in /dev/shm goes when its supervisor ends (released here), as a tmpfs of its own did; resumed, it has an empty one" {
  local id top=$DSEC_RUN/layers/dev/mnt
  id=$(sb_create --memory 64)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c \
    'dd if=/dev/zero of=/dev/shm/f bs=64k count=16 2>/dev/null; ls /dev/shm'
  [ "$(jq -r .stdout <<<"$output")" = f ]
  [ "$(stat -c %s "$top/$id/shm/f")" = 1048576 ]
  run -0 --separate-stderr dsec-run suspend --release "$id"
  [ -d "$top/$id/shm" ]
  [ -z "$(ls -A "$top/$id/shm")" ]
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c \
    'ls -A /dev/shm | wc -l; echo y >/dev/shm/y && echo wrote'
  mapfile -t lines < <(jq -r .stdout <<<"$output")
  [ "${lines[0]}" = 0 ]
  [ "${lines[1]}" = wrote ]
  dsec-run rm "$id" >/dev/null
  for _ in $(seq 100); do [ -e "$top/$id" ] || break; sleep 0.1; done
  [ ! -e "$top/$id" ]
}

@test "mount namespace: a copy of the host's template, with the mounts a copy of the host's gets (DSEC_MOUNT_NS=own); dsec-reap unmounts the template after the last sandbox" {
  local a b c id
  a=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.mount_ns == "template" and .environment.mount_ns == "template" and
    (has("mount_ns_own") | not)'
  mountpoint -q "$DSEC_RUN/layers/rootns/mnt"
  # the template: a read-only root with nothing but the cover h (over the
  # hidden proc and sysfs) and the empty directory e
  run -0 python3 -c '
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
if libc.setns(fd, 0x00020000) != 0:
    sys.exit("setns: %s" % os.strerror(ctypes.get_errno()))
print(sorted(os.listdir("/")), os.listdir("/h"))
try:
    open("/x", "w")
    print("written")
except OSError as e:
    print(errno.errorcode[e.errno])
' "$DSEC_RUN/layers/rootns/mnt"
  [ "${lines[0]}" = "['e', 'h'] []" ]
  [ "${lines[1]}" = EROFS ]
  # the same mounts as in a namespace copied from the host's, which init
  # left with pivot_root
  b=$(DSEC_MOUNT_NS=own sb_create)
  run -0 --separate-stderr dsec-run inspect "$b"
  jq_ok '.mount_ns == "own" and .mount_ns_own == "DSEC_MOUNT_NS=own"'
  for id in "$a" "$b"; do
    run -0 --separate-stderr dsec-run exec "$id" -- cat /proc/self/mountinfo
    # without mount ids, device numbers and the sandbox's own paths, in
    # any order (the device nodes are bound before /sys or after)
    jq -r .stdout <<<"$output" | awk '{ $1 = $2 = $3 = ""; print }' |
      sed "s/$id//g" | sort >"$BATS_TEST_TMPDIR/mi.$id"
    grep -q ' / / .* - overlay ' "$BATS_TEST_TMPDIR/mi.$id"
    # an exclusive exec joins from outside: it starts in the sandbox's root
    run -0 --separate-stderr dsec-run exec --exclusive "$id" -- sh -c \
      'ls -d /bin /proc/1 && cat /proc/self/mountinfo | wc -l'
  done
  diff "$BATS_TEST_TMPDIR/mi.$a" "$BATS_TEST_TMPDIR/mi.$b"
  # it stays while a sandbox is left
  dsec-run rm "$b" >/dev/null
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s 'all(.[]; .what != "mount_ns")'
  dsec-run rm "$a" >/dev/null
  last_one_reaped mount_ns rootns rootns
  # made again by the next creation
  c=$(sb_create)
  mountpoint -q "$DSEC_RUN/layers/rootns/mnt"
  run -0 --separate-stderr dsec-run exec "$c" -- cat /proc/self/mountinfo
  out_jq '.exit_code == 0'
}

@test "mount namespace: where the template cannot be made, the sandbox is made from a copy of the host's mounts and says why" {
  local a
  mkdir -p "$DSEC_RUN/layers"
  chmod 700 "$DSEC_RUN" "$DSEC_RUN/layers"
  # a file where the template's directory goes
  touch "$DSEC_RUN/layers/rootns"
  a=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.mount_ns == "own" and (.mount_ns_own | test("rootns"))'
  run -0 --separate-stderr dsec-run exec "$a" -- sh -c 'ls /proc/1 >/dev/null && echo ok'
  out_jq '.stdout == "ok\n"'
  # a template this boot's kernel refused is not tried again before the
  # next boot
  rm "$DSEC_RUN/layers/rootns"
  mkdir -m 700 "$DSEC_RUN/layers/rootns"
  printf '{"boot_id":"%s","errno":1,"error":"refused here"}' \
    "$(cat /proc/sys/kernel/random/boot_id)" >"$DSEC_RUN/layers/rootns/refused"
  a=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.mount_ns == "own" and (.mount_ns_own | startswith("refused here (noted in"))'
  ! mountpoint -q "$DSEC_RUN/layers/rootns/mnt"
  # a note of another boot is not
  echo '{"boot_id":"another","errno":1,"error":"refused here"}' \
    >"$DSEC_RUN/layers/rootns/refused"
  a=$(sb_create)
  run -0 --separate-stderr dsec-run inspect "$a"
  jq_ok '.mount_ns == "template"'
  mountpoint -q "$DSEC_RUN/layers/rootns/mnt"
}

@test "an image's own /proc/self/stat does not steer init, which retitles itself before the sandbox's root is its own" {
  local d id init
  # fields 48 and 49 of a stat line are where a process's command line
  # is: here an address nothing is mapped at
  d=$BATS_TEST_TMPDIR/statfake
  mkdir -p "$d/proc/self"
  {
    printf '1 (dsec) S'
    for i in $(seq 4 47); do printf ' 0'; done
    printf ' 4096 8192 0 0 0\n'
  } >"$d/proc/self/stat"
  dsec-layer create --dir "$d" --name test/statfake@1 >/dev/null
  id=$(sb_create --layer test/statfake@1)
  run -0 --separate-stderr dsec-run inspect "$id"
  init=$(jq -r .init_pid <<<"$output")
  [[ $(tr '\0' ' ' <"/proc/$init/cmdline") == "dsec-init "* ]]
  run -0 --separate-stderr dsec-run exec "$id" -- cat /proc/1/cmdline
  out_jq '.stdout | startswith("dsec-init")'
}

@test "run --attach prints the raw output and passes the status" {
  run -5 --separate-stderr dsec-run run --rm --attach --image busybox:1 -- \
    sh -c 'echo raw out; echo raw err >&2; exit 5'
  [ "$output" = "raw out" ]
  [ "$stderr" = "raw err" ]
  run -0 --separate-stderr dsec-run run --rm --attach --image busybox:1 -- echo '{"not": "json"}'
  [ "$output" = '{"not": "json"}' ]
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$output" ]
}

@test "run --result FILE writes the JSON result; without --rm the sandbox stays" {
  run -0 --separate-stderr dsec-run run --result "$BATS_TEST_TMPDIR/res.json" \
    --image busybox:1 --env X=1 -- sh -c 'echo $X'
  sb_track
  out_jq '.stdout == "1\n"'
  [ "$(jq -c . "$BATS_TEST_TMPDIR/res.json")" = "$(jq -c . <<<"$output")" ]
  local id
  id=$(jq -r .id <<<"$output")
  [ "$(sb_state "$id")" = running ]
  # with --attach the file still has JSON
  run -0 --separate-stderr dsec-run run --rm --attach --result "$BATS_TEST_TMPDIR/res2.json" \
    --image busybox:1 -- echo attached
  [ "$output" = attached ]
  jq -e '.stdout == "attached\n" and .exit_code == 0' "$BATS_TEST_TMPDIR/res2.json"
}

@test "run --timeout: 124 and the sandbox removed with --rm" {
  run -124 --separate-stderr timeout 20 dsec-run run --rm --timeout 0.5 --image busybox:1 -- sleep 30
  out_jq '.timed_out == true'
  jq -r .id <<<"$output" >>"$SB_IDS"
  sb_gone "$(jq -r .id <<<"$output")"
}

# --- the fncall backend -------------------------------------------------------

@test "fncall: each call gets an empty /tmp" {
  local id
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo x > /tmp/call1; ls /tmp'
  out_jq '.stdout == "call1\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- ls -A /tmp
  out_jq '.stdout == ""'
  run -1 --separate-stderr dsec-run exec "$id" -- cat /tmp/call1
}

@test "fncall: the root is read-only" {
  local id
  id=$(sb_create --backend fncall)
  run -1 --separate-stderr dsec-run exec "$id" -- touch /written
  out_jq '.stderr | test("Read-only")'
  run -1 --separate-stderr dsec-run exec "$id" -- sh -c 'echo x > /etc/passwd'
  run -1 --separate-stderr dsec-run exec "$id" -- ls /written
  # its masks are /dev/null, and inspect says their opens are not recorded
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c '[ -c /proc/kcore ] || [ ! -e /proc/kcore ]'
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq '.audit_unavailable | test("fncall")'
}

@test "fncall: a background process of one call is gone in the next" {
  local id
  id=$(sb_create --backend fncall)
  # (until the child has exec'd, ps calls it sh)
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- sh -c \
    'sleep 100 & until ps -o comm | grep -qx sleep; do sleep 0.05; done; ps -o comm'
  out_jq '.stdout | split("\n") | index("sleep") != null'
  run -0 --separate-stderr dsec-run exec "$id" -- ps -o comm
  out_jq '.stdout | split("\n") | index("sleep") == null'
}

@test "fncall: the call's PID 1 is its reaper, the command its child" {
  local id
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo $$; ps -o pid,comm'
  # the command is not PID 1 (whose signals the kernel filters): kill $$
  # ends it as anywhere
  out_jq '.stdout | startswith("2\n")'
  out_jq '.stdout | test("\n *1 dsec-call\n")'
  # the sandbox's init is not visible from the call
  out_jq '.stdout | test("dsec-init") | not'
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq '.backend == "fncall" and .spec.backend == "fncall"'
}

# warm_calls ID: the pids of the fncall sandbox ID's processes called
# dsec-call (seen from the host, through its cgroup)
warm_calls() {
  local p
  for p in $(cat "$(cg_file "$1" pids cgroup.procs)"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dsec-call ] && echo "$p"
  done
  return 0
}

# wait_warm ID [OLD]...: polls (10 s) until ID has exactly one process
# called dsec-call but the OLD ones (a call's reaper is one until it has
# exited, after its call was answered), the same in two polls 0.2 s
# apart: the call made ahead; its pid
wait_warm() {
  local id=$1 i w last=
  shift
  for ((i = 0; i < 50; i++)); do
    w=$(warm_calls "$id" | grep -vxF -f <(printf '%s\n' "$@" 0))
    if [ "$(grep -c . <<<"$w")" -eq 1 ]; then
      [ "$w" = "$last" ] && { echo "$w"; return 0; }
      last=$w
    else
      last=
    fi
    sleep 0.2
  done
  echo "no single call made ahead in $id: ${w:-none}" >&2
  return 1
}

@test "fncall: the next call's process is made ahead while a call runs, serves one call; a kill or a request too big for it is survived" {
  local id w1 w2 w3 big
  id=$(sb_create --backend fncall --workdir /work)
  # none before the first call
  [ -z "$(warm_calls "$id")" ]
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo x >/tmp/a; echo y >a; echo $$'
  out_jq '.stdout == "2\n"'
  w1=$(wait_warm "$id")
  # it serves the next call: a fresh /tmp and working directory, PID 1 the
  # reaper, and it is gone after
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'ls -A /tmp; ls -A; pwd; echo $$; cat /proc/1/comm'
  out_jq '.stdout == "/work\n2\ndsec-call\n"'
  w2=$(wait_warm "$id" "$w1")
  # it served that call: gone (or its pid taken by another process)
  for _ in $(seq 50); do
    [ "$(cat "/proc/$w1/comm" 2>/dev/null)" = dsec-call ] || break
    sleep 0.1
  done
  [ "$(cat "/proc/$w1/comm" 2>/dev/null)" != dsec-call ]
  # a request bigger than its socket takes (wmem_default, 208 KiB unless
  # tuned) starts as calls did before it, and the one made ahead stays for
  # the next
  big=$(head -c 100000 /dev/zero | tr '\0' a)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo ${#1} ${#2} ${#3}' _ "$big" "$big" "$big"
  out_jq '.stdout == "100000 100000 100000\n"'
  if [ "$(cat /proc/sys/net/core/wmem_default)" -lt 300000 ]; then
    [ "$(wait_warm "$id")" = "$w2" ]
  else
    w2=$(wait_warm "$id" "$w2")
  fi
  # kill ID ends it with everything else; the next call starts as it
  # comes, and makes another
  run -0 --separate-stderr dsec-run kill "$id"
  for _ in $(seq 50); do [ -z "$(warm_calls "$id")" ] && break; sleep 0.1; done
  [ -z "$(warm_calls "$id")" ]
  run -0 --separate-stderr dsec-run exec "$id" -- cat /proc/1/comm
  out_jq '.stdout == "dsec-call\n"'
  w3=$(wait_warm "$id" "$w2")
  # whatever the signal: a stopped one would hold up the next call
  run -0 --separate-stderr dsec-run kill "$id" STOP
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- echo ok
  out_jq '.stdout == "ok\n"'
  wait_warm "$id" "$w3" >/dev/null
}

@test "fncall: the call made ahead has its seccomp filter before its request; its call's denials and start are recorded with the call's seq" {
  local id w
  id=$(sb_create --backend fncall)
  run -0 --separate-stderr dsec-run exec "$id" -- true
  w=$(wait_warm "$id")
  # filtered, without new privileges, before any request
  grep -qx 'Seccomp:[[:space:]]*2' "/proc/$w/status"
  grep -qx 'NoNewPrivs:[[:space:]]*1' "/proc/$w/status"
  # its call: one filter (not a second one on top), whose listener the
  # supervisor has: a mount is refused and recorded, and so is the start
  run -0 --separate-stderr dsec-run exec "$id" --seq 7 -- sh -c \
    'grep Seccomp_filters /proc/self/status; mount -t tmpfs x /mnt || echo refused'
  out_jq '.stdout == "Seccomp_filters:\t1\nrefused\n"'
  run -0 --separate-stderr dsec-run events "$id"
  jq -se 'any(.[]; .type == "denied" and .syscall == "mount" and .seq == 7)' <<<"$output"
  jq -se 'any(.[]; .type == "process" and .path == "/bin/sh" and .seq == 7)' <<<"$output"
  # it was that call's: the next one is made ahead
  wait_warm "$id" "$w" >/dev/null
}

@test "fncall: a call in another directory than the spec's starts as it comes; the call made ahead waits for one in the spec's" {
  local id w
  # the spec's working directory is a clean tmpfs in every call made in
  # it, which a call made ahead has mounted before its request
  id=$(sb_create --backend fncall --workdir /etc)
  run -0 --separate-stderr dsec-run exec "$id" -- true
  w=$(wait_warm "$id")
  # in / and /tmp a call sees the image's /etc, not that tmpfs
  run -0 --separate-stderr dsec-run exec "$id" --workdir / -- sh -c 'pwd; grep -c ^root: /etc/passwd'
  out_jq '.stdout == "/\n1\n"'
  run -0 --separate-stderr dsec-run exec "$id" --workdir /tmp -- sh -c 'pwd; grep -c ^root: /etc/passwd'
  out_jq '.stdout == "/tmp\n1\n"'
  # in another directory, a clean one of its own
  run -0 --separate-stderr dsec-run exec "$id" --workdir /usr -- sh -c 'pwd; ls -A; touch f && echo written'
  out_jq '.stdout == "/usr\nwritten\n"'
  # none of them took the call made ahead; a call in /etc does
  [ "$(wait_warm "$id")" = "$w" ]
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'pwd; ls -A; touch f && echo written'
  out_jq '.stdout == "/etc\nwritten\n"'
  wait_warm "$id" "$w" >/dev/null
}

@test "fncall: where the kernel refuses a listener, calls made ahead and as they come answer their command's status; denials fail without one" {
  local id w rec
  gcc -O2 -o "$BATS_TEST_TMPDIR/oldkernel" "$DSEC_SRCDIR/tests/helpers/oldkernel.c"
  run --separate-stderr "$BATS_TEST_TMPDIR/oldkernel" listener dsec-run create --image busybox:1 --backend fncall
  [ "$status" -ne 77 ] || skip "oldkernel does not know this architecture"
  [ "$status" -eq 0 ] || { echo "create: $output $stderr" >&2; false; }
  id=$(jq -r .id <<<"$output" | tee -a "$SB_IDS")
  # the first call starts as it comes
  run -3 --separate-stderr dsec-run exec "$id" -- sh -c 'echo hi; exit 3'
  out_jq '.stdout == "hi\n" and .exit_code == 3'
  w=$(wait_warm "$id")
  # (no listener: its filter is the one without)
  grep -qx 'Seccomp:[[:space:]]*2' "/proc/$w/status"
  # the call made ahead answers its command's status, not its own
  run -3 --separate-stderr dsec-run exec "$id" -- sh -c 'echo hi; exit 3'
  out_jq '.stdout == "hi\n" and .exit_code == 3'
  wait_warm "$id" "$w" >/dev/null
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'mount -t tmpfs x /mnt 2>/dev/null || echo refused'
  out_jq '.stdout == "refused\n"'
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

@test "the root's layers are given to overlayfs as descriptors, and as mounts at run/lower where the kernel refuses descriptors; either way the top layer wins" {
  local d id oldk=$BATS_TEST_TMPDIR/oldkernel
  gcc -O2 -o "$oldk" "$DSEC_SRCDIR/tests/helpers/oldkernel.c"
  # a layer over the image: one file of busybox's replaced, one added
  d=$BATS_TEST_TMPDIR/over
  mkdir -p "$d/bin" "$d/etc"
  printf '#!/bin/sh\necho from the layer\n' >"$d/bin/arch"
  chmod 755 "$d/bin/arch"
  echo added >"$d/etc/added"
  dsec-layer create --dir "$d" --name test/over@1 >/dev/null
  for how in fd path; do
    if [ "$how" = fd ]; then
      id=$(sb_create --layer test/over@1)
    else
      run --separate-stderr "$oldk" fdlayers dsec-run create --image busybox:1 --layer test/over@1
      [ "$status" -ne 77 ] || skip "oldkernel does not know this architecture"
      [ "$status" -eq 0 ] || { echo "create: $output $stderr" >&2; false; }
      id=$(jq -r .id <<<"$output" | tee -a "$SB_IDS")
    fi
    # no directory is made for a layer where descriptors are taken
    # (Linux 6.15: detached mounts as layers, O_PATH descriptors)
    if [ "$how" = fd ]; then
      if kernel_at_least 6 15; then [ ! -e "$DSEC_RUN/$id/lower" ]; fi
    else
      [ -d "$DSEC_RUN/$id/lower/0" ] && [ -d "$DSEC_RUN/$id/lower/1" ]
    fi
    run -0 --separate-stderr dsec-run exec "$id" -- sh -c \
      '/bin/arch; cat /etc/added; ls /bin/busybox; echo w >/etc/added; cat /etc/added'
    out_jq '.stdout == "from the layer\nadded\n/bin/busybox\nw\n"'
    # what the sandbox wrote is in its upper layer, not in a layer
    [ "$(cat "$DSEC_ROOT/sandboxes/$id/upper/etc/added")" = w ]
    run -0 --separate-stderr dsec-run rm "$id"
  done
  # fncall (no upper layer, an empty lower one under a single layer)
  for how in fd path; do
    if [ "$how" = fd ]; then
      id=$(sb_create --backend fncall)
    else
      run -0 --separate-stderr "$oldk" fdlayers dsec-run create --image busybox:1 --backend fncall
      id=$(jq -r .id <<<"$output" | tee -a "$SB_IDS")
    fi
    [ ! -e "$DSEC_ROOT/sandboxes/$id/upper" ]
    run -1 --separate-stderr dsec-run exec "$id" -- sh -c 'ls /bin/busybox && : >/x'
    out_jq '.stdout == "/bin/busybox\n" and (.stderr | test("Read-only"))'
    run -0 --separate-stderr dsec-run rm "$id"
  done
}

@test "fncall: a call's status and signal are its command's; what it left is gone when it is answered" {
  local id
  id=$(sb_create --backend fncall --user 1000:1000)
  run -7 --separate-stderr dsec-run exec "$id" -- sh -c 'exit 7'
  out_jq '.exit_code == 7 and .signal == null'
  run -137 --separate-stderr dsec-run exec "$id" -- sh -c 'kill -9 $$'
  out_jq '.exit_code == 137 and .signal == 9'
  run -143 --separate-stderr dsec-run exec "$id" -- sh -c 'kill -TERM $$'
  out_jq '.exit_code == 143 and .signal == 15'
  # a background process of the sandbox's user (not the reaper's): gone
  # by the time the answer comes, not only in the next call
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- sh -c \
    'sleep 1234 & until ps -o comm | grep -qx sleep; do sleep 0.05; done; echo started'
  out_jq '.stdout == "started\n"'
  # (the sandbox's processes, from its cgroup: no sleep among them)
  local procs p
  procs=$(cg_file "$id" pids cgroup.procs)
  grep -q . "$procs"
  for p in $(cat "$procs"); do
    [ "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" != "sleep 1234 " ]
  done
}

# --- kill ----------------------------------------------------------------------

@test "kill ID kills (SIGKILL) a background process of an earlier exec" {
  local id
  id=$(sb_create)
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- sh -c 'sleep 100 >/dev/null 2>&1 &'
  sb_wait_proc "$id" sleep
  run -0 --separate-stderr dsec-run kill "$id"
  one_line
  out_jq --arg id "$id" '.type == "killed" and .id == $id and .signal == 9'
  sb_wait_no_proc "$id" sleep
  # the sandbox itself lives on
  [ "$(sb_state "$id")" = running ]
  run -0 --separate-stderr dsec-run exec "$id" -- true
}

@test "kill ID TERM sends SIGTERM" {
  local id
  id=$(sb_create)
  # a process that records the signal it got, and says when it listens
  cat >"$BATS_TEST_TMPDIR/trap.sh" <<'EOF'
trap 'echo got-term > /root/sig; exit 0' TERM
touch /root/ready
while :; do sleep 0.1; done
EOF
  run -0 --separate-stderr timeout 20 dsec-run exec --stdin "$BATS_TEST_TMPDIR/trap.sh" "$id" -- \
    sh -c 'cat > /root/trap.sh; sh /root/trap.sh >/dev/null 2>&1 &'
  local i
  for i in $(seq 100); do
    [ -f "$DSEC_ROOT/sandboxes/$id/upper/root/ready" ] && break
    sleep 0.1
  done
  [ -f "$DSEC_ROOT/sandboxes/$id/upper/root/ready" ]
  run -0 --separate-stderr dsec-run kill "$id" TERM
  out_jq '.signal == 15'
  for i in $(seq 50); do
    [ -f "$DSEC_ROOT/sandboxes/$id/upper/root/sig" ] && break
    sleep 0.1
  done
  [ -f "$DSEC_ROOT/sandboxes/$id/upper/root/sig" ] ||
    { echo "the trap did not run" >&2; false; }
  run -0 --separate-stderr dsec-run exec "$id" -- cat /root/sig
  out_jq '.stdout == "got-term\n"'
  run -0 --separate-stderr dsec-run kill "$id" SIGKILL
  out_jq '.signal == 9'
  run -0 --separate-stderr dsec-run kill "$id" 15
  out_jq '.signal == 15'
  run -2 --separate-stderr dsec-run kill "$id" NOSUCHSIG
  stderr_has "NOSUCHSIG"
}

# --- events ------------------------------------------------------------------------

@test "events shows the created and exec records" {
  local id
  id=$(sb_create)
  run -2 --separate-stderr dsec-run exec --seq 1 "$id" -- sh -c 'exit 2'
  run -0 --separate-stderr dsec-run events "$id"
  for l in "${lines[@]}"; do
    jq -e --arg id "$id" '.sandbox == $id and (.type | type == "string")
      and (.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)$"))' <<<"$l"
  done
  jq -e '.type == "created"' <<<"${lines[0]}"
  out_jq -s 'any(.[]; .type == "exec" and .seq == 1 and .exit_code == 2
                     and .argv == ["sh", "-c", "exit 2"])'
}

@test "events --follow ends when the sandbox is removed" {
  local id
  id=$(sb_create)
  bg timeout 20 dsec-run events --follow "$id" >"$BATS_TEST_TMPDIR/ev.out" 2>&1
  local follower=$BG i
  for i in $(seq 100); do
    grep -q '"created"' "$BATS_TEST_TMPDIR/ev.out" && break
    sleep 0.1
  done
  grep -q '"created"' "$BATS_TEST_TMPDIR/ev.out" ||
    { echo "events --follow printed nothing" >&2; false; }
  run -0 --separate-stderr dsec-run exec "$id" -- echo followed
  # the follower has printed the exec before the sandbox goes
  for i in $(seq 100); do
    grep -q '"followed"' "$BATS_TEST_TMPDIR/ev.out" && break
    sleep 0.1
  done
  grep -q '"followed"' "$BATS_TEST_TMPDIR/ev.out" ||
    { echo "events --follow did not print the exec" >&2; false; }
  run -0 --separate-stderr dsec-run rm "$id"
  local rc=0
  wait "$follower" || rc=$?
  [ "$rc" -eq 0 ] # 124 would be timeout's: it did not end
  jq -e -s '.[0].type == "created" and any(.[]; .type == "exec" and .argv == ["echo", "followed"])' \
    "$BATS_TEST_TMPDIR/ev.out"
}

# --- limits ----------------------------------------------------------------------------

@test "--memory: a memory hog is OOM-killed, the sandbox survives" {
  local id
  id=$(sb_create --memory 32)
  local mem
  mem=$(cg_file "$id" memory "")
  if [ -f "${mem}memory.max" ]; then
    [ "$(cat "${mem}memory.max")" = $((32 << 20)) ]
  else
    [ "$(cat "${mem}memory.limit_in_bytes")" = $((32 << 20)) ]
  fi
  run -137 --separate-stderr timeout 60 dsec-run exec "$id" -- \
    sh -c 'x=$(head -c 200000000 /dev/zero | tr "\0" a); echo ${#x}'
  out_jq '.exit_code == 137 and .signal == 9 and .oom_killed == true and .stdout == ""'
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s 'any(.[]; .type == "limit" and .limit == "memory")'
  [ "$(sb_state "$id")" = running ]
  run -0 --separate-stderr dsec-run exec "$id" -- echo alive
  out_jq '.stdout == "alive\n" and .oom_killed == false'
}

@test "--pids: a fork loop fails to fork, the sandbox stays usable" {
  local id
  id=$(sb_create --pids 20)
  [ "$(cat "$(cg_file "$id" pids pids.max)")" = 20 ]
  run --separate-stderr timeout 60 dsec-run exec "$id" -- \
    sh -c 'for i in $(seq 100); do sleep 10 & done; echo done'
  [ "$status" -ne 0 ] || out_jq '.stderr != ""'
  out_jq '.stderr | test("fork|Resource temporarily unavailable|Try again")'
  out_jq '.timed_out == false'
  local n
  n=$(cat "$(cg_file "$id" pids pids.current)" 2>/dev/null || echo 0)
  [ "$n" -le 20 ]
  if [ -f "$(cg_file "$id" pids pids.events)" ]; then
    run -0 --separate-stderr dsec-run events "$id"
    out_jq -s 'any(.[]; .type == "limit" and .limit == "pids" and .refused_forks > 0)'
  fi
  # still usable: the shell's exit left room for one more command ...
  run -0 --separate-stderr dsec-run exec "$id" -- echo usable
  out_jq '.stdout == "usable\n"'
  # ... and after kill, room for pipelines again
  run -0 --separate-stderr dsec-run kill "$id"
  sb_wait_no_proc "$id" sleep
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'seq 3 | wc -l'
  out_jq '.stdout | test("^ *3\n$")'
}

@test "--cpus 0.5 is the cgroup's CPU quota" {
  local id
  id=$(sb_create --cpus 0.5)
  local f
  f=$(cg_file "$id" cpu "")
  if [ -f "${f}cpu.max" ]; then
    [ "$(cat "${f}cpu.max")" = "50000 100000" ]
  else
    [ "$(cat "${f}cpu.cfs_quota_us")" = 50000 ]
    [ "$(cat "${f}cpu.cfs_period_us")" = 100000 ]
  fi
  run -0 --separate-stderr dsec-run inspect "$id"
  out_jq '.limits.cpus == 0.5'
  # without --cpus there is no quota
  id=$(sb_create)
  f=$(cg_file "$id" cpu "")
  if [ -f "${f}cpu.max" ]; then
    [[ "$(cat "${f}cpu.max")" == max* ]]
  else
    [ "$(cat "${f}cpu.cfs_quota_us")" = -1 ]
  fi
}

# --- robustness ------------------------------------------------------------------------

@test "an idle sandbox's supervisor and init map neither libarchive nor libcrypto" {
  # both are loaded on first use: their relocated pages would be memory
  # every sandbox carries (dsec-run(1), NEWS)
  local id sup init
  sb_create >/dev/null # the first create may convert the image's layers
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- true
  sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
  init=$(dsec-run inspect "$id" | jq -r .init_pid)
  [ -r "/proc/$sup/maps" ] && [ -r "/proc/$init/maps" ]
  run -1 grep -E 'libarchive|libcrypto|libxml2|libicu' "/proc/$sup/maps" \
    "/proc/$init/maps"
}

@test "kill -9 of the supervisor: ps --all says died, rm cleans everything" {
  local id sup init
  id=$(sb_create)
  sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
  init=$(dsec-run inspect "$id" | jq -r .init_pid)
  kill -9 "$sup"
  sb_wait_state "$id" died
  run -0 --separate-stderr dsec-run ps
  [ -z "$output" ]
  run -0 --separate-stderr dsec-run ps --all
  out_jq --arg id "$id" '.id == $id and .state == "died" and .state != "running"'
  run -125 --separate-stderr timeout 20 dsec-run exec "$id" -- true
  stderr_has "died"
  run -0 --separate-stderr dsec-run rm "$id"
  out_jq --arg id "$id" '.type == "removed" and .id == $id'
  sb_gone "$id"
  sb_dead "$init"
  [ -z "$(sb_pids)" ]
}

@test "kill -9 of the sandbox's init: died soon after, rm cleans everything" {
  local id sup init
  id=$(sb_create)
  sup=$(dsec-run inspect "$id" | jq -r .supervisor_pid)
  init=$(dsec-run inspect "$id" | jq -r .init_pid)
  kill -9 "$init"
  sb_wait_state "$id" died 100
  run -0 --separate-stderr dsec-run ps --all
  out_jq --arg id "$id" '.id == $id and .state == "died" and (.cause | test("init"))'
  run -125 --separate-stderr timeout 20 dsec-run exec "$id" -- true
  run -0 --separate-stderr dsec-run events "$id"
  out_jq -s 'any(.[]; .type == "died")'
  run -0 --separate-stderr dsec-run rm "$id"
  sb_gone "$id"
  sb_dead "$sup"
  [ -z "$(sb_pids)" ]
}

@test "kill -9 of dsec-run create at any moment: ps --all tells the truth, rm --force cleans" {
  local d p
  for d in 0 0.001 0.002 0.003 0.005 0.007 0.01 0.012 0.015 0.02 0.025 0.03 \
    0.04 0.05 0.06 0.08 0.1 0.15 0.2 0.3; do
    dsec-run create --image busybox:1 >/dev/null 2>&1 3>&- &
    p=$!
    sleep "$d"
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  sb_track
  # a supervisor whose create was killed carries on: wait for it to settle
  local i
  for i in $(seq 100); do
    dsec-run ps --all | jq -e 'select(.state == "creating")' >/dev/null || break
    sleep 0.1
  done
  run -0 --separate-stderr dsec-run ps --all
  local listed on_disk
  listed=$(jq -r .id <<<"$output" | sort)
  on_disk=$(ls "$DSEC_ROOT/sandboxes" | grep '^sb-' | sort || true)
  # every sandbox on disk must be listed (checked last, after rm --force)
  local invisible
  invisible=$(comm -13 <(echo "$listed") <(echo "$on_disk"))
  local rec id state sup
  while read -r rec; do
    [ -n "$rec" ] || continue
    id=$(jq -r .id <<<"$rec")
    state=$(jq -r .state <<<"$rec")
    sup=$(jq -r '.supervisor_pid // 0' <<<"$rec")
    case $state in
      running)
        sb_alive "$sup"
        dsec-run exec "$id" -- true >/dev/null
        ;;
      died)
        [ "$sup" -eq 0 ] || sb_dead "$sup"
        ;;
      *)
        echo "$id is $state" >&2
        false
        ;;
    esac
  done <<<"$output"
  # shellcheck disable=SC2086
  [ -z "$on_disk" ] || run --separate-stderr dsec-run rm --force $on_disk
  local rm_status=$status rm_stderr=$stderr
  sb_assert_clean
  [ -z "$invisible" ] || {
    echo "on disk but not in ps --all: $invisible" >&2
    false
  }
  [ "$rm_status" -eq 0 ] || { echo "rm --force: $rm_stderr" >&2; false; }
  # what may be left is a creation killed before its directory got its
  # name: .tmp-sb-*, never listed, no process of it left (above), and
  # dsec-reap's once a minute old
  local left
  left=$(ls -A "$DSEC_ROOT/sandboxes" | grep -v '^\.tmp-sb-' || true)
  [ -z "$left" ] || { echo "left after rm --force: $left" >&2; false; }
  if [ -n "$(ls -A "$DSEC_ROOT/sandboxes")" ]; then
    touch -d '2 minutes ago' "$DSEC_ROOT"/sandboxes/.tmp-sb-*
    run -0 --separate-stderr dsec-reap
    out_jq -s 'any(.[]; .what == "tmp" and .action == "removed")'
    [ -z "$(ls -A "$DSEC_ROOT/sandboxes")" ]
  fi
}

@test "kill -9 of dsec-run create while it writes the sandbox's files leaves nothing visible" {
  command -v strace >/dev/null || skip "needs strace"
  local w
  # renameat puts the spec, environment and state files in place under a
  # temporary directory name, then rename the directory itself: kill
  # create at each of them (strace counts each syscall on its own)
  for w in 1 2 3; do
    run -137 strace -o /dev/null -e trace=renameat,renameat2 \
      -e inject=renameat,renameat2:signal=KILL:when=$w \
      dsec-run create --image busybox:1
  done
  run -137 strace -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=1 \
    dsec-run create --image busybox:1
  sb_track
  # a half-made sandbox never shows under its id
  [ "$(ls "$DSEC_ROOT/sandboxes" | grep -c '^sb-')" -eq 0 ]
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$output" ]
  # the supervisors that waited for "go" left without making anything
  sb_assert_clean
  # what is left are temporary directories (dsec-reap removes them)
  [ "$(ls -A "$DSEC_ROOT/sandboxes" | grep -vc '^\.tmp-sb-')" -eq 0 ]
}

@test "rm --force while the supervisor is still setting up leaves no cgroup" {
  command -v strace >/dev/null || skip "needs strace"
  # materialise the image's layer first: the slow part is then only the
  # supervisor, held for 3 s at its first clone (stage1), which comes
  # after it made the cgroups
  run -0 --separate-stderr dsec-run run --rm --image busybox:1 -- true
  bg strace -f -o /dev/null -e trace=clone \
    -e inject=clone:delay_enter=3000000:when=1 \
    dsec-run create --image busybox:1 >/dev/null 2>&1
  local id="" i
  for i in $(seq 300); do
    id=$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null | head -1)
    [ -n "$id" ] && [ -n "$(ls -d /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null)" ] && break
    sleep 0.05
  done
  echo "$id" >>"$SB_IDS"
  [ -n "$(sb_cgroups)" ] # the supervisor is in its setup
  run -0 --separate-stderr dsec-run ps --all
  out_jq --arg id "$id" '.id == $id and .state == "creating"'
  run -0 --separate-stderr dsec-run rm --force "$id"
  for i in $(seq 20); do
    [ -z "$(sb_cgroups)" ] && break
    sleep 0.1
  done
  sb_gone "$id"
  # strace holds a traced child that is in its injected delay stopped,
  # SIGKILL pending, until the delay ends: the supervisor's helper that
  # copies the template (killed with the supervisor) and the front, which
  # waits for the supervisor's end of its pipe, go within 3 s
  for i in $(seq 100); do
    [ -z "$(sb_pids)" ] && break
    sleep 0.1
  done
  [ -z "$(sb_pids)" ]
}

# --- scale --------------------------------------------------------------------------

# create_many N DIR: N concurrent creates; DIR/i.out, DIR/i.err, DIR/i.rc
create_many() {
  local n=$1 dir=$2 i
  local -a pids=()
  mkdir -p "$dir"
  for ((i = 1; i <= n; i++)); do
    dsec-run create --image busybox:1 >"$dir/$i.out" 2>"$dir/$i.err" 3>&- &
    pids[i]=$!
  done
  for ((i = 1; i <= n; i++)); do
    local rc=0
    wait "${pids[i]}" || rc=$?
    echo "$rc" >"$dir/$i.rc"
  done
}

@test "64 concurrent creates all succeed with distinct ids" {
  local dir=$BATS_TEST_TMPDIR/c i
  create_many 64 "$dir"
  sb_track
  for i in $(seq 64); do
    [ "$(cat "$dir/$i.rc")" -eq 0 ] || { cat "$dir/$i.err" >&2; false; }
    jq -e '.state == "running"' "$dir/$i.out" >/dev/null
  done
  [ "$(cat "$dir"/*.out | jq -r .id | sort -u | wc -l)" -eq 64 ]
  run -0 --separate-stderr dsec-run ps
  [ "${#lines[@]}" -eq 64 ]
  # shellcheck disable=SC2046
  run -0 --separate-stderr dsec-run rm $(cat "$dir"/*.out | jq -r .id)
  [ "${#lines[@]}" -eq 64 ]
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes")" ]
  sb_assert_clean
}

@test "200 sandboxes alive at once all exec, then all are removed" {
  local dir=$BATS_TEST_TMPDIR/c b i
  for b in $(seq 0 12); do
    local n=16
    [ $((b * 16 + n)) -le 200 ] || n=$((200 - b * 16))
    create_many "$n" "$dir/$b"
  done
  sb_track
  local bad
  bad=$(cat "$dir"/*/*.rc | grep -cvx 0 || true)
  [ "$bad" -eq 0 ] || { cat "$dir"/*/*.err | sort | uniq -c >&2; false; }
  local ids
  ids=$(cat "$dir"/*/*.out | jq -r .id)
  [ "$(sort -u <<<"$ids" | wc -l)" -eq 200 ]
  run -0 --separate-stderr dsec-run ps
  [ "${#lines[@]}" -eq 200 ]
  out_jq -s 'all(.[]; .state == "running")'
  # past fs.fanotify.max_user_groups, opens of masked files are still
  # recorded: each sandbox's group counts against its own host uid
  out_jq -s 'all(.[]; has("audit_unavailable") | not)'
  # every one of them runs a command, 16 at a time
  local -a pids=()
  local id k=0 failed=0
  for id in $ids; do
    dsec-run exec "$id" -- true >"$dir/$id.res" 2>&1 3>&- &
    pids+=($!)
    if [ $((++k % 16)) -eq 0 ]; then
      for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
      pids=()
    fi
  done
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  [ "$failed" -eq 0 ]
  for id in $ids; do
    jq -e '.exit_code == 0' "$dir/$id.res" >/dev/null
  done
  # shellcheck disable=SC2086
  run -0 --separate-stderr dsec-run rm $ids
  [ "${#lines[@]}" -eq 200 ]
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$output" ]
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes")" ]
  sb_assert_clean
}

@test "core scheduling: a latency-class sandbox gets a cookie of its own (or the record says why not); best-effort gets none" {
  local id be smt rec
  id=$(sb_create)
  rec=$(dsec-run inspect "$id")
  smt=$(cat /sys/devices/system/cpu/smt/active 2>/dev/null || echo "")
  if jq -e '.core_sched == true' <<<"$rec"; then
    # init and a command it runs have the same non-zero cookie, which is
    # not the test's own (PR_SCHED_CORE_GET, scope thread)
    run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'sleep 30 >/dev/null 2>&1 &'
    cookie() {
      python3 -c 'import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
c = ctypes.c_ulong(0)
if libc.prctl(62, 0, int(sys.argv[1]), 0, ctypes.byref(c)) != 0:
    sys.exit("prctl: %d" % ctypes.get_errno())
print(c.value)' "$1"
    }
    local ipid init mine child
    ipid=$(jq -r .init_pid <<<"$rec")
    init=$(cookie "$ipid")
    mine=$(cookie $$)
    [ "$init" != 0 ] && [ "$init" != "$mine" ]
    child=$(awk '{ print $1 }' "/proc/$ipid/task/$ipid/children")
    [ "$(cookie "$child")" = "$init" ]
  else
    jq -e '.core_sched_unavailable | type == "string" and length > 0' <<<"$rec"
    # this host says why: no SMT, or a kernel without core scheduling
    if [ "$smt" = 0 ]; then
      jq -e '.core_sched_unavailable | test("no SMT siblings")' <<<"$rec"
    fi
  fi
  # best-effort sandboxes share the default cookie: neither field
  be=$(echo '{"image":"busybox:1","resources":{"class":"besteffort"}}' |
    dsec-run create --spec - | jq -r .id)
  echo "$be" >>"$SB_IDS"
  dsec-run inspect "$be" | jq -e 'has("core_sched") or has("core_sched_unavailable") | not'
}
