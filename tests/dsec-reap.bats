#!/usr/bin/env bats
# dsec-reap end to end: every reason a sandbox, a leftover of a crash or a
# store object is collected for, made for real (dsec-run sandboxes that
# expire, idle out, are left behind by training progress, lose their
# supervisor to kill -9; leaked cgroups, mounts, run directories, names
# and temporary files; unreferenced layers and images), each test checking
# what was removed and what was kept.  Also --dry-run, two reapers at once,
# a create racing a reaper and a reaper killed half way.  Every test gets
# its own store with busybox:1; teardown removes every sandbox of that
# store and checks no cgroup or process of it is left.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
  # like the other programs: a rebuild while the file runs does not
  # pull dsec-reap from under the tests
  flock /tmp/dsec-make.lock cp "$DSEC_BUILDDIR/dsec-reap" \
    "$BATS_FILE_TMPDIR/bin/dsec-reap"
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
  MOUNTS=()
}

teardown() {
  local m
  for m in "${MOUNTS[@]}"; do
    umount -l "$m" 2>/dev/null || true
  done
  sb_teardown
}

# fake_id: a fresh sandbox id, remembered so that teardown checks (and
# cleans) what this test made under it.
fake_id() {
  local id
  id="sb-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  echo "$id" >>"$SB_IDS"
  echo "$id"
}

# reap [OPTION]...: runs dsec-reap, exit 0, and checks its stdout: JSON
# Lines of reap records ending with one summary.
reap() {
  run -0 --separate-stderr dsec-reap "$@"
  out_jq -s 'length > 0 and last.type == "summary" and
    (.[:-1] | all(.type == "reap" and (.what | type) == "string" and
      (.id | type) == "string" and (.reason | type) == "string" and
      (.action | type) == "string" and (.freed_bytes | type) == "number"))'
}

# has WHAT ID REASON ACTION: the last reap printed that record.
has() {
  out_jq -s --arg w "$1" --arg i "$2" --arg r "$3" --arg a "$4" \
    'any(.[]; .type == "reap" and .what == $w and .id == $i and
      .reason == $r and .action == $a)'
}

# reap_plans WHAT ID REASON ACTION [OPTION]...: polls dsec-reap --dry-run
# OPTION... (30 s at most) until it plans that record: the reaper goes by
# the clock, and that much time has passed for it.
reap_plans() {
  local what=$1 id=$2 reason=$3 action=$4 n
  shift 4
  for ((n = 0; n < 300; n++)); do
    dsec-reap --dry-run "$@" 2>/dev/null | jq -e -s --arg w "$what" \
      --arg i "$id" --arg r "$reason" --arg a "$action" \
      'any(.[]; .what == $w and .id == $i and .reason == $r and
        .action == $a)' >/dev/null && return 0
    sleep 0.1
  done
  echo "dsec-reap --dry-run $* did not plan: $what $id $reason $action" >&2
  return 1
}

# lacks WHAT ID: the last reap printed no record of ID.
lacks() {
  out_jq -s --arg w "$1" --arg i "$2" \
    'all(.[]; .what != $w or .id != $i)'
}

sup_of() { jq -r .supervisor_pid "$DSEC_ROOT/sandboxes/$1/state.json"; }

# layer_of DIR [NAME]: a layer of DIR's files (named NAME); prints its
# digest.
layer_of() {
  dsec-layer create --dir "$1" ${2:+--name "$2"} | jq -r .digest
}

in_store() { dsec-layer inspect "$1" >/dev/null 2>&1; }

# not_in_store REF: REF is in the store no more (`! in_store` would not
# fail a test).
not_in_store() {
  if in_store "$1"; then
    echo "$1 is still in the store" >&2
    return 1
  fi
}

# age DIGEST...: makes store objects look written two minutes ago (the
# reaper leaves younger ones for the next run).
age() {
  local d hex f
  d=$(store_dir)
  for hex in "${@#sha256:}"; do
    for f in "$d/blobs/sha256/$hex" "$d/layers/$hex" "$d/layers/$hex/meta.json" \
      "$d/layers/$hex/rootfs" "$d/layers/$hex/layer.erofs" "$d/images/$hex.json"; do
      [ ! -e "$f" ] || touch -h -d '2 minutes ago' "$f"
    done
  done
}

# sb_exec_ok ID: a command runs in sandbox ID.
sb_exec_ok() {
  run -0 --separate-stderr dsec-run exec "$1" -- true
}

# --- the command-line contract ---------------------------------------------

@test "--help prints usage naming every option on stdout, exit 0" {
  run -0 --separate-stderr dsec-reap --help
  [[ "$output" == Usage:\ dsec-reap* ]]
  for o in --all --dry-run --min-step --progress --store-max --suspend-idle \
    --log-format --debug --version; do
    [[ "$output" == *"$o"* ]]
  done
  [ -z "$stderr" ]
  run -0 --separate-stderr dsec-reap -h
  [[ "$output" == Usage:\ dsec-reap* ]]
}

@test "--version prints the program and version, exit 0" {
  run -0 --separate-stderr dsec-reap --version
  [[ "$output" =~ ^dsec-reap\ [0-9]+\.[0-9]+ ]]
  [ "${#lines[@]}" -eq 1 ]
}

@test "usage errors are exit 2 and change nothing" {
  local args
  for args in "--bogus" "an-argument" "--min-step" "--min-step=x" \
    "--min-step=-1" "--store-max=-1" "--store-max=lots" "--store-max=" \
    "--suspend-idle=x" "--log-format=xml" "--min-step=3 --progress=p.json" \
    "--all --store-max=1"; do
    # shellcheck disable=SC2086
    run -2 --separate-stderr dsec-reap $args
    [ -z "$output" ]
    [ -n "$stderr" ]
  done
  [ ! -e "$DSEC_ROOT/reap.lock" ]
}

