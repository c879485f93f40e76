#!/bin/sh
# Runs sandbox requests across the nodes of a Slurm allocation: probe every
# node, plan with dsec-place, drive each node's share through one
# long-lived job step, and print the results as JSON Lines with the node
# added.  Never one Slurm job (or job step) per sandbox.
#
#   salloc -N 3 examples/slurm/run.sh requests.jsonl [RESULTS]
#   sbatch -N 3 --wrap 'examples/slurm/run.sh requests.jsonl results.jsonl'
#
# REQUESTS: dsec-place requests, one JSON object per line, each with the
# command every sandbox of it runs:
#   {"rid":"r1","count":6,"spread":"job-17","spec":{"image":"busybox:1"},
#    "cmd":["sh","-c","echo hello"],"timeout_s":60}
# Output (stdout, or RESULTS): each node's answers, node by node in the
# order of the allocation, each with "node", and "tag":{"rid","index"}
# naming the sandbox: "sandbox" (created), "result" (the exec result),
# "removed" and "error" records; then dsec-place's "unplaced" records.
# Exit status: 0 when every placed sandbox was created, ran and was
# removed (whatever its command's exit code), 1 otherwise, 2 for usage.
#
# Environment:
#   DSEC_STORE, DSEC_ROOT, DSEC_RUN  passed to the nodes (srun exports the
#                      environment), as are PATH and the rest
#   DSEC_NODE_ROOTS=DIR   each node uses DIR/NODE/root and DIR/NODE/run as
#                      DSEC_ROOT and DSEC_RUN: for several Slurm nodes on
#                      one host (slurmd -N), as in tests/dsec-place-slurm.bats
#   DSEC_NODE_WORKER   the worker to start on each node (default: the
#                      dsec-node-worker next to this script, which must
#                      then be on a file system the nodes share)
#   DSEC_SLURM_KEEP=DIR   keep nodes.jsonl, plan.jsonl and each node's
#                      input and answers in DIR
set -eu
prog=run.sh
here=$(cd "$(dirname "$0")" && pwd)

usage() { echo "usage: $prog REQUESTS [RESULTS] (inside a Slurm allocation)" >&2; exit 2; }
die() { echo "$prog: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || usage
requests=$1
results=${2:-}
[ -r "$requests" ] || die "cannot read $requests"
[ -n "${SLURM_JOB_ID:-}" ] && [ -n "${SLURM_JOB_NODELIST:-}" ] || {
  echo "$prog: not inside a Slurm allocation (run it with salloc or sbatch)" >&2
  exit 2
}
for tool in srun scontrol jq dsec-place; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done
worker=${DSEC_NODE_WORKER:-$here/dsec-node-worker}

work=$(mktemp -d "${TMPDIR:-/tmp}/dsec-slurm.XXXXXX")
pids=
cleanup() {
  # a worker's srun forwards the signal to the worker, which removes its
  # sandboxes
  for pid in $pids; do
    kill "$pid" 2>/dev/null || :
  done
  for pid in $pids; do
    wait "$pid" 2>/dev/null || :
  done
  if [ -n "${DSEC_SLURM_KEEP:-}" ]; then
    mkdir -p "$DSEC_SLURM_KEEP" && cp -r "$work"/. "$DSEC_SLURM_KEEP"/ || :
  fi
  rm -rf "$work"
}
trap 'cleanup' EXIT
trap 'exit 1' HUP INT TERM

# What each node runs first: with DSEC_NODE_ROOTS, a root of its own.
node_env='if [ -n "${DSEC_NODE_ROOTS:-}" ]; then
  DSEC_ROOT=$DSEC_NODE_ROOTS/$SLURMD_NODENAME/root
  DSEC_RUN=$DSEC_NODE_ROOTS/$SLURMD_NODENAME/run
  export DSEC_ROOT DSEC_RUN
  mkdir -p "$DSEC_ROOT" "$DSEC_RUN"
fi'

nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
n_nodes=$(printf '%s\n' "$nodes" | wc -l)

# 1. the inventory: one probe per node, in one job step
srun --nodes="$n_nodes" --ntasks-per-node=1 \
  sh -c "$node_env
exec dsec-place probe" >"$work/nodes.jsonl" ||
  die "the probe step failed"
for n in $nodes; do
  jq -se --arg n "$n" 'any(.[]; .node == $n)' "$work/nodes.jsonl" >/dev/null ||
    die "no inventory from node $n"
done

# 2. the plan
dsec-place place --nodes "$work/nodes.jsonl" "$requests" >"$work/plan.jsonl" ||
  die "dsec-place place failed"

# 3. each node's share: create every sandbox, run each one's command,
#    remove them, as worker requests keyed by the plan's line number
i=0
for n in $nodes; do
  i=$((i + 1))
  jq -nc --arg node "$n" --slurpfile req "$requests" \
    --slurpfile plan "$work/plan.jsonl" '
    ($req | map({key: .rid, value: .}) | from_entries) as $r
    | [$plan | to_entries[]
       | select(.value.type == "assignment" and .value.node == $node)
       | {key: "s\(.key)", tag: {rid: .value.rid, index: .value.index},
          r: $r[.value.rid]}] as $mine
    | ($mine[] | {op: "create", key, tag, spec: .r.spec}),
      ($mine[] | {op: "exec", key, tag, cmd: (.r.cmd // ["true"])}
                 + (if .r.timeout_s then {timeout_s: .r.timeout_s} else {} end)),
      ($mine[] | {op: "rm", key, tag})' >"$work/in.$i"
  [ -s "$work/in.$i" ] || continue
  # one long-lived job step per node, whatever its share
  srun --nodes=1 --ntasks=1 --nodelist="$n" --overlap \
    sh -c "$node_env
exec \"\$0\"" "$worker" <"$work/in.$i" >"$work/out.$i" 2>"$work/err.$i" &
  pids="$pids $!"
  echo "$n" >"$work/node.$i"
done

failed=0
for pid in $pids; do
  wait "$pid" || failed=1
done
pids=

# 4. the results, node by node, then what could not be placed
i=0
: >"$work/results.jsonl"
for n in $nodes; do
  i=$((i + 1))
  [ -f "$work/in.$i" ] && [ -s "$work/in.$i" ] || continue
  if [ -s "$work/err.$i" ]; then
    sed "s/^/$prog: $n: /" "$work/err.$i" >&2
  fi
  cat "$work/out.$i" >>"$work/results.jsonl"
  # every request answered, and none with an error
  [ "$(wc -l <"$work/out.$i")" -eq "$(wc -l <"$work/in.$i")" ] || {
    echo "$prog: $n: $(wc -l <"$work/out.$i") answers to $(wc -l <"$work/in.$i") requests" >&2
    failed=1
  }
done
jq -c 'select(.type == "unplaced")' "$work/plan.jsonl" >>"$work/results.jsonl"
if jq -se 'any(.[]; .type == "error")' "$work/results.jsonl" >/dev/null; then
  echo "$prog: some requests failed (see the \"error\" records)" >&2
  failed=1
fi
unplaced=$(jq -c 'select(.type == "unplaced")' "$work/plan.jsonl" | wc -l)
[ "$unplaced" -eq 0 ] || echo "$prog: $unplaced sandboxes could not be placed" >&2

if [ -n "$results" ]; then
  cp "$work/results.jsonl" "$results"
else
  cat "$work/results.jsonl"
fi
exit "$failed"
