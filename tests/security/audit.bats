#!/usr/bin/env bats
# The audit log (events.jsonl) under a flood from inside the sandbox
# (issue #12): it keeps to its byte budget (spec audit.max_bytes), says
# when it stopped and what it dropped, bounds argv, and a flood neither
# hides the first start of a program, the first denial of a syscall or
# the first refusal of a host, nor the records of the sandbox's life.
# Streamed output keeps to the exec's output cap.
#
# Nothing here depends on timing: a flood that must spend the budget is
# large enough to spend it within the first second's rate limit.
#
# Needs root (dsec-run create does), gcc with a static glibc, python3.

bats_require_minimum_version 1.5.0

: "${DSEC_SRCDIR:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)}"
load ../helpers/common
load helpers

setup_file() {
  [ "$(id -u)" -eq 0 ] || skip "needs root"
  sec_setup_attack
}

teardown_file() {
  sec_teardown_file
}

setup() {
  require_root
  sec_setup
}

teardown() {
  sec_teardown
}

# --- helpers of this file ----------------------------------------------------

# budget_spec MAX [MORE-JSON]: a spec file with audit.max_bytes MAX (and the
# fields of MORE-JSON, an object), its path in $SPEC.
budget_spec() {
  SPEC="$BATS_TEST_TMPDIR/spec.json"
  jq -n --argjson max "$1" --argjson more "${2:-{\}}" \
    '{"image":"busybox","audit":{"max_bytes":$max}} + $more' >"$SPEC"
}

# The path of $SB's events.jsonl, and its size.
events_file() {
  echo "$DSEC_ROOT/sandboxes/$SB/events.jsonl"
}
events_size() {
  stat -c %s "$(events_file)"
}

# assert_within MAX: events.jsonl holds at most MAX bytes, each line one
# JSON object.
assert_within() {
  local size
  size=$(events_size)
  [ "$size" -le "$1" ] || {
    echo "events.jsonl holds $size bytes, past its budget of $1" >&2
    return 1
  }
  jq -e -s 'all(.[]; type == "object" and (.type | type) == "string")' "$(events_file)" >/dev/null
}

# A shell loop of N program starts, each with three arguments of 3000
# bytes (a record of about 3 KiB each).
flood_cmd() {
  local a
  a=$(head -c 3000 /dev/zero | tr '\0' a)
  echo "i=0; while [ \$i -lt $1 ]; do /bin/true $a $a $a; i=\$((i+1)); done"
}

# --- the spec ------------------------------------------------------------------

@test "audit.max_bytes: out of range, of the wrong type, or an unknown key in audit is bad input (3)" {
  local bad
  for bad in '{"max_bytes":65535}' '{"max_bytes":1073741825}' '{"max_bytes":"1M"}' \
    '{"max_bytes":65536.5}' '{"max_bytes":-1}' '{"max_bytes":65536,"max_records":1}' \
    '"64M"' '[]'; do
    printf '{"image":"busybox","audit":%s}\n' "$bad" >"$BATS_TEST_TMPDIR/spec.json"
    run -3 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
    [[ $stderr == *audit* ]] || {
      echo "audit $bad: the error does not name the field: $stderr" >&2
      return 1
    }
  done
  [ -z "$(ls "$DSEC_ROOT/sandboxes" 2>/dev/null)" ]
  # the bounds themselves, and the default, are accepted
  budget_spec 65536
  sb_create --spec "$SPEC"
  sb_inspect | jq -e '.spec.audit == {"max_bytes": 65536} and .audit.max_bytes == 65536
    and .audit.dropped == {} and .audit.truncated == false and .audit.bytes > 0'
  sb_create
  sb_inspect | jq -e '.spec.audit.max_bytes == 67108864 and .audit.max_bytes == 67108864'
}

# --- the budget ---------------------------------------------------------------

@test "a flood of execs with long argv keeps to audit.max_bytes; audit_truncated and the counts say what went" {
  local a i
  budget_spec 262144
  sb_create --spec "$SPEC"
  a=$(head -c 4000 /dev/zero | tr '\0' a)
  for i in $(seq 60); do
    jq -cn --arg a "$a" '{"cmd":["/bin/echo",$a,$a,$a,$a,$a]}'
  done >"$BATS_TEST_TMPDIR/requests"
  run -0 --separate-stderr dsec-run exec "$SB" --requests "$BATS_TEST_TMPDIR/requests"
  [ "$(jq -s 'map(select(.exit_code == 0)) | length' <<<"$output")" = 60 ]
  assert_within 262144
  # it stopped, said so once, and counted the rest
  jq -s -e 'map(select(.type == "audit_truncated")) | length == 1' "$(events_file)"
  jq -s -e 'map(select(.type == "audit_truncated"))[0] | .max_bytes == 262144 and .bytes <= 262144' \
    "$(events_file)"
  jq -s -e 'map(select(.type == "exec")) | length > 0 and length < 60' "$(events_file)"
  sb_inspect | jq -e --argjson size "$(events_size)" \
    '.audit.bytes == $size and .audit.max_bytes == 262144 and .audit.truncated
     and .audit.dropped.exec > 0'
  # the execs that were written plus those dropped are all of them
  sb_inspect | jq -e --argjson w "$(jq -s 'map(select(.type == "exec")) | length' "$(events_file)")" \
    '.audit.dropped.exec + $w == 60'
}