@test "--suspend-idle freezes idle running sandboxes, not busy or recent ones" {
  local idle busy recent
  idle=$(sb_create --label step=7)
  busy=$(sb_create)
  # busy as long as the test runs (teardown ends it)
  bg dsec-run exec "$busy" -- sleep 600
  sb_wait_proc "$busy" sleep
  reap_plans sandbox "$idle" idle "would suspend" --suspend-idle 2
  recent=$(sb_create)
  run -0 --separate-stderr dsec-reap --dry-run --suspend-idle 2
  has sandbox "$idle" idle "would suspend"
  [ "$(sb_state "$idle")" = running ]
  reap --suspend-idle 2
  has sandbox "$idle" idle suspended
  out_jq -s --arg i "$idle" 'any(.[]; .id == $i and .idle_s >= 2 and
    .state == "running" and .step == 7 and .freed_bytes == 0)'
  lacks sandbox "$busy"
  lacks sandbox "$recent"
  [ "$(sb_state "$idle")" = suspended ]
  [ "$(sb_state "$busy")" = running ]
  [ "$(sb_state "$recent")" = running ]
  # suspended is kept as it is; resumed, it runs again
  reap --suspend-idle 2
  lacks sandbox "$idle"
  run -0 --separate-stderr dsec-run resume "$idle"
  sb_exec_ok "$idle"
  # without the option nothing is suspended
  reap_plans sandbox "$idle" idle "would suspend" --suspend-idle 2
  reap
  lacks sandbox "$idle"
  [ "$(sb_state "$idle")" = running ]
}

@test "a bad --progress file is bad input (3) naming the field" {
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/none.json"
  [ -z "$output" ]
  echo '{"step": 4200' >"$BATS_TEST_TMPDIR/p.json"
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/p.json"
  echo '{"keep_steps": 2}' >"$BATS_TEST_TMPDIR/p.json"
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/p.json"
  stderr_has "step"
  echo '{"step": "4200"}' >"$BATS_TEST_TMPDIR/p.json"
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/p.json"
  stderr_has "step"
  echo '{"step": 10, "keep_steps": -1}' >"$BATS_TEST_TMPDIR/p.json"
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/p.json"
  stderr_has "keep_steps"
  echo '[1]' >"$BATS_TEST_TMPDIR/p.json"
  run -3 --separate-stderr dsec-reap --progress "$BATS_TEST_TMPDIR/p.json"
}

@test "nothing to do: only the summary; --log-format=json keeps stderr JSON" {
  reap
  [ "${#lines[@]}" -eq 1 ]
  out_jq '.type == "summary" and .dry_run == false and .actions == 0 and
    .freed_bytes == 0 and .failed == 0 and .kept == 0 and
    (.duration_ms | type) == "number" and has("store_bytes") == false'
  run -0 --separate-stderr dsec-reap --dry-run --store-max 1 --debug \
    --log-format=json
  out_jq '.dry_run == true and .store_max_bytes == 1073741824 and
    (.store_bytes | type) == "number"'
  [ -z "$stderr" ] || jq_err '.prog == "dsec-reap"'
}

# --- sandboxes --------------------------------------------------------------

@test "expired (ttl) and idle sandboxes are removed, a running one is kept" {
  local a b keep
  a=$(sb_create --ttl 1)
  b=$(sb_create --idle-timeout 1)
  keep=$(sb_create --ttl 3600 --idle-timeout 3600)
  sb_wait_state "$a" expired
  sb_wait_state "$b" expired
  reap
  has sandbox "$a" ttl removed
  has sandbox "$b" idle removed
  out_jq -s --arg a "$a" 'any(.[]; .id == $a and .state == "expired" and
    .freed_bytes > 0)'
  lacks sandbox "$keep"
  out_jq -s 'last.actions == 2 and last.failed == 0 and
    last.freed_bytes == ([.[:-1][] | .freed_bytes] | add)'
  sb_gone "$a"
  sb_gone "$b"
  [ "$(sb_state "$keep")" = running ]
  sb_exec_ok "$keep"
  # again: nothing left to do
  reap
  [ "${#lines[@]}" -eq 1 ]
}

@test "a running sandbox past its ttl by the clock goes, whatever its supervisor does" {
  local id sup
  id=$(sb_create --ttl 2)
  sup=$(sup_of "$id")
  kill -STOP "$sup" # a supervisor that no longer enforces anything
  reap_plans sandbox "$id" ttl "would remove"
  [ "$(jq -r .state "$DSEC_ROOT/sandboxes/$id/state.json")" = running ]
  reap
  has sandbox "$id" ttl removed
  out_jq -s --arg i "$id" 'any(.[]; .id == $i and .state == "running")'
  sb_dead "$sup"
  sb_gone "$id"
}

@test "a sandbox whose init died goes (died), as does a stopped one" {
  local id init st
  id=$(sb_create)
  st=$(sb_create)
  init=$(jq -r .init_pid "$DSEC_ROOT/sandboxes/$id/state.json")
  kill -9 "$init"
  kill -TERM "$(sup_of "$st")"
  sb_wait_state "$id" died
  sb_wait_state "$st" stopped
  [ "$(jq -r .state "$DSEC_ROOT/sandboxes/$id/state.json")" = died ]
  reap
  has sandbox "$id" died removed
  has sandbox "$st" stopped removed
  sb_gone "$id"
  sb_gone "$st"
}

