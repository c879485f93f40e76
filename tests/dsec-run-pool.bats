#!/usr/bin/env bats
# dsec-run pool: warm sandboxes that create claims.

bats_require_minimum_version 1.5.0
load helpers/common

setup() {
  common_setup
  require_root
  # bats' own temporary directories are 0700: the sandboxes' run dir
  # lives elsewhere, removed in teardown
  DSEC_RUN=$(mktemp -d /tmp/dsec-pool-run.XXXXXX)
  export DSEC_RUN
  dsec-pull --name busybox:1 "tar:$(busybox_tar)" >/dev/null
  POOL_PID=
}

teardown() {
  if [ -n "$POOL_PID" ]; then
    kill -TERM "$POOL_PID" 2>/dev/null || true
    wait "$POOL_PID" 2>/dev/null || true
  fi
  local ids id rc=0
  ids=$(dsec-run ps --all 2>/dev/null | jq -r .id)
  # shellcheck disable=SC2086
  if [ -n "$ids" ] && ! dsec-run rm --force $ids >/dev/null; then
    echo "teardown: dsec-run rm --force failed" >&2
    rc=1
  fi
  for id in $ids; do
    if ls -d /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null; then
      echo "teardown: a cgroup of $id is left" >&2
      rc=1
    fi
  done
  layer_mounts_clean
  rm -rf "$DSEC_RUN"
  return $rc
}

# waits (10 s at most) until the pool keeps N sandboxes
pool_ready() {
  local n=$1 i
  for i in $(seq 100); do
    [ "$(ls "$DSEC_ROOT"/pools/*/ready 2>/dev/null | grep -c '^sb-')" -ge "$n" ] &&
      return 0
    sleep 0.1
  done
  echo "the pool keeps fewer than $n sandboxes: $(ls "$DSEC_ROOT"/pools/*/ready 2>/dev/null)" >&2
  return 1
}

start_pool() {
  dsec-run pool "$@" >"$BATS_TEST_TMPDIR/pool.out" 2>"$BATS_TEST_TMPDIR/pool.err" &
  POOL_PID=$!
}

@test "pool: keeps --size sandboxes, visible to ps, labelled with the pool" {
  start_pool --image busybox:1 --memory 64 --size 2
  pool_ready 2
  run -0 --separate-stderr dsec-run ps
  [ "$(jq -s 'length' <<<"$output")" -eq 2 ]
  jq -e -s 'all(.[]; .labels["dsec.pool"] | length == 64)' <<<"$output"
}

