#!/usr/bin/env bats
# Task worlds (dsec-run create with spec `services`): an agent sandbox and
# a sandbox per service on one private network.  Real services from
# Debian's archive: Redis (apt-get download + dpkg -x, see
# helpers/mkworld-image.sh, cached between runs) and busybox's httpd.  The
# agent reaches them by name, the grader reads the database through
# --service, fork's children each keep their own data, suspend/resume
# keeps it, rm and dsec-reap leave no process, cgroup or namespace of any
# member, and a service that never gets ready fails the create cleanly.
# Waits poll for a state; timeouts only keep a broken build from hanging.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
  flock /tmp/dsec-make.lock cp "$DSEC_BUILDDIR/dsec-reap" \
    "$BATS_FILE_TMPDIR/bin/dsec-reap"
  local cache=${DSEC_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsec-tests}
  local rc=0
  WORLD_TAR=$("$DSEC_SRCDIR/tests/helpers/mkworld-image.sh" "$DSEC_SRCDIR" \
    "$cache") || rc=$?
  export WORLD_TAR WORLD_SKIP=
  [ "$rc" -eq 0 ] || WORLD_SKIP="Debian's archive is unreachable (apt-get download)"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || return "$rc"
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  [ -z "$WORLD_SKIP" ] || skip "$WORLD_SKIP"
  run_setup
  dsec-pull --name world:1 "tar:$WORLD_TAR" >/dev/null
}

teardown() {
  sb_teardown
}

# --- helpers of this file ---------------------------------------------------

# world_spec [JQ-FILTER]: an agent with Redis (db), ready when it answers
# PING (it takes connections while it loads its data, and answers LOADING
# then), and busybox httpd (web), ready when it takes connections; changed
# by the filter.
world_spec() {
  jq -c "${1:-.}" <<'EOF'
{"image": "world:1",
 "services": [
  {"name": "db", "image": "world:1",
   "cmd": ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no",
           "--dir", "/data", "--appendonly", "yes", "--appendfsync", "always",
           "--save", ""],
   "resources": {"memory_mb": 256, "pids": 64},
   "ready": {"cmd": ["sh", "-c", "redis-cli ping | grep -qx PONG"],
             "timeout_s": 30}},
  {"name": "web", "image": "world:1",
   "cmd": ["httpd", "-f", "-p", "8080", "-h", "/www"],
   "ready": {"tcp": 8080, "timeout_s": 30}}]}
EOF
}

# world_create [JQ-FILTER]: creates the world, records every member's id
# for teardown, prints the agent's record.
world_create() {
  local rec
  rec=$(world_spec "$@" | dsec-run create --spec -) || return
  jq -r '.id, .services[].id' <<<"$rec" >>"$SB_IDS"
  echo "$rec"
}

# xout ID [--service NAME] -- CMD...: the command's stdout (exit 0 or fail).
xout() {
  local res
  res=$(dsec-run exec "$@") || {
    echo "exec $* failed: $res" >&2
    return 1
  }
  jq -r .stdout <<<"$res"
}

# db_keys WORLD: the keys of the world's database, sorted, comma-separated
# (read by the grader, in the service).
db_keys() {
  dsec-run exec --service db "$1" -- redis-cli keys '*' |
    jq -r '.stdout | split("\n") | map(select(. != "")) | sort | join(",")'
}

# state_of ID: the sandbox's state.
state_of() {
  dsec-run inspect "$1" | jq -r .state
}

# wait_state ID STATE: polls (30 s at most) until ID is in STATE.
wait_state() {
  local i
  for ((i = 0; i < 300; i++)); do
    [ "$(state_of "$1" 2>/dev/null)" = "$2" ] && return 0
    sleep 0.1
  done
  echo "$1 is $(state_of "$1"), not $2" >&2
  return 1
}

# world_gone ID...: no directory and no cgroup of any of the sandboxes.
world_gone() {
  local id
  for id in "$@"; do
    [ ! -e "$DSEC_ROOT/sandboxes/$id" ] || { echo "$id is still there" >&2; return 1; }
    [ -z "$(ls -d /sys/fs/cgroup/*/dsec/"$id" 2>/dev/null)" ] ||
      { echo "$id's cgroups are left" >&2; return 1; }
  done
}