@test "a supervisor that wrote its final state but has not exited yet: its sandbox goes in that run" {
  local st di s sup
  # a supervisor writes stopped (or died) last, then finishes its audit
  # log and exits: each of these two is held (SIGSTOP) right after the
  # write, as a reaper may find one
  st=$(sb_create)
  di=$(sb_create)
  for s in "$st:stopped" "$di:died"; do
    sup=$(sup_of "${s%%:*}")
    kill -STOP "$sup"
    jq -c --arg s "${s#*:}" '.state = $s' \
      "$DSEC_ROOT/sandboxes/${s%%:*}/state.json" >"$BATS_TEST_TMPDIR/state"
    mv "$BATS_TEST_TMPDIR/state" "$DSEC_ROOT/sandboxes/${s%%:*}/state.json"
  done
  [ "$(sb_state "$st")" = stopped ]
  reap
  has sandbox "$st" stopped removed
  has sandbox "$di" died removed
  for s in "$st" "$di"; do
    sb_gone "$s"
  done
  [ -z "$(sb_pids)" ]
}

@test "a kill -9'd supervisor: its sandbox, processes and cgroups go (orphan)" {
  local id keep sup init
  id=$(sb_create --name victim)
  keep=$(sb_create)
  sup=$(sup_of "$id")
  init=$(jq -r .init_pid "$DSEC_ROOT/sandboxes/$id/state.json")
  kill -9 "$sup"
  sb_wait_state "$id" died
  reap
  has sandbox "$id" orphan removed
  out_jq -s --arg i "$id" 'any(.[]; .id == $i and .state == "running" and
    .name == "victim")'
  lacks sandbox "$keep"
  lacks cgroup "$keep"
  sb_dead "$sup"
  sb_dead "$init"
  sb_gone "$id"
  [ ! -e "$DSEC_ROOT/names/victim" ]
  [ -n "$(ls -d /sys/fs/cgroup/*/dsec/"$keep")" ]
  sb_exec_ok "$keep"
}

@test "a supervisor whose sandbox directory is gone is killed, its leftovers go" {
  local id keep sup
  id=$(sb_create)
  keep=$(sb_create)
  sup=$(sup_of "$id")
  rm -rf "${DSEC_ROOT:?}/sandboxes/$id"
  reap
  has supervisor "$id" orphan killed
  out_jq -s --arg i "$id" --argjson p "$sup" \
    'any(.[]; .what == "supervisor" and .id == $i and .pid == $p)'
  has run_dir "$id" orphan removed
  has cgroup "$id" orphan removed
  lacks supervisor "$keep"
  sb_dead "$sup"
  sb_gone "$id"
  sb_exec_ok "$keep"
}

@test "a released sandbox and its checkpoint are kept, and it resumes" {
  local id cp
  id=$(sb_create)
  run -0 --separate-stderr dsec-run exec "$id" -- sh -c 'echo kept >/state.txt'
  run -0 --separate-stderr dsec-run suspend --release "$id"
  sb_wait_state "$id" suspended
  cp=$(jq -r .checkpoint "$DSEC_ROOT/sandboxes/$id/state.json")
  [[ $cp == sha256:* ]]
  age "$cp"
  reap --all
  lacks sandbox "$id"
  lacks layer "$cp"
  in_store "$cp"
  run -0 --separate-stderr dsec-run resume "$id"
  run -0 --separate-stderr dsec-run exec "$id" -- cat /state.txt
  out_jq '.stdout == "kept\n"'
  # released again: without labels.step, --min-step does not take it
  dsec-run suspend --release "$id" >/dev/null
  sb_wait_state "$id" suspended
  reap --min-step 1
  lacks sandbox "$id"
}

@test "--min-step removes sandboxes of older steps, keeps newer and unlabelled" {
  local s1 s2 s3 s4 none
  s1=$(sb_create --label step=4198)
  s2=$(sb_create --label step=4199)
  s3=$(sb_create --label step=4200)
  none=$(sb_create --label job=grpo)
  s4=$(jq -n '{image: "busybox:1", labels: {step: 4100}}' |
    dsec-run create --spec - | jq -r .id)
  echo "$s4" >>"$SB_IDS"
  run -0 --separate-stderr dsec-reap --dry-run --min-step 4200
  has sandbox "$s1" step "would remove"
  [ -d "$DSEC_ROOT/sandboxes/$s1" ]
  reap --min-step 4200
  has sandbox "$s1" step removed
  has sandbox "$s2" step removed
  has sandbox "$s4" step removed
  out_jq -s --arg i "$s4" 'any(.[]; .id == $i and .step == 4100)'
  lacks sandbox "$s3"
  lacks sandbox "$none"
  sb_gone "$s1"
  sb_gone "$s2"
  sb_gone "$s4"
  sb_exec_ok "$s3"
  sb_exec_ok "$none"
}

@test "--progress FILE: labels.step below step - keep_steps go" {
  local s1 s2 s3
  s1=$(sb_create --label step=4197)
  s2=$(sb_create --label step=4198)
  s3=$(sb_create --label step=4200)
  echo '{"step": 4200, "keep_steps": 2, "note": "ignored"}' \
    >"$BATS_TEST_TMPDIR/progress.json"
  reap --progress "$BATS_TEST_TMPDIR/progress.json"
  has sandbox "$s1" step removed
  lacks sandbox "$s2"
  lacks sandbox "$s3"
  run -0 --separate-stderr dsec-reap --progress - \
    <<<'{"step": 4201, "keep_steps": 1}'
  has sandbox "$s2" step removed
  lacks sandbox "$s3"
  sb_gone "$s1"
  sb_gone "$s2"
  sb_exec_ok "$s3"
}

# --- leftovers of crashes ---------------------------------------------------