@test "pool: a create of the same spec claims one, with its name and labels, and the pool refills" {
  start_pool --image busybox:1 --memory 64 --size 2
  pool_ready 2
  local pooled
  pooled=$(ls "$DSEC_ROOT"/pools/*/ready)
  run -0 --separate-stderr dsec-run create --image busybox:1 --memory 64 \
    --name mine --label job=7
  jq -e '.type == "sandbox" and .state == "running" and (.pool | length == 64)' <<<"$output"
  local id
  id=$(jq -r .id <<<"$output")
  grep -qx "$id" <<<"$pooled"
  run -0 --separate-stderr dsec-run exec mine -- echo claimed
  jq -e '.stdout == "claimed\n"' <<<"$output"
  run -0 --separate-stderr dsec-run ps --label job=7
  jq -e --arg id "$id" '.id == $id and .name == "mine" and .labels == {"job":"7"}' <<<"$output"
  # refilled: two ready again, neither of them the claimed one
  pool_ready 2
  ! ls "$DSEC_ROOT"/pools/*/ready | grep -qx "$id"
}

@test "pool: a different spec is not served from the pool" {
  start_pool --image busybox:1 --memory 64 --size 1
  pool_ready 1
  run -0 --separate-stderr dsec-run create --image busybox:1 --memory 128
  jq -e 'has("pool") | not' <<<"$output"
}

@test "pool: serve's create claims too" {
  start_pool --image busybox:1 --size 1
  pool_ready 1
  run -0 --separate-stderr dsec-run serve <<<'{"op":"create","rid":1,"spec":{"image":"busybox:1"}}'
  jq -e '.rid == 1 and (.pool | length == 64)' <<<"$output"
}

@test "pool: a second pool of the same spec is refused; stopping removes what was not claimed" {
  start_pool --image busybox:1 --size 2
  pool_ready 2
  run -3 --separate-stderr dsec-run pool --image busybox:1 --size 2
  [[ $stderr == *"already"* ]]
  run -0 --separate-stderr dsec-run create --image busybox:1
  local kept
  kept=$(jq -r .id <<<"$output")
  kill -TERM "$POOL_PID"
  wait "$POOL_PID" || true
  POOL_PID=
  jq -e -s 'last | .type == "pool_stopped"' "$BATS_TEST_TMPDIR/pool.out"
  run -0 --separate-stderr dsec-run ps
  [ "$(jq -r .id <<<"$output")" = "$kept" ]
  [ -z "$(ls -A "$DSEC_ROOT/pools")" ]
}

@test "pool: a create finds the pool by the spec text its key is the sha256 of; run --rm claims too" {
  start_pool --image busybox:1 --memory 64 --label team=a --size 2
  pool_ready 2
  local dir key
  dir=$(echo "$DSEC_ROOT"/pools/*)
  key=$(basename "$dir")
  # KEY/key.json is what the key hashes: the spec without name and labels,
  # compact, keys sorted
  [ "$(sha256sum <"$dir/key.json" | cut -d' ' -f1)" = "$key" ]
  jq -e 'has("labels") or has("name") | not' "$dir/key.json"
  [ "$(jq -cS . "$dir/key.json")" = "$(cat "$dir/key.json")" ]
  # a pool directory that is not a key, or whose key.json differs, is
  # passed over
  mkdir -p "$DSEC_ROOT/pools/not-a-key/ready" "$DSEC_ROOT/pools/${key//?/0}/ready"
  cp "$dir/key.json" "$DSEC_ROOT/pools/not-a-key/"
  jq -c '.resources.memory_mb = 65' "$dir/key.json" >"$DSEC_ROOT/pools/${key//?/0}/key.json"
  local pooled
  pooled=$(ls "$dir/ready")
  run -0 --separate-stderr dsec-run run --rm --image busybox:1 --memory 64 -- echo pooled
  jq -e '.stdout == "pooled\n"' <<<"$output"
  grep -qx "$(jq -r .id <<<"$output")" <<<"$pooled"
  local id
  id=$(jq -r .id <<<"$output")
  run -0 --separate-stderr dsec-run ps --all
  [ -z "$(jq -r --arg id "$id" 'select(.id == $id) | .id' <<<"$output")" ] # removed
  rm -rf "$DSEC_ROOT/pools/not-a-key" "$DSEC_ROOT/pools/${key//?/0}"
}

@test "pool: the supervisors of the sandboxes it made are reaped once they end" {
  start_pool --image busybox:1 --size 1
  pool_ready 1
  local i zombies pooled
  for i in 1 2 3; do
    pooled=$(ls "$DSEC_ROOT"/pools/*/ready)
    run -0 --separate-stderr dsec-run run --rm --image busybox:1 -- true
    grep -qx "$(jq -r .id <<<"$output")" <<<"$pooled"
    pool_ready 1
  done
  # each claimed sandbox's supervisor has exited by now or does soon; the
  # pool (their parent) leaves none of them a zombie
  for i in $(seq 50); do
    zombies=$(ps -o stat= --ppid "$POOL_PID" | grep -c '^Z' || true)
    [ "$zombies" -eq 0 ] && break
    sleep 0.1
  done
  [ "$zombies" -eq 0 ] || { ps -o pid,stat,comm --ppid "$POOL_PID" >&2; false; }
}

@test "pool: usage errors" {
  run -2 --separate-stderr dsec-run pool --image busybox:1 --size 0
  run -2 --separate-stderr dsec-run pool --image busybox:1 extra-argument
  run -2 --separate-stderr dsec-run create --image busybox:1 --size 2
}