# frozen ID: the sandbox's cgroup is frozen (v1 freezer or v2).
frozen() {
  local f
  for f in /sys/fs/cgroup/freezer/dsec/"$1"/freezer.state; do
    [ -e "$f" ] && { grep -qx FROZEN "$f"; return; }
  done
  for f in /sys/fs/cgroup/dsec/"$1"/cgroup.events \
    /sys/fs/cgroup/unified/dsec/"$1"/cgroup.events; do
    [ -e "$f" ] && { grep -qx 'frozen 1' "$f"; return; }
  done
  echo "no freezer of $1" >&2
  return 1
}

# --- tests ------------------------------------------------------------------

@test "a world: the agent reaches its services by name; the grader reads the database with --service" {
  local rec a db web
  rec=$(world_create)
  a=$(jq -r .id <<<"$rec")
  db=$(jq -r '.services[] | select(.name == "db") | .id' <<<"$rec")
  web=$(jq -r '.services[] | select(.name == "web") | .id' <<<"$rec")
  [ "$(jq -r .state <<<"$rec")" = running ]
  [ "$(jq -r '[.services[].name] | join(",")' <<<"$rec")" = db,web ]

  # the agent: by name, over the world's network
  [ "$(xout "$a" -- redis-cli -h db set answer 42)" = OK ]
  [ "$(xout "$a" -- wget -qO- http://web:8080/)" = "hello from web" ]
  run -0 xout "$a" -- cat /etc/hosts
  [[ $output == *"agent db web"* ]]

  # the grader: in the service, exclusive too
  [ "$(xout --service db "$a" -- redis-cli get answer)" = 42 ]
  [ "$(xout --service db --exclusive "$a" -- redis-cli get answer)" = 42 ]
  [ "$(xout --service agent "$a" -- hostname)" = dsec ]

  # each member is a sandbox of its own: its processes are not the
  # agent's to see or signal, its cgroup and id range are its own
  run -0 xout "$a" -- ps -o comm
  [[ $output != *redis* ]]
  # the agent can neither take the database's port nor kill it
  run -1 --separate-stderr dsec-run exec --timeout 5 "$a" -- nc -l -p 6379
  jq -e '.exit_code == 1 and (.stderr | contains("in use"))' <<<"$output"
  dsec-run exec "$a" -- kill -9 -1 >/dev/null || true
  [ "$(xout --service db "$a" -- redis-cli ping)" = PONG ]
  run -0 xout --service db "$a" -- ps -o comm
  [[ $output == *redis* ]] && [[ $output != *httpd* ]]
  for id in "$a" "$db" "$web"; do
    ls -d /sys/fs/cgroup/*/dsec/"$id" >/dev/null
  done
  run -0 bash -c "for id in $a $db $web; do dsec-run inspect \$id | jq .idmap.host_base; done | sort -u | wc -l"
  [ "$output" -eq 3 ]
  # ... and the network is the world's: one namespace, not the host's
  local nets
  nets=$(for id in "$a" "$db" "$web"; do
    readlink "/proc/$(dsec-run inspect "$id" | jq -r .init_pid)/ns/net"
  done | sort -u)
  [ "$(wc -l <<<"$nets")" -eq 1 ]
  [ "$nets" != "$(readlink /proc/self/ns/net)" ]
  run -0 bash -c "for id in $a $db; do readlink /proc/\$(dsec-run inspect \$id | jq -r .init_pid)/ns/pid; done | sort -u | wc -l"
  [ "$output" -eq 2 ]
  # every member's /sys is the host's shared sysfs (a service could not
  # mount one of its own in the agent's network namespace)
  for id in "$a" "$db" "$web"; do
    dsec-run inspect "$id" | jq -e '.sysfs == "shared"'
  done
  [ "$(xout --service db "$a" -- stat -c %d /sys)" = "$(xout "$a" -- stat -c %d /sys)" ]
  [ "$(xout --service db "$a" -- sh -c 'ls /sys/devices/system/cpu | grep -c "^cpu[0-9]"')" -ge 1 ]

  # ps: the world once, its services on the agent's line
  run -0 --separate-stderr dsec-run ps
  [ "$(wc -l <<<"$output")" -eq 1 ]
  jq -e --arg a "$a" '.id == $a and ([.services[] | .state] == ["running", "running"])' <<<"$output"
  dsec-run inspect "$a" | jq -e '.services | length == 2'
  dsec-run inspect "$db" | jq -e --arg a "$a" '.world.agent == $a and .world.service == "db"'

  # events: the world's, each record naming its member; --follow ends
  # with the world
  bg sh -c "timeout 60 dsec-run events --follow $a >'$BATS_TEST_TMPDIR/follow'"
  local follow=$BG
  run -0 --separate-stderr dsec-run events "$a"
  for s in agent db web; do
    jq -se --arg s "$s" 'any(.[]; .service == $s and .type == "created")' <<<"$output"
  done
  jq -se 'all(.[]; .service != null)' <<<"$output"
  # the service's own output is its log
  [ -s "$DSEC_ROOT/sandboxes/$db/service.log" ]

  # a service goes with its world, not alone
  run -3 --separate-stderr dsec-run rm "$db"
  [[ $stderr == *"service \`db\` of world $a"* ]]
  local pids net
  pids=$(for id in "$a" "$db" "$web"; do
    dsec-run inspect "$id" | jq -r '.supervisor_pid, .init_pid'
  done)
  net=$(readlink "/proc/$(dsec-run inspect "$db" | jq -r .init_pid)/ns/net")
  run -0 --separate-stderr dsec-run rm "$a"
  jq -e '.type == "removed" and (.services | length == 2)' <<<"$output"
  world_gone "$a" "$db" "$web"
  for p in $pids; do sb_wait_dead "$p"; done
  wait "$follow"
  jq -se 'any(.[]; .service == "db" and .type == "exec")' "$BATS_TEST_TMPDIR/follow"
  # no process is left in the world's network namespace
  [ -z "$(find /proc/[0-9]*/ns/net -lname "$net" 2>/dev/null)" ]
}