@test "a leaked cgroup (v1 and v2) has its processes killed and goes; live ones stay" {
  local id keep d p dirs=()
  id=$(fake_id)
  keep=$(sb_create)
  for d in /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup/unified \
    /sys/fs/cgroup; do
    [ -d "$d/dsec" ] || continue
    mkdir "$d/dsec/$id" 2>/dev/null && dirs+=("$d/dsec/$id")
  done
  [ "${#dirs[@]}" -gt 0 ] || skip "no dsec cgroup hierarchy"
  mkdir "${dirs[0]}/child"
  sleep 600 3>&- &
  p=$!
  BG_PIDS+=("$p")
  echo "$p" >"${dirs[0]}/child/cgroup.procs"
  # a young one of no sandbox here may be another root's in the making:
  # left alone until it is a minute old
  run -0 --separate-stderr dsec-reap --dry-run
  out_jq -s --arg i "$id" 'all(.[]; .id != $i)'
  for d in "${dirs[@]}"; do touch -d '2 minutes ago' "$d"; done
  run -0 --separate-stderr dsec-reap --dry-run
  for d in "${dirs[@]}"; do
    out_jq -s --arg p "$d" 'any(.[]; .what == "cgroup" and .path == $p and
      .action == "would remove")'
    [ -d "$d" ]
  done
  reap
  for d in "${dirs[@]}"; do
    out_jq -s --arg p "$d" --arg i "$id" 'any(.[]; .what == "cgroup" and
      .id == $i and .path == $p and .reason == "orphan" and
      .action == "removed")'
    [ ! -e "$d" ]
  done
  lacks cgroup "$keep"
  sb_wait_dead "$p"
  [ -n "$(ls -d /sys/fs/cgroup/*/dsec/"$keep")" ]
  sb_exec_ok "$keep"
}

@test "a leaked run directory, and a mount left in one, go; a live one stays" {
  local id keep
  id=$(fake_id)
  keep=$(sb_create)
  mkdir -p "$DSEC_RUN/$id/rootfs" "$DSEC_RUN/$id/lower/empty"
  mount -t tmpfs tmpfs "$DSEC_RUN/$id/rootfs"
  MOUNTS+=("$DSEC_RUN/$id/rootfs")
  touch "$DSEC_RUN/$id/rootfs/file"
  reap
  has mount "$id" orphan unmounted
  out_jq -s --arg p "$DSEC_RUN/$id/rootfs" 'any(.[]; .what == "mount" and
    .path == $p)'
  has run_dir "$id" orphan removed
  [ ! -e "$DSEC_RUN/$id" ]
  ! grep -q " $DSEC_RUN/$id/" /proc/self/mountinfo ||
    { echo "a mount under $DSEC_RUN/$id is left" >&2; false; }
  lacks run_dir "$keep"
  [ -S "$DSEC_RUN/$keep/ctl.sock" ]
  sb_exec_ok "$keep"
}

@test "names of sandboxes that are gone go; a live sandbox's name stays" {
  local ghost keep
  ghost=$(fake_id)
  keep=$(sb_create --name keeper)
  mkdir -p "$DSEC_ROOT/names"
  echo "$ghost" >"$DSEC_ROOT/names/ghost"
  reap
  has name ghost orphan removed
  out_jq -s --arg i "$ghost" 'any(.[]; .what == "name" and .sandbox == $i)'
  lacks name keeper
  [ ! -e "$DSEC_ROOT/names/ghost" ]
  [ "$(cat "$DSEC_ROOT/names/keeper")" = "$keep" ]
  sb_exec_ok keeper
}

@test "store temp files of dead writers go, a locked one stays; stale *.tmp-* go" {
  local s tmp keep old
  s=$(store_dir)
  keep=$(sb_create)
  tmp=$s/tmp
  head -c 10000 /dev/urandom >"$tmp/blob.tmp-00000000000000aa"
  head -c 10000 /dev/urandom >"$tmp/blob.tmp-00000000000000bb"
  mkdir "$tmp/git-AbCdEf"
  touch -d '2 minutes ago' "$tmp/git-AbCdEf"
  # a live writer holds the lock on its temporary file
  exec 8<"$tmp/blob.tmp-00000000000000bb"
  flock -x 8
  # leftovers of interrupted atomic writes, one fresh
  old="$DSEC_ROOT/sandboxes/$keep/state.json.tmp-0123456789abcdef"
  echo '{}' >"$old"
  touch -d '2 minutes ago' "$old"
  echo '{}' >"$s/images/x.json.tmp-0000000000000001"
  touch -d '5 minutes ago' "$s/images/x.json.tmp-0000000000000001"
  echo '{}' >"$s/sources/y.tmp-0000000000000002"
  mkdir -p "$DSEC_ROOT/sandboxes/.tmp-$(fake_id)"
  touch -d '2 minutes ago' "$DSEC_ROOT/sandboxes"/.tmp-sb-*
  reap
  exec 8<&-
  has tmp "$tmp/blob.tmp-00000000000000aa" stale removed
  out_jq -s --arg i "$tmp/blob.tmp-00000000000000aa" \
    'any(.[]; .id == $i and .freed_bytes >= 10000)'
  has tmp "$tmp/git-AbCdEf" stale removed
  has tmp "$old" stale removed
  has tmp "$s/images/x.json.tmp-0000000000000001" stale removed
  lacks tmp "$tmp/blob.tmp-00000000000000bb"
  lacks tmp "$s/sources/y.tmp-0000000000000002"
  [ ! -e "$tmp/blob.tmp-00000000000000aa" ]
  [ -e "$tmp/blob.tmp-00000000000000bb" ]
  [ ! -e "$old" ]
  [ -e "$s/sources/y.tmp-0000000000000002" ]
  [ -z "$(ls -A "$DSEC_ROOT/sandboxes" | grep '^\.tmp-')" ]
  [ -e "$DSEC_ROOT/sandboxes/$keep/state.json" ]
  # the writer is gone now: the next run takes its file
  reap
  has tmp "$tmp/blob.tmp-00000000000000bb" stale removed
  rm -f "$s/sources/y.tmp-0000000000000002"
  assert_store_clean_tmp
  sb_exec_ok "$keep"
}