@test "a flood of program starts keeps to the budget; a program started after it is still recorded" {
  local a
  budget_spec 262144
  sb_create --spec "$SPEC"
  # 200 starts (the first second's rate limit) of 3 KiB each spend the
  # routine part of the budget whatever the timing; then a new program
  sb_exec sh -c "$(flood_cmd 1500); /bin/echo new-program"
  jq -e '.stdout == "new-program\n"' <<<"$output"
  assert_within 262144
  jq -s -e 'map(select(.type == "audit_truncated")) | length == 1' "$(events_file)"
  # recorded after the budget was spent, as a first start
  jq -s -e '(map(.type) | index("audit_truncated")) as $t
    | (map(.type == "process" and .path == "/bin/echo") | index(true)) as $e
    | $t != null and $e != null and $e > $t' "$(events_file)"
  jq -s -e 'map(select(.type == "process" and .path == "/bin/echo"))[0]
    | .first == true and .argv == ["/bin/echo", "new-program"]' "$(events_file)"
  # a start seen before is routine now: not written, counted (a record of
  # 4 KiB: larger than the gap the flood's 3 KiB records can have left)
  a=$(head -c 2000 /dev/zero | tr '\0' a)
  sb_exec /bin/echo again "$a" "$a" "$a" "$a"
  jq -s -e 'map(select(.type == "process" and .path == "/bin/echo")) | length == 1' "$(events_file)"
  sb_inspect | jq -e '.audit.dropped.process > 0 and .audit.dropped.exec >= 1'
  assert_within 262144
}

@test "a new denied syscall and ioctl after a flood of other denials are recorded" {
  sb_create
  attack deny_flood 3000
  assert_blocked deny_flood
  # each kind's first denial, marked, and no more than the rate limit of
  # the flood
  assert_event "$SB" '.type == "denied" and .syscall == "bpf" and .first == true'
  assert_event "$SB" '.type == "denied" and .syscall == "ioctl" and .ioctl == "0x40049409" and .first == true'
  assert_event "$SB" '.type == "denied" and .syscall == "keyctl" and .first == true'
  assert_event "$SB" '.type == "denied" and .syscall == "ioctl" and .ioctl == "0x5412" and .first == true'
  dsec-run events "$SB" | jq -s -e 'map(select(.type == "denied" and .syscall == "keyctl")) | length < 3000'
  dsec-run events "$SB" | jq -s -e 'map(select(.type == "denied" and .syscall == "keyctl" and .first)) | length == 1'
}

@test "the first refusal of a host is recorded after a flood of refusals of another" {
  local proxy
  proxy='{"network":{"mode":"proxy","allow":[]}}'
  budget_spec 262144 "$proxy"
  sb_create --spec "$SPEC"
  sb_exec sh -c "i=0; while [ \$i -lt 300 ]; do printf 'CONNECT flood.example:443 HTTP/1.1\r\n\r\n' | nc 127.0.0.1 3128 >/dev/null; i=\$((i+1)); done
    printf 'CONNECT new.example:443 HTTP/1.1\r\n\r\n' | nc 127.0.0.1 3128"
  [[ $(jq -r .stdout <<<"$output") == *403* ]]
  assert_event "$SB" '.type == "network" and .host == "new.example" and .allowed == false and .first == true'
  dsec-run events "$SB" | jq -s -e 'map(select(.type == "network" and .host == "flood.example" and .first)) | length == 1'
  assert_within 262144
}

@test "an exec's own start is a process event with the pid the host gives it; what it starts is notified" {
  local client pid i
  sb_create
  dsec-run exec "$SB" -- sleep 4321 >/dev/null 2>&1 3>&- &
  client=$!
  for ((i = 0; i < 100; i++)); do
    pid=$(jq -r 'select(.type == "process" and .argv == ["sleep", "4321"]) | .pid' \
      "$(events_file)")
    [ -n "$pid" ] && break
    sleep 0.1
  done
  # (the exec's start is told by its child, not seen by the listener:
  # the pid is the socket's word for it, and it is the command's)
  [ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" = "sleep 4321 " ]
  grep -Eq '^NSpid:[[:space:]]+[0-9]+[[:space:]]+[0-9]+' "/proc/$pid/status"
  jq -s -e --argjson p "$pid" 'map(select(.type == "process" and .pid == $p))
    | length == 1 and .[0].path == "/bin/sleep"' "$(events_file)"
  dsec-run kill "$SB" >/dev/null
  wait "$client" || true
  # a start the command makes itself is the listener's, with its own pid
  sb_exec sh -c '/bin/echo x; true'
  jq -s -e 'map(select(.type == "process" and (.argv == ["sh", "-c", "/bin/echo x; true"]
      or .argv == ["/bin/echo", "x"]))) | length == 2 and .[0].pid != .[1].pid' \
    "$(events_file)"
}