@test "suspend freezes the whole world, resume thaws it, the data stays; checkpoint, kill, serve" {
  local a
  a=$(world_create | jq -r .id)
  [ "$(xout "$a" -- redis-cli -h db set k before)" = OK ]
  run -0 --separate-stderr dsec-run suspend "$a"
  jq -e '.type == "suspended" and ([.services[].service] == ["db", "web"])' <<<"$output"
  run -0 --separate-stderr dsec-run ps
  jq -e '.state == "suspended" and all(.services[]; .state == "suspended")' <<<"$output"
  # frozen: every member's cgroup
  for id in $(dsec-run inspect "$a" | jq -r '.id, .services[].id'); do
    frozen "$id"
  done
  run -0 --separate-stderr dsec-run resume "$a"
  jq -e '.type == "resumed" and (.services | length == 2)' <<<"$output"
  [ "$(xout --service db "$a" -- redis-cli get k)" = before ]
  [ "$(xout "$a" -- redis-cli -h db get k)" = before ]
  # released: every member checkpointed, every process gone; resume boots
  # the world again, its services ready on their data
  local sups
  sups=$(for id in $(dsec-run inspect "$a" | jq -r '.id, .services[].id'); do
    dsec-run inspect "$id" | jq -r .supervisor_pid
  done)
  run -0 --separate-stderr dsec-run suspend --release "$a"
  jq -e '.released and all(.services[]; .released)' <<<"$output"
  for p in $sups; do sb_wait_dead "$p"; done
  run -0 --separate-stderr dsec-run resume "$a"
  jq -e '.type == "resumed" and .lost == "processes" and (.services | length == 2)' <<<"$output"
  [ "$(xout --service db "$a" -- redis-cli get k)" = before ]
  [ "$(xout "$a" -- wget -qO- http://web:8080/)" = "hello from web" ]

  # checkpoint: one layer per member
  run -0 --separate-stderr dsec-run checkpoint "$a"
  jq -e '.type == "checkpoint" and (.layer.digest | startswith("sha256:"))
         and ([.services[] | .service] == ["db", "web"])
         and all(.services[]; .layer.digest | startswith("sha256:"))' <<<"$output"
  run -3 --separate-stderr dsec-run checkpoint --name w@1 "$a"

  # exec --service names a member the world has
  run -3 --separate-stderr dsec-run exec --service nosuch "$a" -- true
  [[ $stderr == *"has no service \`nosuch\`"* ]]
  # so do lines of --requests, each to its member
  printf '%s\n' '{"cmd":["hostname"]}' '{"cmd":["redis-cli","get","k"],"service":"db"}' \
    '{"cmd":["true"],"service":"nosuch"}' >"$BATS_TEST_TMPDIR/reqs"
  run -3 --separate-stderr dsec-run exec "$a" --requests "$BATS_TEST_TMPDIR/reqs"
  [ "$(jq -sc 'map(.stdout)' <<<"$output")" = '["dsec\n","before\n"]' ]
  [[ $stderr == *"line 3"* ]]
  # serve's exec takes "service" too
  run -0 --separate-stderr dsec-run serve <<<"{\"rid\":1,\"op\":\"exec\",\"id\":\"$a\",\"service\":\"db\",\"cmd\":[\"redis-cli\",\"get\",\"k\"]}"
  jq -e '.stdout == "before\n"' <<<"$output"
  # kill reaches every member
  run -0 --separate-stderr dsec-run kill "$a" KILL
  jq -e '(.services | length) == 2 and all(.services[]; .type != "error")' <<<"$output"
}