@test "a removed sandbox's directories a killed remover left in removing/ go; one being removed stays" {
  local a b c
  a=$DSEC_ROOT/removing/$(fake_id).tmp-00000000000000aa
  b=$DSEC_RUN/removing/$(fake_id).tmp-00000000000000bb
  c=$DSEC_ROOT/removing/$(fake_id).tmp-00000000000000cc
  mkdir -p "$a/upper/w" "$b/rootfs" "$c/upper"
  head -c 10000 /dev/urandom >"$a/upper/w/f"
  # what else is there is nobody's: a file, a link (never followed)
  echo target >"$BATS_TEST_TMPDIR/target"
  : >"$DSEC_ROOT/removing/junk.tmp-1"
  ln -s "$BATS_TEST_TMPDIR/target" "$DSEC_ROOT/removing/link.tmp-2"
  # a remover at work holds the lock on its directory
  exec 8<"$c"
  flock -x 8
  # a dry run tells the two apart without a lock of its own
  reap --dry-run
  has tmp "$a" stale "would remove"
  has tmp "$b" stale "would remove"
  lacks tmp "$c"
  [ -d "$a" ]
  reap
  exec 8<&-
  has tmp "$a" stale removed
  out_jq -s --arg i "$a" 'any(.[]; .id == $i and .freed_bytes >= 10000)'
  has tmp "$b" stale removed
  has tmp "$DSEC_ROOT/removing/junk.tmp-1" stale removed
  has tmp "$DSEC_ROOT/removing/link.tmp-2" stale removed
  lacks tmp "$c"
  [ ! -e "$a" ]
  [ ! -e "$b" ]
  [ -d "$c" ]
  [ "$(ls -A "$DSEC_ROOT/removing")" = "${c##*/}" ]
  [ "$(cat "$BATS_TEST_TMPDIR/target")" = target ]
  # its remover is gone now: the next run takes it
  reap
  has tmp "$c" stale removed
  [ ! -e "$c" ]
}

# --- the store --------------------------------------------------------------

@test "what dsec-layer verify would repair is in the plan (verify), and repaired; a sandbox's layer is kept" {
  local s keep zero hex img cut
  s=$(store_dir)
  keep=$(sb_create)
  img=$(dsec-layer inspect busybox:1 | jq -r .digest)
  hex=$(jq -r '.layers[0].digest' "$DSEC_ROOT/sandboxes/$keep/environment.json")
  hex=${hex#sha256:}
  zero=sha256:$(printf '0%.0s' $(seq 64))
  mkdir -p "$s/refs/t/gone"
  printf '{"type":"ref","name":"t/gone","version":"1","kind":"image","digest":"%s"}' \
    "$zero" >"$s/refs/t/gone/1"
  # the sandbox's layer loses its blob (its record goes with --repair
  # unless used: here it is)
  mv "$s/blobs/sha256/$hex" "$BATS_TEST_TMPDIR/blob"
  touch -d '2 minutes ago' "$s/layers/$hex"
  # an import cut short over a minute ago: a record without its blob
  mkdir "$BATS_TEST_TMPDIR/d"
  echo cut >"$BATS_TEST_TMPDIR/d/f"
  cut=$(dsec-layer create --dir "$BATS_TEST_TMPDIR/d" | jq -r .digest)
  cut=${cut#sha256:}
  rm "$s/blobs/sha256/$cut"
  touch -d '2 minutes ago' "$s/layers/$cut"

  run -0 --separate-stderr dsec-reap --dry-run
  has verify t/gone@1 "names image $zero, which the store does not have" \
    "would remove"
  has verify "sha256:$cut" "its blob is missing (an import cut short)" \
    "would remove"
  out_jq -s --arg d "sha256:$hex" --arg i "$keep" 'any(.[]; .what == "verify"
    and .id == $d and .object == "layer" and .action == "kept" and
    .why == "sandbox " + $i + " uses it")'
  # the image needs the layer
  has verify "$img" "its layer sha256:$hex is missing or damaged" \
    "would remove"
  [ -e "$s/refs/t/gone/1" ]

  reap
  has verify t/gone@1 "names image $zero, which the store does not have" \
    removed
  [ ! -e "$s/refs/t/gone" ]
  [ ! -e "$s/layers/$cut" ]
  [ -d "$s/layers/$hex" ]
  sb_exec_ok "$keep"
  # the blob back, all is sound but the image record the sandbox uses
  # (gone with its name), until a new pull
  mv "$BATS_TEST_TMPDIR/blob" "$s/blobs/sha256/$hex"
  run -1 --separate-stderr dsec-layer verify
  out_jq -s --arg i "$keep" --arg d "$img" '[.[] | select(.type == "finding")]
    | length == 1 and .[0].what == "sandbox" and .[0].id == $i and
      (.[0].problem | contains($d)) and (.[0].repair | startswith("none: "))'
  run -0 --separate-stderr dsec-pull --name busybox:1 "tar:$(busybox_tar)"
  run -0 --separate-stderr dsec-layer verify
}

@test "an unreferenced layer next to referenced ones: reported, then removed with --all" {
  local d free named used sb
  for d in free named used; do
    mkdir -p "$BATS_TEST_TMPDIR/$d"
    echo "$d" >"$BATS_TEST_TMPDIR/$d/$d.txt"
  done
  free=$(layer_of "$BATS_TEST_TMPDIR/free")
  named=$(layer_of "$BATS_TEST_TMPDIR/named" task/named@v1)
  used=$(layer_of "$BATS_TEST_TMPDIR/used")
  dsec-layer materialise "$free" >/dev/null
  sb=$(sb_create --layer "$used")
  # a layer just made is left alone even with --all: its maker may be
  # about to reference it
  reap --all
  has layer "$free" unreferenced kept
  in_store "$free"
  age "$free" "$used" "$named"
  # without --all or --store-max: reported, kept
  reap
  has layer "$free" unreferenced kept
  out_jq -s --arg i "$free" 'any(.[]; .id == $i and .size_bytes > 0 and
    .freed_bytes == 0)'
  # (other work on the host may leave orphan cgroups for it to remove:
  # only the store's records count here)
  out_jq -s 'last.kept == 1 and last.kept_bytes > 0'
  out_jq -s '[.[] | select(.what == "layer" or .what == "image" or
    .what == "blob") | select(.action != "kept")] | length == 0'
  lacks layer "$named"
  lacks layer "$used"
  in_store "$free"
  # the plan, then the real thing
  run -0 --separate-stderr dsec-reap --all --dry-run
  has layer "$free" unreferenced "would remove"
  in_store "$free"
  reap --all
  has layer "$free" unreferenced removed
  out_jq -s --arg i "$free" 'any(.[]; .id == $i and .freed_bytes > 0)'
  lacks layer "$named"
  lacks layer "$used"
  not_in_store "$free"
  [ ! -e "$(store_dir)/layers/${free#sha256:}" ]
  [ ! -e "$(store_dir)/blobs/sha256/${free#sha256:}" ]
  in_store "$named"
  in_store "$used"
  in_store busybox:1
  run -0 --separate-stderr dsec-run exec "$sb" -- cat /used.txt
  out_jq '.stdout == "used\n"'
  # the sandbox gone, its layer is unreferenced in turn
  dsec-run rm "$sb" >/dev/null
  age "$used"
  reap --all
  has layer "$used" unreferenced removed
  in_store "$named"
  in_store busybox:1
}