@test "a long argv is truncated and marked in exec and process events" {
  local a t
  budget_spec 262144
  sb_create --spec "$SPEC"
  a=$(head -c 2000 /dev/zero | tr '\0' b)
  # 100 arguments of 2000 bytes: all of them reach the program
  sb_exec sh -c '/bin/echo $# ${#1}' sh $(for _ in $(seq 100); do echo "$a"; done)
  jq -e '.stdout == "100 2000\n"' <<<"$output"
  # the exec record (its cmd) and the process record (read from the
  # process) keep 1 KiB of an argument and 8 KiB in all, from the front
  for t in exec process; do
    jq -s -e --arg t "$t" 'map(select(.type == $t and .argv[0] == "sh")) | length == 1 and
      all(.[]; .argv_truncated == true and (.argv | length) > 5 and (.argv | length) < 64
          and .argv[2] == "/bin/echo $# ${#1}"
          and all(.argv[]; length <= 1024) and ([.argv[] | length] | add) <= 8192
          and ([.argv[] | length] | add) > 7000)' \
      "$(events_file)"
  done
  # 100 short arguments: 64 kept
  sb_exec /bin/echo $(seq 100)
  for t in exec process; do
    jq -s -e --arg t "$t" 'map(select(.type == $t and .argv[1] == "1")) | length == 1 and
      all(.[]; .argv_truncated == true and .argv == (["/bin/echo"] + [range(1; 64) | tostring]))' \
      "$(events_file)"
  done
  # a short argv is not marked
  sb_exec /bin/echo short
  jq -s -e 'map(select(.type == "exec" and .argv == ["/bin/echo", "short"]))
    | length == 1 and (.[0] | has("argv_truncated") | not)' "$(events_file)"
}

@test "lifecycle records survive a spent budget: checkpoint, died, and the final audit_summary" {
  local init
  budget_spec 65536
  sb_create --spec "$SPEC"
  sb_exec sh -c "$(flood_cmd 400)"
  jq -s -e 'any(.[]; .type == "audit_truncated")' "$(events_file)"
  run -0 --separate-stderr dsec-run checkpoint "$SB"
  init=$(sb_inspect | jq -r .init_pid)
  [ "$init" -gt 1 ]
  kill -9 "$init"
  for _ in $(seq 100); do
    [ "$(dsec-run inspect "$SB" | jq -r .state)" = died ] && break
    sleep 0.1
  done
  [ "$(sb_inspect | jq -r .state)" = died ]
  assert_within 65536
  jq -s -e '(map(.type) | index("audit_truncated")) as $t
    | (map(.type) | index("checkpoint")) as $c
    | (map(.type) | index("died")) as $d
    | $c > $t and $d > $c' "$(events_file)"
  # the last record counts what went, as inspect does
  jq -s -e 'last | .type == "audit_summary" and .max_bytes == 65536 and .dropped.process > 0' \
    "$(events_file)"
  sb_inspect | jq -e --argjson size "$(events_size)" \
    '.audit.bytes == $size and .audit.dropped.process > 0 and .audit.truncated'
}

@test "the budget holds across suspend --release and resume, and the counts go on" {
  local before
  budget_spec 65536
  sb_create --spec "$SPEC"
  sb_exec sh -c "$(flood_cmd 400)"
  before=$(sb_inspect | jq '.audit.dropped.process')
  run -0 --separate-stderr dsec-run suspend --release "$SB"
  run -0 --separate-stderr dsec-run resume "$SB"
  sb_exec sh -c "$(flood_cmd 300)"
  assert_within 65536
  jq -s -e 'map(select(.type == "audit_truncated")) | length == 1' "$(events_file)"
  jq -s -e 'any(.[]; .type == "suspended") and any(.[]; .type == "resumed")
    and (map(select(.type == "created")) | length == 2)' "$(events_file)"
  sb_inspect | jq -e --argjson before "$before" '.audit.dropped.process > $before'
}

# --- streamed output ------------------------------------------------------------