@test "fork copies the whole world: each child's database is its own" {
  local a c0 c1
  a=$(world_create | jq -r .id)
  [ "$(xout "$a" -- redis-cli -h db set parent 1)" = OK ]
  run -0 --separate-stderr dsec-run fork --count 2 "$a"
  jq -r '.id, .services[].id' <<<"$output" >>"$SB_IDS"
  [ "$(wc -l <<<"$output")" -eq 2 ]
  jq -se 'all(.[]; (.services | length) == 2 and (.checkpoints | keys) == ["db", "web"])' <<<"$output"
  c0=$(jq -r 'select(.index == 0) | .id' <<<"$output")
  c1=$(jq -r 'select(.index == 1) | .id' <<<"$output")
  [ "$(xout "$c0" -- redis-cli -h db set child0 a)" = OK ]
  [ "$(xout "$c1" -- redis-cli -h db set child1 b)" = OK ]
  [ "$(db_keys "$c0")" = child0,parent ]
  [ "$(db_keys "$c1")" = child1,parent ]
  [ "$(db_keys "$a")" = parent ]
  # the children's networks are theirs: each its own namespace
  run -0 bash -c "for id in $a $c0 $c1; do readlink /proc/\$(dsec-run inspect \$id | jq -r .init_pid)/ns/net; done | sort -u | wc -l"
  [ "$output" -eq 3 ]
  [ "$(xout "$c0" -- wget -qO- http://web:8080/)" = "hello from web" ]
}

@test "a service that never gets ready fails the create, with its output, and leaves nothing; bad world specs are refused" {
  run -1 --separate-stderr dsec-run create --spec <(world_spec '
    .services[1].cmd = ["sh", "-c", "echo web-is-starting; sleep 600"]
    | .services[1].ready.timeout_s = 1')
  [[ $stderr == *"service web: not ready within 1 s"* ]]
  [[ $stderr == *web-is-starting* ]]
  sb_track
  [ -z "$(ls "$DSEC_ROOT/sandboxes" | grep '^sb-' || true)" ]

  # a command that ends is reported as such, with what it said
  run -1 --separate-stderr dsec-run create --spec <(world_spec '
    .services[0].cmd = ["sh", "-c", "echo no-db-today >&2; exit 3"]')
  [[ $stderr == *"service db: its command ended {\"exit_code\":3}"* ]]
  [[ $stderr == *no-db-today* ]]
  [ -z "$(ls "$DSEC_ROOT/sandboxes" | grep '^sb-' || true)" ]
  # (teardown checks that no process or cgroup of theirs is left)

  # and specs that cannot be served are refused as bad input
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.backend = "microvm"')
  [[ $stderr == *"need a container or fncall agent"* ]]
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.services[0].name = "agent"')
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.services[1].name = "db"')
  [[ $stderr == *"two services are named"* ]]
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.services[0].ready = {}')
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.services[0].cmd = []')
  run -3 --separate-stderr dsec-run create --spec <(world_spec '.world = {"agent": "sb-0123456789abcdef", "service": "x", "cmd": ["x"], "names": ["agent"]} | del(.services)')
  [[ $stderr == *"world"* ]]
  run -3 --separate-stderr dsec-run pool --spec <(world_spec) --size 1
  local id
  id=$(sb_create)
  run -3 --separate-stderr dsec-run exec --service db "$id" -- true
  [[ $stderr == *"is no world"* ]]
  run -2 --separate-stderr dsec-run exec --service 'Bad!' "$id" -- true
}

@test "dsec-reap removes an expired world, every member, and leaves nothing" {
  local rec a
  rec=$(world_create '.ttl_s = 1')
  a=$(jq -r .id <<<"$rec")
  wait_state "$a" expired
  # the services end with their agent
  for id in $(jq -r '.services[].id' <<<"$rec"); do
    wait_state "$id" stopped
  done
  run -0 --separate-stderr dsec-reap
  jq -se --arg a "$a" 'any(.[]; .id == $a and .action == "removed")' <<<"$output"
  [ "$(jq -s '[.[] | select(.what == "sandbox" and .action == "removed")] | length' <<<"$output")" -eq 3 ]
  # shellcheck disable=SC2046
  world_gone $(jq -r '.id, .services[].id' <<<"$rec")
}