@test "an image its name and source moved away from goes with its layer" {
  local d old new
  d=$BATS_TEST_TMPDIR/img
  mkdir -p "$d"
  echo 1 >"$d/version"
  tar -C "$d" -czf "$BATS_TEST_TMPDIR/img.tar.gz" .
  old=$(dsec-pull --name img:1 "tar:$BATS_TEST_TMPDIR/img.tar.gz" | jq -r .digest)
  echo 2 >"$d/version"
  tar -C "$d" -czf "$BATS_TEST_TMPDIR/img.tar.gz" .
  new=$(dsec-pull --name img:1 "tar:$BATS_TEST_TMPDIR/img.tar.gz" | jq -r .digest)
  [ "$old" != "$new" ]
  age "$old" $(jq -r '.layers[].digest, .config_digest' \
    "$(store_dir)/images/${old#sha256:}.json")
  reap --all
  has image "$old" unreferenced removed
  out_jq -s 'map(select(.what == "layer" and .action == "removed")) |
    length == 1'
  lacks image "$new"
  not_in_store "$old"
  [ "$(dsec-layer inspect img:1 | jq -r .digest)" = "$new" ]
  in_store busybox:1
  [ -z "$(ls "$(store_dir)/tmp")" ]
}

@test "--store-max removes unreferenced objects oldest first, only as many as needed" {
  local n d l total target
  local -a ls=()
  for n in 1 2 3; do
    d=$BATS_TEST_TMPDIR/l$n
    mkdir -p "$d"
    head -c 1048576 /dev/urandom >"$d/data"
    l=$(layer_of "$d")
    ls+=("$l")
    # ages: l1 three days, l2 two days, l3 one day
    touch -d "$((4 - n)) days ago" "$(store_dir)/blobs/sha256/${l#sha256:}" \
      "$(store_dir)/layers/${l#sha256:}" \
      "$(store_dir)/layers/${l#sha256:}/meta.json"
  done
  run -0 --separate-stderr dsec-reap --dry-run --store-max 1000
  total=$(jq -s 'last.store_bytes' <<<"$output")
  [ "$total" -gt 3000000 ]
  # room for all but one and a half of them: the two oldest must go
  target=$(awk -v t="$total" 'BEGIN { printf "%.9f", (t - 1572864) / 1073741824 }')
  reap --store-max "$target"
  has layer "${ls[0]}" unreferenced removed
  has layer "${ls[1]}" unreferenced removed
  has layer "${ls[2]}" unreferenced kept
  out_jq -s --arg a "${ls[0]}" --arg b "${ls[1]}" \
    '[.[] | select(.action == "removed") | .id] == [$a, $b]'
  out_jq -s '(last.store_bytes <= last.store_max_bytes) and
    last.store_max_bytes > 0'
  not_in_store "${ls[0]}"
  not_in_store "${ls[1]}"
  in_store "${ls[2]}"
  in_store busybox:1
  # under the limit: nothing more goes
  reap --store-max "$target"
  has layer "${ls[2]}" unreferenced kept
  out_jq -s 'last.actions == 0'
}

# --- the plan, concurrency, crashes -----------------------------------------

# snapshot: every file of the root, the run dir and this test's cgroups,
# with size, mode and modification time, and the mounts under them.
snapshot() {
  {
    find "$DSEC_ROOT" "$DSEC_RUN" -printf '%p %s %m %T@\n' 2>/dev/null
    sb_cgroups
    grep -e "$DSEC_ROOT" -e "$DSEC_RUN" /proc/self/mountinfo | cut -d' ' -f5
  } | LC_ALL=C sort
}

