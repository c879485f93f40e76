#!/usr/bin/env bats
# examples/slurm/run.sh end to end on a real Slurm cluster brought up on
# this machine: munged with its own key and socket, slurmctld and three
# slurmd (`slurmd -N node1..3`) on non-default ports, all from a generated
# slurm.conf in BATS_FILE_TMPDIR; each node gets a DSEC_ROOT of its own,
# and the store is shared as on a cluster file system.  Everything started
# here is stopped by its PID, whatever happens.  Skipped, with the reason,
# only where Slurm is not installed (bootstrap.sh installs slurmctld,
# slurmd, munge and slurm-client) or cannot be started.

bats_require_minimum_version 1.5.0

load helpers/common

SLURM_TOOLS="munged slurmctld slurmd srun salloc sinfo squeue scancel scontrol"

# The test cluster's files and PIDs.
D() { echo "$BATS_FILE_TMPDIR/slurm"; }

# Waits (up to $2 seconds) until command $1 succeeds.
wait_for() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    eval "$1" && return 0
    sleep 0.2
  done
  return 1
}

free_port() { [ -z "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }

# Ends every job of the test cluster, then the daemons (slurmd first, then
# slurmctld, then munged), each by the PID recorded when it was started.
stop_cluster() {
  local d pid i
  d=$(D)
  [ -f "$d/pids" ] || return 0
  if [ -n "$(pidof_recorded slurmctld)" ]; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
    wait_for '[ -z "$(squeue -h 2>/dev/null)" ]' 15 || true
  fi
  for name in slurmd slurmctld munged; do
    for pid in $(pidof_recorded "$name"); do
      kill "$pid" 2>/dev/null || continue
      for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
      done
      kill -KILL "$pid" 2>/dev/null || true
    done
  done
  rm -f "$d/pids"
}

# The recorded PIDs of daemon NAME that still run.
pidof_recorded() {
  local name pid
  [ -f "$(D)/pids" ] || return 0
  while read -r name pid; do
    [ "$name" = "$1" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
  done <"$(D)/pids"
  return 0
}

# start DAEMON-NAME COMMAND...: in the background, its output to a log,
# with bats' descriptor 3 closed, its PID recorded.
start() {
  local name=$1
  shift
  "$@" </dev/null >>"$(D)/log/$name.out" 2>&1 3>&- &
  echo "$name $!" >>"$(D)/pids"
}

start_cluster() {
  local d base try n host
  d=$(D)
  mkdir -p "$d/munge" "$d/state" "$d/log" "$d/spool"
  chmod 0755 "$d" "$d/munge"
  # a key of our own: no other cluster's daemon can talk to this one
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 2>/dev/null
  chmod 0400 "$d/munge/munge.key"
  start munged munged --foreground --force \
    --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/log/munged.log" \
    --seed-file="$d/munge/munged.seed"
  wait_for "[ -S '$d/munge/munge.socket' ]" 10 ||
    { echo "munged did not start"; return 1; }

  for ((try = 0; try < 20; try++)); do
    base=$((20000 + RANDOM % 20000))
    free_port "$base" && free_port $((base + 1)) && free_port $((base + 2)) &&
      free_port $((base + 3)) && break
  done
  host=$(uname -n)
  cat >"$d/slurm.conf" <<EOF
ClusterName=dsectest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
AuthInfo=socket=$d/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=/dev/null
EOF
  for n in 1 2 3; do
    echo "NodeName=node$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + n)) CPUs=2 RealMemory=2048 State=UNKNOWN" \
      >>"$d/slurm.conf"
  done
  echo "PartitionName=dsec Nodes=node[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" \
    >>"$d/slurm.conf"
  export SLURM_CONF=$d/slurm.conf

  start slurmctld slurmctld -D -f "$SLURM_CONF"
  for n in 1 2 3; do
    mkdir -p "$d/spool/node$n"
    start slurmd slurmd -D -N "node$n" -f "$SLURM_CONF"
  done
  wait_for '[ "$(sinfo -h -N -o "%N %t" 2>/dev/null | grep -c " idle$")" -eq 3 ]' 40 ||
    { echo "the nodes did not come up: $(sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')"
      tail -n 5 "$d"/log/*.log "$d"/log/*.out 2>/dev/null
      return 1; }
}

setup_file() {
  local t why
  for t in $SLURM_TOOLS; do
    command -v "$t" >/dev/null ||
      skip "Slurm is not installed ($t missing; bootstrap.sh installs slurmctld slurmd munge slurm-client)"
  done
  [ "$(id -u)" -eq 0 ] || skip "starting slurmd and munged needs root"
  command -v jq >/dev/null || skip "needs jq"
  command -v ss >/dev/null || skip "needs ss (iproute2)"
  [ -x /bin/busybox ] || skip "needs busybox-static (/bin/busybox)"
  if ! why=$(start_cluster 2>&1); then
    stop_cluster
    skip "Slurm cannot be started here: $why"
  fi
  SLURM_CONF=$(D)/slurm.conf
  export SLURM_CONF
  "$DSEC_SRCDIR/examples/mkrootfs-busybox.sh" "$BATS_FILE_TMPDIR/busybox.tar.gz" >&2 ||
    { stop_cluster; false; }
}

teardown_file() {
  stop_cluster
}

setup() {
  common_setup
  T=$BATS_TEST_TMPDIR
  # a shared store, and a DSEC_ROOT per node (several slurmd on one host)
  export DSEC_STORE=$T/store DSEC_NODE_ROOTS=$T/nodes DSEC_SLURM_KEEP=$T/keep
  export TMPDIR=$T/tmp
  mkdir -p "$TMPDIR"
  # the test's nodes offer no VM backends (a request for one stays
  # unplaced), whether or not this host has QEMU
  export DSEC_QEMU=$T/no-qemu
}

# Every sandbox of every node's root is removed, as its owner, whatever
# the test left.
teardown() {
  local root dir owner
  for root in "$T"/nodes/*/root; do
    [ -d "$root/sandboxes" ] || continue
    owner=$(stat -c %U "$root")
    for dir in "$root"/sandboxes/sb-*; do
      [ -d "$dir" ] || continue
      setpriv --reuid="$owner" --regid="$(stat -c %g "$root")" --clear-groups \
        env DSEC_ROOT="$root" DSEC_RUN="${root%/root}/run" \
        "$DSEC_BUILDDIR/dsec-run" rm --force "${dir##*/}" >/dev/null 2>&1 || true
    done
  done
  squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
  # each node's mounts of layers (dsec-reap's to undo on a real node)
  for root in "$T"/nodes/*/root; do
    [ -d "$root" ] || continue
    DSEC_ROOT=$root layer_mounts_clean "${root%/root}/run"
  done
}

# assert_layers_shared FORMAT: the nodes ran bb:1 from the shared store,
# as EROFS (each node mounted the image the pull made, from the shared
# file, and wrote nothing to the store) or as directories (rootless).
assert_layers_shared() {
  local hex n
  hex=$(jq -r '.layers[0].digest | ltrimstr("sha256:")' "$T/pulled.json")
  if [ "$1" = erofs ]; then
    [ "$(stat -c %Y.%s "$T/store/layers/$hex/layer.erofs")" = "$(cat "$T/erofs.stamp")" ]
    [ ! -e "$T/store/layers/$hex/rootfs" ]
    for n in node1 node2 node3; do
      awk -v p="$T/nodes/$n/run/layers/$hex/mnt" -v i="$T/store/layers/$hex/layer.erofs" \
        '$2 == p && $1 == i { ok = 1 } END { exit !ok }' /proc/self/mounts
    done
  else
    [ -d "$T/store/layers/$hex/rootfs" ]
  fi
}

requests() {
  cat >"$T/req.jsonl" <<'EOF'
{"rid":"hello","count":6,"spread":"job-1","spec":{"image":"bb:1","resources":{"cpus":0.25,"memory_mb":64}},"cmd":["sh","-c","echo hello $((6 * 7))"]}
{"rid":"fails","count":2,"spec":{"image":"bb:1","resources":{"cpus":0.5,"memory_mb":64,"class":"besteffort"}},"cmd":["sh","-c","echo no >&2; exit 3"],"timeout_s":30}
{"rid":"novm","spec":{"image":"bb:1","backend":"vm"},"cmd":["true"]}
EOF
}

# Checks a run of run.sh: $T/results.jsonl and the plan it kept.
check_run() {
  local r=$T/results.jsonl plan=$T/keep/plan.jsonl
  # the inventory: one probe per node, by its Slurm name
  [ "$(jq -r .node "$T/keep/nodes.jsonl" | sort | tr '\n' ' ')" = "node1 node2 node3 " ]
  jq -se 'all(.[]; .type == "node" and (.backends | index("container")) and
              .cpus > 0 and .memory_mb > 0)' "$T/keep/nodes.jsonl"
  # every placed sandbox was created, ran and was removed on its node
  [ "$(jq -c 'select(.type == "assignment")' "$plan" | wc -l)" -eq 8 ]
  jq -se --slurpfile plan "$plan" '
    def of(t): map(select(.type == t) | {k: "\(.tag.rid)/\(.tag.index)", node})
               | sort_by(.k);
    ($plan | map(select(.type == "assignment")
                 | {k: "\(.rid)/\(.index)", node}) | sort_by(.k)) as $want
    | of("sandbox") == $want and of("result") == $want and
      of("removed") == $want and all(.[]; .type != "error")' "$r"
  # what ran: the commands' output and status, in sandboxes of their own
  jq -se 'map(select(.type == "result" and .tag.rid == "hello"))
          | length == 6 and all(.[]; .exit_code == 0 and
                                     .stdout == "hello 42\n")' "$r"
  jq -se 'map(select(.type == "result" and .tag.rid == "fails"))
          | length == 2 and all(.[]; .exit_code == 3 and .stderr == "no\n")' "$r"
  [ "$(jq -r 'select(.type == "sandbox") | .id' "$r" | sort -u | wc -l)" -eq 8 ]
  # spread: two of the job on each node
  [ "$(jq -r 'select(.type == "result" and .tag.rid == "hello") | .node' "$r" |
    sort | uniq -c | awk '{ print $1 }' | tr '\n' ' ')" = "2 2 2 " ]
  # no node offers vm
  jq -se 'map(select(.type == "unplaced")) ==
          [{type: "unplaced", rid: "novm", index: 0, reason: "backend"}]' "$r"
  # each sandbox lived in its node's root, and is gone
  for n in node1 node2 node3; do
    [ -d "$T/nodes/$n/root" ]
    [ -z "$(ls -A "$T/nodes/$n/root/sandboxes" 2>/dev/null)" ]
  done
  # no job is left, and no temporary file
  wait_for '[ -z "$(squeue -h)" ]' 15
  [ -z "$(ls -A "$TMPDIR")" ]
}

@test "the test cluster has three idle nodes" {
  run -0 sinfo -h -N -o '%N %t'
  [ "$(sort <<<"$output" | tr '\n' ' ')" = "node1 idle node2 idle node3 idle " ]
}

@test "run.sh: probe, place and run sandboxes on three Slurm nodes" {
  requests
  run -0 --separate-stderr dsec-pull --name bb:1 "tar:$BATS_FILE_TMPDIR/busybox.tar.gz"
  printf '%s\n' "$output" >"$T/pulled.json"
  stat -c %Y.%s "$T/store/layers/$(jq -r '.layers[0].digest | ltrimstr("sha256:")' \
    "$T/pulled.json")/layer.erofs" >"$T/erofs.stamp"
  run -0 --separate-stderr salloc -N 3 "$DSEC_SRCDIR/examples/slurm/run.sh" \
    "$T/req.jsonl"
  printf '%s\n' "$output" >"$T/results.jsonl"
  [[ $stderr == *"1 sandboxes could not be placed"* ]]
  check_run
  # one store for the three nodes: the layer converted once (by the
  # pull), each node mounting it from the shared file
  assert_layers_shared erofs
}

@test "run.sh: as a user without privileges (rootless dsec-run)" {
  local user=nobody group
  id "$user" >/dev/null 2>&1 || skip "no user $user"
  group=$(id -gn "$user")
  requests
  # the cluster's files are in BATS_FILE_TMPDIR, under bats' private
  # run directory: let the user through it (not list it)
  chmod o+x "$BATS_RUN_TMPDIR" "$BATS_FILE_TMPDIR" "$(D)"
  chmod o+r "$SLURM_CONF"
  mkdir -p "$T/home"
  chmod 0755 "$T"
  chown -R "$user:$group" "$TMPDIR" "$T/home"
  mkdir -p "$T/store" "$T/nodes" "$T/keep"
  chown "$user:$group" "$T/store" "$T/nodes" "$T/keep"
  as_user() {
    setpriv --reuid="$user" --regid="$group" --clear-groups \
      env HOME="$T/home" "$@"
  }
  run -0 --separate-stderr as_user dsec-pull --name bb:1 \
    "tar:$BATS_FILE_TMPDIR/busybox.tar.gz"
  printf '%s\n' "$output" >"$T/pulled.json"
  chmod o+r "$T/req.jsonl"
  run -0 --separate-stderr as_user salloc -N 3 \
    "$DSEC_SRCDIR/examples/slurm/run.sh" "$T/req.jsonl" "$T/keep/results.jsonl"
  cp "$T/keep/results.jsonl" "$T/results.jsonl"
  check_run
  # the sandboxes were the user's
  [ "$(stat -c %U "$T/nodes/node1/root")" = "$user" ]
  # rootless: no erofs mount, the layers are directories in the store
  assert_layers_shared dir
}

@test "run.sh: a sandbox that cannot be created is an error record and exit 1" {
  run -0 --separate-stderr dsec-pull --name bb:1 "tar:$BATS_FILE_TMPDIR/busybox.tar.gz"
  printf '%s\n' \
    '{"rid":"ok","count":3,"spread":"j","spec":{"image":"bb:1","resources":{"cpus":0.25,"memory_mb":64}},"cmd":["true"]}' \
    '{"rid":"bad","spec":{"image":"no-such-image:1","resources":{"cpus":0.25,"memory_mb":64}},"cmd":["true"]}' \
    >"$T/req.jsonl"
  run -1 --separate-stderr salloc -N 3 "$DSEC_SRCDIR/examples/slurm/run.sh" \
    "$T/req.jsonl"
  [[ $stderr == *"some requests failed"* ]]
  # the create failed on its node; exec and rm found no sandbox
  jq -se 'map(select(.type == "error" and .tag.rid == "bad") | .op) ==
          ["create", "exec", "rm"]' <<<"$output"
  jq -se 'map(select(.type == "error" and .op == "create"))[0].message
          | contains("no-such-image")' <<<"$output"
  # the others ran
  jq -se 'map(select(.type == "result" and .tag.rid == "ok" and
                     .exit_code == 0)) | length == 3' <<<"$output"
  for n in node1 node2 node3; do
    [ -z "$(ls -A "$T/nodes/$n/root/sandboxes" 2>/dev/null)" ]
  done
}

@test "run.sh: killed, it ends its job steps and their sandboxes" {
  run -0 --separate-stderr dsec-pull --name bb:1 "tar:$BATS_FILE_TMPDIR/busybox.tar.gz"
  printf '%s\n' \
    '{"rid":"slow","count":3,"spread":"j","spec":{"image":"bb:1","resources":{"cpus":0.25,"memory_mb":64}},"cmd":["sleep","600"]}' \
    >"$T/req.jsonl"
  salloc -N 3 "$DSEC_SRCDIR/examples/slurm/run.sh" "$T/req.jsonl" \
    >"$T/out" 2>"$T/err" 3>&- &
  local pid=$!
  # wait until the three sandboxes run
  wait_for '[ "$(ls "$T"/nodes/*/root/sandboxes 2>/dev/null | grep -c "^sb-")" -eq 3 ]' 60
  kill -TERM "$pid"
  wait "$pid" || true
  wait_for '[ -z "$(squeue -h)" ]' 30
  wait_for '[ -z "$(ls "$T"/nodes/*/root/sandboxes 2>/dev/null | grep "^sb-")" ]' 30 || {
    echo "left:" "$T"/nodes/*/root/sandboxes/*/state.json >&2
    cat "$T"/nodes/*/root/sandboxes/*/state.json "$T"/keep/out.* "$T"/keep/err.* \
      "$T/err" >&2
    false
  }
}

@test "run.sh: outside an allocation it is a usage error" {
  requests
  run -2 --separate-stderr env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST \
    "$DSEC_SRCDIR/examples/slurm/run.sh" "$T/req.jsonl"
  [[ $stderr == *"not inside a Slurm allocation"* ]]
  run -2 --separate-stderr "$DSEC_SRCDIR/examples/slurm/run.sh"
}
