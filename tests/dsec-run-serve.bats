#!/usr/bin/env bats
# dsec-run serve: JSON Lines requests on stdin, answers with their rid.

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
  run_setup
}

# every sandbox of the test's store removed, no cgroup or process left
teardown() {
  sb_teardown
}

@test "serve: create, exec, ps, rm; every answer carries its rid" {
  run -0 --separate-stderr dsec-run serve <<<'{"op":"create","rid":"c","spec":{"image":"busybox:1","name":"s1"}}'
  jq -e '.rid == "c" and .type == "sandbox" and .state == "running"' <<<"$output"
  run -0 --separate-stderr dsec-run serve <<'EOF2'
{"op":"exec","rid":1,"id":"s1","cmd":["sh","-c","echo hi; exit 3"],"seq":1}
{"op":"ps","rid":{"any":"json"}}
EOF2
  [ "$(wc -l <<<"$output")" -eq 2 ]
  jq -e -s 'map(select(.rid == 1))[0] | .type == "result" and .stdout == "hi\n" and .exit_code == 3 and .seq == 1' <<<"$output"
  jq -e -s 'map(select(.rid == {"any":"json"}))[0] | .type == "ps" and (.sandboxes | length == 1)' <<<"$output"
  run -0 --separate-stderr dsec-run serve <<<'{"op":"rm","rid":"r","id":"s1"}'
  jq -e '.rid == "r" and .type == "removed"' <<<"$output"
}

@test "serve: requests run concurrently and are answered as they finish" {
  local in=$BATS_TEST_TMPDIR/in out=$BATS_TEST_TMPDIR/out i
  run -0 --separate-stderr dsec-run create --image busybox:1 --name s2
  # the slow one waits (60 s at most) for a file that is made only once
  # the fast one, sent after it, was answered
  mkfifo "$in"
  # (the fifo opened by the background process: opening it here would
  # wait for a writer)
  bg sh -c 'exec dsec-run serve <"$1" >"$2"' sh "$in" "$out"
  exec 4>"$in"
  cat >&4 <<'EOF2'
{"op":"exec","rid":"slow","id":"s2","cmd":["sh","-c","i=0; while [ ! -e /tmp/go ]; do i=$((i+1)); [ $i -lt 600 ] || exit 99; sleep 0.1; done"]}
{"op":"exec","rid":"fast","id":"s2","cmd":["true"]}
EOF2
  for ((i = 0; i < 300; i++)); do
    [ -s "$out" ] && break
    sleep 0.1
  done
  run -0 --separate-stderr dsec-run exec s2 -- touch /tmp/go
  # stdin closed: serve answers what is in flight, then exits
  exec 4>&-
  wait "$BG"
  run -0 cat "$out"
  [ "${#lines[@]}" -eq 2 ]
  # the fast one was not held behind the slow one
  jq -e '.rid == "fast" and .exit_code == 0' <<<"${lines[0]}"
  jq -e '.rid == "slow" and .exit_code == 0' <<<"${lines[1]}"
}

@test "serve: bad lines and failed requests get error records, serve goes on" {
  run -0 --separate-stderr dsec-run serve <<'EOF2'
this is not json
{"op":"exec","rid":2,"id":"no-such-sandbox","cmd":["true"]}
{"op":"frobnicate","rid":3}
{"op":"create","rid":4,"spec":{"image":"busybox:1","bogus":1}}
{"op":"create","rid":5,"spec":{"image":"busybox:1"}}
EOF2
  [ "$(wc -l <<<"$output")" -eq 5 ]
  jq -e -s 'map(select(.line == 1))[0] | .type == "error" and .exit_code == 3' <<<"$output"
  jq -e -s 'map(select(.rid == 2))[0] | .type == "error" and .exit_code == 3' <<<"$output"
  jq -e -s 'map(select(.rid == 3))[0] | .type == "error" and (.error | test("unknown op"))' <<<"$output"
  jq -e -s 'map(select(.rid == 4))[0] | .type == "error" and (.error | test("bogus"))' <<<"$output"
  jq -e -s 'map(select(.rid == 5))[0] | .type == "sandbox"' <<<"$output"
}

@test "serve: closing stdin waits for the requests in flight; sandboxes live on" {
  run -0 --separate-stderr dsec-run create --image busybox:1 --name s3
  run -0 --separate-stderr dsec-run serve <<<'{"op":"exec","rid":"x","id":"s3","cmd":["sh","-c","sleep 1; echo done"]}'
  jq -e '.rid == "x" and .stdout == "done\n"' <<<"$output"
  run -0 --separate-stderr dsec-run exec s3 -- true
}

@test "serve: takes no arguments" {
  run -2 --separate-stderr dsec-run serve extra
}

@test "serve: stdin kept open, several requests per write, four threads: every request answered" {
  command -v python3 >/dev/null || skip "needs python3"
  run -0 --separate-stderr python3 "$DSEC_SRCDIR/tests/helpers/serve-threads.py"
  # it removed what it created
  sb_track
  [ -z "$(dsec-run ps | jq -r .id)" ]
}