@test "--dry-run prints the plan of the real run and changes nothing" {
  local exp expsup orphan ghost d free before plan done
  exp=$(sb_create --ttl 1)
  expsup=$(sup_of "$exp")
  orphan=$(sb_create)
  kill -9 "$(sup_of "$orphan")"
  ghost=$(fake_id)
  mkdir -p "$DSEC_RUN/$ghost/x" "$DSEC_ROOT/names"
  echo "$ghost" >"$DSEC_ROOT/names/ghost"
  d=$BATS_TEST_TMPDIR/free
  mkdir -p "$d"
  echo free >"$d/f"
  free=$(layer_of "$d")
  age "$free"
  echo x >"$(store_dir)/tmp/blob.tmp-00000000000000cc"
  touch -d '2 minutes ago' "$(store_dir)/tmp/blob.tmp-00000000000000cc"
  sb_wait_state "$exp" expired
  sb_wait_state "$orphan" died
  # an expired sandbox's supervisor still notes its image's hot set after
  # its state says so: the snapshot is taken once it has exited
  sb_wait_dead "$expsup"
  before=$(snapshot)
  run -0 --separate-stderr dsec-reap --dry-run --all
  out_jq -s 'last.dry_run == true and last.actions > 0'
  plan=$(jq -c -s '[.[:-1][] | {what, id, reason, freed_bytes}] | sort' \
    <<<"$output")
  diff <(echo "$before") <(snapshot)
  has sandbox "$exp" ttl "would remove"
  has sandbox "$orphan" orphan "would remove"
  has run_dir "$ghost" orphan "would remove"
  has name ghost orphan "would remove"
  has layer "$free" unreferenced "would remove"
  reap --all
  done=$(jq -c -s '[.[:-1][] | {what, id, reason, freed_bytes}] | sort' \
    <<<"$output")
  [ "$plan" = "$done" ] || { diff <(echo "$plan" | jq .) <(echo "$done" | jq .) >&2; false; }
  sb_gone "$exp"
  sb_gone "$orphan"
  not_in_store "$free"
}

@test "two reapers started at once do the work once" {
  local ids=() id i d free
  for i in 1 2 3; do
    id=$(sb_create)
    kill -9 "$(sup_of "$id")"
    ids+=("$id")
  done
  d=$BATS_TEST_TMPDIR/free
  mkdir -p "$d"
  echo free >"$d/f"
  free=$(layer_of "$d")
  age "$free"
  for id in "${ids[@]}"; do sb_wait_state "$id" died; done
  bg dsec-reap --all >"$BATS_TEST_TMPDIR/r1" 2>"$BATS_TEST_TMPDIR/e1"
  local p1=$BG
  bg dsec-reap --all >"$BATS_TEST_TMPDIR/r2" 2>"$BATS_TEST_TMPDIR/e2"
  local p2=$BG
  wait "$p1"
  wait "$p2"
  output=$(cat "$BATS_TEST_TMPDIR/r1" "$BATS_TEST_TMPDIR/r2")
  out_jq -s '[.[] | select(.type == "summary")] | length == 2 and
    all(.failed == 0)'
  for id in "${ids[@]}"; do
    out_jq -s --arg i "$id" '[.[] | select(.what == "sandbox" and .id == $i)] |
      length == 1 and .[0].action == "removed"'
    sb_gone "$id"
  done
  out_jq -s --arg i "$free" '[.[] | select(.id == $i)] | length == 1 and
    .[0].action == "removed"'
  not_in_store "$free"
  in_store busybox:1
}

@test "a create racing a reaper never loses its layers" {
  local d l k rc id out err cpid rpid ok=0 lost=0
  d=$BATS_TEST_TMPDIR/task
  mkdir -p "$d"
  echo answer >"$d/task.txt"
  # (not i: run -N sets $i, see helpers/common.bash)
  for k in 1 2 3 4 5 6 7 8; do
    # an unreferenced layer: the reaper takes it unless the create
    # references it first
    l=$(layer_of "$d")
    age "$l"
    out=$BATS_TEST_TMPDIR/create.$k
    err=$BATS_TEST_TMPDIR/create.$k.err
    # either may start first, a few milliseconds apart
    if ((k % 2)); then
      bg sh -c 'dsec-run create --image busybox:1 --layer "$1" >"$2" 2>"$3";
        echo $? >"$2.rc"' sh "$l" "$out" "$err"
      cpid=$BG
      sleep "0.0$k"
      bg dsec-reap --all >"$BATS_TEST_TMPDIR/reap.$k"
      rpid=$BG
    else
      bg dsec-reap --all >"$BATS_TEST_TMPDIR/reap.$k"
      rpid=$BG
      sleep "0.00$k"
      bg sh -c 'dsec-run create --image busybox:1 --layer "$1" >"$2" 2>"$3";
        echo $? >"$2.rc"' sh "$l" "$out" "$err"
      cpid=$BG
    fi
    wait "$cpid"
    wait "$rpid"
    rc=$(cat "$out.rc")
    if [ "$rc" -eq 0 ]; then
      id=$(jq -r .id "$out")
      echo "$id" >>"$SB_IDS"
      # created: its layer stays, and the sandbox sees it
      in_store "$l" || { echo "iteration $k: $id lost layer $l" >&2; false; }
      run -0 --separate-stderr dsec-run exec "$id" -- cat /task.txt
      out_jq '.stdout == "answer\n"'
      ! grep -q "\"$id\"" "$BATS_TEST_TMPDIR/reap.$k" ||
        { echo "iteration $k: the reaper took $id" >&2; false; }
      ok=$((ok + 1))
      dsec-run rm "$id" >/dev/null
    else
      # the reaper was first: a clean "not in the store", nothing left
      [ "$rc" -eq 3 ] || { echo "iteration $k: exit $rc: $(cat "$err")" >&2; false; }
      grep -q "no image or layer" "$err"
      lost=$((lost + 1))
    fi
    [ -z "$(ls -A "$DSEC_ROOT/sandboxes" | grep -v '^sb-')" ]
  done
  echo "created $ok, layer collected first $lost" >&3
  in_store busybox:1
}