@test "run --attach streams no more than the output cap; the result counts every byte" {
  local id
  dsec-run run --rm --image busybox --attach --max-output 1000 \
    --result "$BATS_TEST_TMPDIR/result.json" -- \
    sh -c 'yes | head -c 100000; yes e | head -c 50000 >&2' \
    >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
  id=$(jq -r .id "$BATS_TEST_TMPDIR/result.json")
  echo "$id" >>"$BATS_TEST_TMPDIR/sandboxes"
  [ "$(wc -c <"$BATS_TEST_TMPDIR/out")" = 1000 ]
  [ "$(wc -c <"$BATS_TEST_TMPDIR/err")" = 1000 ]
  [ "$(tr -d 'y\n' <"$BATS_TEST_TMPDIR/out" | wc -c)" = 0 ]
  [ "$(tr -d 'e\n' <"$BATS_TEST_TMPDIR/err" | wc -c)" = 0 ]
  jq -e '.stdout_bytes == 100000 and .stderr_bytes == 50000 and .truncated == true
    and (.stdout | length) == 1000' "$BATS_TEST_TMPDIR/result.json"
}

# --- the masked-file audit at density --------------------------------------------

@test "past fs.fanotify.max_user_groups sandboxes, the last one still records opens of masked files" {
  # each sandbox's fanotify group is charged to its own host uid, not to
  # root's 128 groups (issue 16): 140 sandboxes alive at once, all with
  # the audit on, and the last one's open of /proc/kpagecgroup recorded
  local n=140 max dir=$BATS_TEST_TMPDIR/many i b last
  max=$(cat /proc/sys/fs/fanotify/max_user_groups)
  [ "$max" -lt "$n" ] || skip "fs.fanotify.max_user_groups is $max: $n sandboxes do not pass it"
  mkdir "$dir"
  for ((b = 0; b < n; b += 4)); do
    for ((i = b; i < b + 4 && i < n; i++)); do
      dsec-run create --image busybox --memory 16 >"$dir/$i.out" 2>"$dir/$i.err" 3>&- &
    done
    wait
    # teardown removes whatever was created, even if a later step fails
    for ((i = b; i < b + 4 && i < n; i++)); do
      jq -r '.id // empty' "$dir/$i.out" >>"$BATS_TEST_TMPDIR/sandboxes"
    done
  done
  [ "$(sort -u "$BATS_TEST_TMPDIR/sandboxes" | wc -l)" -eq "$n" ] || {
    cat "$dir"/*.err | sort | uniq -c >&2
    false
  }
  run -0 --separate-stderr dsec-run ps
  jq -e -s --argjson n "$n" 'length == $n and all(.[]; .state == "running")' <<<"$output"
  jq -e -s 'all(.[]; has("audit_unavailable") | not)' <<<"$output" || {
    jq -c -s 'map(.audit_unavailable) | group_by(.) | map([length, .[0]])' <<<"$output" >&2
    false
  }
  SB=$(jq -r .id "$dir/$((n - 1)).out")
  sb_inspect | jq -e 'has("audit_unavailable") | not'
  sb_exec cat /proc/kpagecgroup
  jq -e '.stdout == ""' <<<"$output"
  assert_event "$SB" '.type == "masked" and .path == "/proc/kpagecgroup" and .pid > 0 and .first'
}

@test "where fanotify_init fails the audit is off, says why, and the masks still hold" {
  # fanotify_init failing (EMFILE, as a spent fs.fanotify.max_user_groups
  # gives): the supervisor is dsec-run forked, so a preloaded stand-in
  # makes it fail there
  cat >"$BATS_TEST_TMPDIR/nofan.c" <<'C'
#include <errno.h>
int fanotify_init(unsigned flags, unsigned event_f_flags)
{
  (void) flags, (void) event_f_flags;
  errno = EMFILE;
  return -1;
}
C
  gcc -shared -fPIC -o "$BATS_TEST_TMPDIR/nofan.so" "$BATS_TEST_TMPDIR/nofan.c"
  LD_PRELOAD=$BATS_TEST_TMPDIR/nofan.so sb_create
  sb_inspect | jq -e '.audit_unavailable == "masked: fanotify_init: Too many open files"'
  # the files are still the supervisor's empty ones, not the kernel's
  # (what each gives, in bytes: 0 for an empty file)
  sb_exec sh -c 'for f in /proc/interrupts /proc/kallsyms /proc/timer_list /proc/kpagecgroup; do
    [ ! -e "$f" ] || echo "$f $(cat "$f" 2>&1 | wc -c)"; done'
  jq -e '.stdout | split("\n") | map(select(. != "")) |
    length > 0 and all(.[]; endswith(" 0"))' <<<"$output" || {
    echo "masked files that are not empty: $(jq -r .stdout <<<"$output")" >&2
    false
  }
  run -0 --separate-stderr dsec-run events "$SB"
  jq -e -s 'any(.[]; .type == "masked") | not' <<<"$output"
}