@test "a reaper killed at any moment leaves what the next run finishes" {
  local ids=() id i d free p delay
  for i in 1 2 3 4; do
    id=$(sb_create --ttl 1)
    ids+=("$id")
  done
  for i in 1 2 3; do
    id=$(fake_id)
    mkdir -p "$DSEC_RUN/$id/a/b"
    ids+=("$id")
  done
  d=$BATS_TEST_TMPDIR/free
  mkdir -p "$d"
  head -c 300000 /dev/urandom >"$d/f"
  free=$(layer_of "$d")
  dsec-layer materialise "$free" >/dev/null
  age "$free"
  for id in "${ids[@]:0:4}"; do sb_wait_state "$id" expired; done
  for delay in 0.005 0.02 0.04; do
    dsec-reap --all >/dev/null 2>&1 3>&- &
    p=$!
    sleep "$delay"
    kill -9 "$p" 2>/dev/null || true
    wait "$p" || true
  done
  reap --all
  out_jq -s 'last.failed == 0'
  for id in "${ids[@]}"; do
    sb_gone "$id"
  done
  not_in_store "$free"
  [ ! -e "$(store_dir)/layers/${free#sha256:}" ]
  in_store busybox:1
  reap --all
  [ "${#lines[@]}" -eq 1 ]
}

@test "what cannot be removed is a failed record and exit 1; the next run finishes" {
  local id
  id=$(fake_id)
  mkdir -p "$DSEC_RUN/$id"
  touch "$DSEC_RUN/$id/stuck"
  chattr +i "$DSEC_RUN/$id/stuck" 2>/dev/null || skip "no chattr +i here"
  run -1 --separate-stderr dsec-reap
  chattr -i "$DSEC_RUN/$id/stuck"
  has run_dir "$id" orphan failed
  out_jq -s --arg i "$id" 'any(.[]; .id == $i and (.error | type) == "string")'
  out_jq -s 'last.type == "summary" and last.failed == 1'
  stderr_has "could not be removed"
  reap
  has run_dir "$id" orphan removed
  [ ! -e "$DSEC_RUN/$id" ]
}

# --- examples/cron ----------------------------------------------------------

@test "examples/cron: the crontab line and the systemd units run dsec-reap" {
  local line cmd units=$BATS_TEST_TMPDIR/units
  line=$(grep -vE '^[[:space:]]*(#|$|[A-Z]+=)' "$DSEC_SRCDIR/examples/cron/crontab")
  [ "$(wc -l <<<"$line")" -eq 1 ]
  # five time fields, the user, the command
  [ "$(awk '{ print $6 }' <<<"$line")" = root ]
  cmd=$(awk '{ for (i = 7; i <= NF; i++) printf "%s%s", $i, (i < NF ? " " : "") }' \
    <<<"$line")
  [[ $cmd == "dsec-reap "* ]]
  cmd=${cmd//\/var\/log\/dsec-reap.jsonl/$BATS_TEST_TMPDIR/reap.jsonl}
  run -0 --separate-stderr sh -c "$cmd"
  jq -e -s 'length > 0 and last.type == "summary"' "$BATS_TEST_TMPDIR/reap.jsonl"
  # the service runs the same command
  cmd=$(sed -n 's/^ExecStart=//p' "$DSEC_SRCDIR/examples/cron/dsec-reap.service")
  [[ $cmd == /usr/local/bin/dsec-reap* ]]
  run -0 --separate-stderr sh -c "dsec-reap ${cmd#/usr/local/bin/dsec-reap}"
  out_jq -s 'last.type == "summary"'
  command -v systemd-analyze >/dev/null || skip "no systemd-analyze"
  mkdir "$units"
  cp "$DSEC_SRCDIR"/examples/cron/dsec-reap.service \
    "$DSEC_SRCDIR"/examples/cron/dsec-reap.timer "$units/"
  sed -i "s#^ExecStart=/usr/local/bin/dsec-reap#ExecStart=$(command -v dsec-reap)#" \
    "$units/dsec-reap.service"
  run -0 --separate-stderr systemd-analyze verify --man=no \
    "$units/dsec-reap.timer" "$units/dsec-reap.service"
  [ -z "$stderr" ] || { echo "$stderr" >&2; false; }
}

@test "dsec-vm boot entries the index no longer lists go with --all; the listed and young ones stay" {
  local vm old cur young
  vm="$(store_dir)/vm"
  old=$(printf 'a%.0s' $(seq 64))
  cur=$(printf 'b%.0s' $(seq 64))
  young=$(printf 'c%.0s' $(seq 64))
  mkdir -p "$vm/$old" "$vm/$cur" "$vm/$young"
  # whole entries, as dsec-vm builds them (dsec-layer verify removes a
  # damaged one)
  for k in "$old" "$cur" "$young"; do
    printf '{"format":"dsec-vm-boot/2","kernel_digest":"sha256:%s"}\n' "$k" \
      >"$vm/$k/boot.json"
    head -c 100000 /dev/zero >"$vm/$k/vmlinux"
    echo cpio >"$vm/$k/initramfs.cpio"
  done
  printf '{"version":1,"entries":[{"key":"sha256:%s","inputs":[]}]}\n' "$cur" \
    >"$vm/index.json"
  touch -d '-1 hour' "$vm/$old" "$vm/$cur"
  reap
  has vm-boot "sha256:$old" unreferenced kept
  lacks vm-boot "sha256:$cur"
  lacks vm-boot "sha256:$young"
  reap --all
  has vm-boot "sha256:$old" unreferenced removed
  out_jq -s --arg i "sha256:$old" 'any(.[]; .id == $i and .freed_bytes > 0)'
  [ ! -e "$vm/$old" ]
  [ -e "$vm/$cur/vmlinux" ]
  [ -d "$vm/$young" ]
}
