#!/usr/bin/env bats
# dsec-place: the command line; probe (fields, node.json, materialised
# layers, committed resources of live sandboxes, backends); place with
# unit-sized inputs (fit, classes, affinity, spread, overflow, unplaceable
# sandboxes, malformed lines, determinism).  The Slurm example is
# tests/dsec-place-slurm.bats.

bats_require_minimum_version 1.5.0

load helpers/common

setup() {
  common_setup
  unset SLURMD_NODENAME
  T=$BATS_TEST_TMPDIR
}

# Processes and sandboxes a test started are listed in $T/cleanup ("pid N",
# "sandbox ID") and ended here, whatever happened.
teardown() {
  local kind what
  [ -f "$T/cleanup" ] || return 0
  while read -r kind what; do
    case $kind in
      pid) kill "$what" 2>/dev/null || true ;;
      sandbox) dsec-run rm --force "$what" >/dev/null 2>&1 || true ;;
    esac
  done <"$T/cleanup"
  # the host's mounts of layers the sandboxes used (dsec-reap's to undo)
  layer_mounts_clean
}

# dg N: a valid digest made from the number N.
dg() { printf 'sha256:%064d' "$1"; }

# The plan of nodes file $T/nodes and requests file $T/req, one line per
# sandbox, in $output (status 0 required).
plan() {
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes" "$T/req"
  [ -z "$stderr" ] || { echo "stderr: $stderr" >&2; return 1; }
}

# node_of RID INDEX: the node a sandbox went to in $output.
node_of() {
  jq -r --arg r "$1" --argjson i "$2" \
    'select(.rid == $r and .index == $i) | .node // ("unplaced:" + .reason)' \
    <<<"$output"
}

# per_node RID: "NODE COUNT" lines of a request's assignments.
per_node() {
  jq -r --arg r "$1" 'select(.rid == $r and .type == "assignment") | .node' \
    <<<"$output" | sort | uniq -c | awk '{ print $2, $1 }'
}

# The start time of a process (field 22 of /proc/PID/stat).
starttime() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $20 }'; }

# fake_sandbox ID STATE PID SPEC: a sandbox directory as dsec-run leaves it.
fake_sandbox() {
  local dir=$DSEC_ROOT/sandboxes/$1 start
  mkdir -p "$dir"
  printf '%s\n' "$4" >"$dir/spec.json"
  start=$(starttime "$3" 2>/dev/null)
  jq -nc --arg s "$2" --argjson pid "$3" --argjson start "${start:-0}" \
    '{type: "sandbox", state: $s, supervisor_pid: $pid, supervisor_start: $start}' \
    >"$dir/state.json"
}

# --- command line --------------------------------------------------------

@test "--help, --version and usage errors" {
  run -0 --separate-stderr dsec-place --help
  [[ $output == *"Usage: dsec-place"* ]]
  [[ $output == *"probe"* && $output == *"place --nodes FILE"* ]]
  [ -z "$stderr" ]
  run -0 --separate-stderr dsec-place --version
  [[ $output == "dsec-place "* ]]

  run -2 --separate-stderr dsec-place
  [[ $stderr == *"missing COMMAND"* ]]
  [ -z "$output" ]
  run -2 --separate-stderr dsec-place frobnicate
  [[ $stderr == *"unknown command"* ]]
  run -2 --separate-stderr dsec-place --no-such-option probe
  run -2 --separate-stderr dsec-place probe extra
  [[ $stderr == *"too many arguments"* ]]
  run -2 --separate-stderr dsec-place probe --nodes x
  [[ $stderr == *"--nodes does not apply"* ]]
  run -2 --separate-stderr dsec-place place
  [[ $stderr == *"--nodes"* ]]
  run -2 --separate-stderr dsec-place place --nodes a b c
  [[ $stderr == *"too many arguments"* ]]
  run -2 --separate-stderr dsec-place place --nodes - -
  [[ $stderr == *"both"* ]]
  run -2 --separate-stderr dsec-place place --nodes -
  run -2 --separate-stderr dsec-place --log-format=xml probe
  [ -z "$output" ]
}

@test "options may come after the command; the nodes may come on stdin" {
  echo '{"node":"a","cpus":1,"memory_mb":2048}' >"$T/nodes"
  echo '{"rid":"r","spec":{"image":"x"}}' >"$T/req"
  run -0 --separate-stderr dsec-place place "$T/req" --nodes=- <"$T/nodes"
  jq -e '.type == "assignment" and .node == "a"' <<<"$output"
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes" <"$T/req"
  jq -e '.type == "assignment" and .node == "a"' <<<"$output"
}

# --- probe ---------------------------------------------------------------

@test "probe: the node record, with the name from SLURMD_NODENAME or the host" {
  run -0 --separate-stderr dsec-place probe
  [ "$(wc -l <<<"$output")" -eq 1 ]
  jq -e --arg h "$(uname -n)" --argjson c "$(nproc --all)" '
    .type == "node" and .node == $h and (.cpus | type) == "number" and
    .cpus >= 1 and .cpus <= $c and .memory_mb > 0 and
    (.backends | type) == "array" and
    (.accel | IN("kvm", "tcg", "none")) and .layers == [] and .labels == {} and
    .committed == {latency: {cpus: 0, memory_mb: 0, count: 0},
                   besteffort: {cpus: 0, memory_mb: 0, count: 0}}' <<<"$output"
  [ "$(jq .memory_mb <<<"$output")" -eq \
    "$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)" ]
  # probing creates no state
  [ ! -e "$DSEC_ROOT" ]

  SLURMD_NODENAME=node-17 run -0 --separate-stderr dsec-place probe
  jq -e '.node == "node-17"' <<<"$output"
  SLURMD_NODENAME='' run -0 --separate-stderr dsec-place probe
  jq -e --arg h "$(uname -n)" '.node == $h' <<<"$output"
}

@test "probe: labels, cpus and memory_mb from node.json" {
  mkdir -p "$DSEC_ROOT"
  echo '{"labels":{"pool":"burst","rack":"r12","gpu":false},"cpus":1.5,
         "memory_mb":4096,"comment":"ignored"}' >"$DSEC_ROOT/node.json"
  run -0 --separate-stderr dsec-place probe
  jq -e '.labels == {pool: "burst", rack: "r12", gpu: false} and
         .cpus == 1.5 and .memory_mb == 4096' <<<"$output"

  echo '{"labels":{"rack":"r1"}}' >"$DSEC_ROOT/node.json"
  run -0 --separate-stderr dsec-place probe
  jq -e --argjson c "$(nproc)" '.labels == {rack: "r1"} and .cpus == $c' \
    <<<"$output"
}

@test "probe: a malformed node.json is bad input naming the file" {
  mkdir -p "$DSEC_ROOT"
  echo '{"labels":' >"$DSEC_ROOT/node.json"
  run -3 --separate-stderr dsec-place probe
  [ -z "$output" ]
  [[ $stderr == *"node.json"* ]]
  echo '{"labels":["a"]}' >"$DSEC_ROOT/node.json"
  run -3 --separate-stderr dsec-place probe
  [[ $stderr == *"node.json"*"labels"* ]]
  echo '{"cpus":0}' >"$DSEC_ROOT/node.json"
  run -3 --separate-stderr dsec-place probe
  [[ $stderr == *"cpus"* ]]
  echo '{"memory_mb":"lots"}' >"$DSEC_ROOT/node.json"
  run -3 --separate-stderr dsec-place probe
  [[ $stderr == *"memory_mb"* ]]
  echo '{"a":1,"a":2}' >"$DSEC_ROOT/node.json"
  run -3 --separate-stderr dsec-place probe
  echo '[]' >"$DSEC_ROOT/node.json"
  DSEC_LOG_FORMAT=json run -3 --separate-stderr dsec-place probe
  jq -e '.level == "error" and .prog == "dsec-place" and
         (.msg | contains("node.json"))' <<<"$stderr"
}

@test "probe: lists the materialised layers of the store, with their sizes" {
  local l1 l2 s1
  mkdir -p "$T/d1" "$T/d2"
  echo one >"$T/d1/a"
  echo two >"$T/d2/b"
  run -0 --separate-stderr dsec-layer create --dir "$T/d1" --name l1@v1
  l1=$(jq -r .digest <<<"$output")
  s1=$(jq -r .size <<<"$output")
  run -0 --separate-stderr dsec-layer create --dir "$T/d2" --name l2@v1
  l2=$(jq -r .digest <<<"$output")
  # only l1 is materialised: l2 is a blob a sandbox cannot use yet
  run -0 --separate-stderr dsec-layer materialise l1@v1
  run -0 --separate-stderr dsec-place probe
  # (no sandbox runs from it: not mounted on this host)
  jq -e --arg d "$l1" --argjson s "$s1" \
    '.layers == [{digest: $d, size: $s, mounted: false}]' <<<"$output"

  # an EROFS image counts too (made by hand: mkfs.erofs is not needed here)
  touch "$(store_dir)/layers/${l2#sha256:}/layer.erofs"
  run -0 --separate-stderr dsec-place probe
  jq -e --arg a "$l1" --arg b "$l2" \
    '[.layers[].digest] == ([$a, $b] | sort)' <<<"$output"

  # DSEC_STORE moves the store
  DSEC_STORE=$T/other run -0 --separate-stderr dsec-place probe
  jq -e '.layers == []' <<<"$output"
  DSEC_STORE=relative run -2 --separate-stderr dsec-place probe
}

@test "probe: committed sums the specs of live sandboxes per class" {
  local live dead
  sleep 1000 &
  live=$!
  echo "pid $live" >>"$T/cleanup"
  sh -c 'exit 0' &
  dead=$!
  wait "$dead"
  fake_sandbox sb-0000000000000001 running "$live" \
    '{"image":"x","resources":{"cpus":0.5,"memory_mb":256,"class":"latency"}}'
  fake_sandbox sb-0000000000000002 running "$live" \
    '{"image":"x","resources":{"class":"latency"}}'
  fake_sandbox sb-0000000000000003 creating "$live" \
    '{"image":"x","resources":{"cpus":2,"memory_mb":100,"class":"besteffort"}}'
  # not live: stopped, suspended, or its supervisor is gone
  fake_sandbox sb-0000000000000004 stopped "$live" \
    '{"image":"x","resources":{"cpus":8,"memory_mb":8,"class":"latency"}}'
  fake_sandbox sb-0000000000000005 suspended "$live" \
    '{"image":"x","resources":{"cpus":8,"memory_mb":8,"class":"latency"}}'
  fake_sandbox sb-0000000000000006 running "$dead" \
    '{"image":"x","resources":{"cpus":8,"memory_mb":8,"class":"besteffort"}}'
  # half made: no state.json yet
  mkdir -p "$DSEC_ROOT/sandboxes/sb-0000000000000007"
  run -0 --separate-stderr dsec-place probe
  # a spec without cpus or memory_mb counts as 1 CPU and 1024 MiB
  jq -e '.committed == {latency: {cpus: 1.5, memory_mb: 1280, count: 2},
                        besteffort: {cpus: 2, memory_mb: 100, count: 1}}' \
    <<<"$output"
}

@test "probe: a real sandbox is committed while it lives" {
  [ -x /bin/busybox ] || skip "needs busybox-static (/bin/busybox)"
  local id
  run -0 --separate-stderr dsec-pull --name bb:1 "tar:$(busybox_tar)"
  run -0 --separate-stderr dsec-run create --image bb:1 --cpus 0.25 \
    --memory 64 --label job=17
  id=$(jq -r .id <<<"$output")
  echo "sandbox $id" >>"$T/cleanup"
  run -0 --separate-stderr dsec-place probe
  jq -e '.committed.latency == {cpus: 0.25, memory_mb: 64, count: 1}' \
    <<<"$output"
  # the image's layer is materialised by then
  jq -e '.layers | length == 1' <<<"$output"
  run -0 --separate-stderr dsec-run rm --force "$id"
  run -0 --separate-stderr dsec-place probe
  jq -e '.committed.latency.count == 0' <<<"$output"
}

@test "probe: backends as tested here" {
  mkdir -p "$T/bin"
  # no QEMU to run (DSEC_QEMU names the one dsec-vm runs): no VM backends
  DSEC_QEMU=$T/bin/no-such-qemu run -0 --separate-stderr dsec-place probe
  jq -e '.accel == "none" and (.backends | index("microvm") == null) and
         (.backends | index("vm") == null)' <<<"$output"
  # fncall and container exactly when a user namespace can mount an overlay
  if unshare --user --map-root-user --mount sh -c \
    'mount -t tmpfs t /tmp && mkdir /tmp/l /tmp/u /tmp/w /tmp/m &&
     mount -t overlay o -o lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w /tmp/m' \
    2>/dev/null; then
    jq -e '.backends == ["fncall", "container"]' <<<"$output"
  else
    jq -e '.backends == []' <<<"$output"
  fi
  # a QEMU that starts a paused KVM guest and quits: KVM works (when
  # /dev/kvm is there); one that fails: TCG, whatever /dev/kvm says
  printf '#!/bin/sh\nexit 0\n' >"$T/bin/qemu-ok"
  printf '#!/bin/sh\nexit 1\n' >"$T/bin/qemu-bad"
  chmod +x "$T/bin/qemu-ok" "$T/bin/qemu-bad"
  DSEC_QEMU=$T/bin/qemu-ok DSEC_RUN=$T/run1 run -0 --separate-stderr dsec-place probe
  jq -e '.backends[-2:] == ["microvm", "vm"]' <<<"$output"
  if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    jq -e '.accel == "kvm"' <<<"$output"
  else
    jq -e '.accel == "tcg"' <<<"$output"
  fi
  DSEC_QEMU=$T/bin/qemu-bad DSEC_RUN=$T/run2 run -0 --separate-stderr dsec-place probe
  jq -e '.backends[-2:] == ["microvm", "vm"] and .accel == "tcg"' <<<"$output"
  # DSEC_VM_ACCEL decides instead
  DSEC_QEMU=$T/bin/qemu-ok DSEC_VM_ACCEL=tcg run -0 --separate-stderr dsec-place probe
  jq -e '.accel == "tcg"' <<<"$output"
}

# --- place -----------------------------------------------------------------

@test "place: one record per sandbox, in request order, with every field" {
  printf '%s\n' '{"node":"a","cpus":4,"memory_mb":8192}' >"$T/nodes"
  printf '%s\n' '{"rid":"r1","count":2,"spec":{"image":"x"}}' '' \
    '{"rid":"r\"2","spec":{"image":"y","resources":{"cpus":0.5}}}' >"$T/req"
  plan
  [ "$(wc -l <<<"$output")" -eq 3 ]
  jq -se '[.[] | [.rid, .index]] == [["r1", 0], ["r1", 1], ["r\"2", 0]]' \
    <<<"$output"
  jq -se 'all(.[]; .type == "assignment" and .node == "a" and
                   (.score | type) == "number" and .score >= 0 and
                   .score <= 1 and .fetch_bytes == 0)' <<<"$output"
  # 0.6 x 1 (no layer bytes known) + 0.4 x (1 - 1/4)
  jq -se '.[0].score == 0.9' <<<"$output"
}

@test "place: resource fit, latency packed to 1.0x" {
  printf '%s\n' '{"node":"a","cpus":2,"memory_mb":4096}' >"$T/nodes"
  printf '%s\n' \
    '{"rid":"cpu","count":3,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":100}}}' \
    >"$T/req"
  plan
  [ "$(node_of cpu 0)" = a ]
  [ "$(node_of cpu 1)" = a ]
  [ "$(node_of cpu 2)" = unplaced:capacity ]

  printf '%s\n' \
    '{"rid":"mem","count":3,"spec":{"image":"x","resources":{"cpus":0.1,"memory_mb":2000}}}' \
    >"$T/req"
  plan
  [ "$(per_node mem)" = "a 2" ]
  [ "$(node_of mem 2)" = unplaced:capacity ]

  # a spec without resources counts as 1 CPU and 1024 MiB
  printf '%s\n' '{"rid":"d","count":5,"spec":{"image":"x"}}' >"$T/req"
  plan
  [ "$(per_node d)" = "a 2" ]
}

@test "place: best-effort is overcommitted to 2x CPUs and 1.5x memory" {
  printf '%s\n' '{"node":"a","cpus":2,"memory_mb":1000}' >"$T/nodes"
  printf '%s\n' \
    '{"rid":"be","count":5,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":10,"class":"besteffort"}}}' \
    >"$T/req"
  plan
  [ "$(per_node be)" = "a 4" ]
  [ "$(node_of be 4)" = unplaced:capacity ]

  printf '%s\n' \
    '{"rid":"bm","count":4,"spec":{"image":"x","resources":{"cpus":0.1,"memory_mb":500,"class":"besteffort"}}}' \
    >"$T/req"
  plan
  [ "$(per_node bm)" = "a 3" ]

  # latency first fills the node's CPUs; best-effort still gets the 2x
  printf '%s\n' \
    '{"rid":"lat","count":3,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":10}}}' \
    '{"rid":"be","count":3,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":10,"class":"besteffort"}}}' \
    >"$T/req"
  plan
  [ "$(per_node lat)" = "a 2" ]
  [ "$(per_node be)" = "a 2" ]
  [ "$(node_of be 2)" = unplaced:capacity ]

  # best-effort first takes the 2x; a latency sandbox then finds no room
  # under the total, though its own class has none committed
  printf '%s\n' \
    '{"rid":"be","count":4,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":10,"class":"besteffort"}}}' \
    '{"rid":"lat","count":1,"spec":{"image":"x","resources":{"cpus":1,"memory_mb":10}}}' \
    >"$T/req"
  plan
  [ "$(per_node be)" = "a 4" ]
  [ "$(node_of lat 0)" = unplaced:capacity ]
}

@test "place: what nodes have committed counts" {
  printf '%s\n' \
    '{"node":"a","cpus":4,"memory_mb":8192,"committed":{"latency":{"cpus":3.5,"memory_mb":100,"count":7}}}' \
    '{"node":"b","cpus":4,"memory_mb":8192,"committed":{"besteffort":{"cpus":7.5,"memory_mb":100}}}' \
    >"$T/nodes"
  printf '%s\n' \
    '{"rid":"l","count":3,"spec":{"image":"x","resources":{"cpus":0.5,"memory_mb":10}}}' \
    >"$T/req"
  plan
  # a has 0.5 CPU of latency left, b 0.5 CPU under its 2x total
  [ "$(per_node l)" = "$(printf 'a 1\nb 1')" ]
  [ "$(node_of l 2)" = unplaced:capacity ]
}

@test "place: layer-cache affinity counts the bytes to fetch" {
  local big small
  big=$(dg 1)
  small=$(dg 2)
  printf '%s\n' \
    '{"node":"a","cpus":8,"memory_mb":8192}' \
    "{\"node\":\"b\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$small\",\"size\":100}]}" \
    "{\"node\":\"c\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$big\",\"size\":900}]}" \
    >"$T/nodes"
  # the image is a digest the nodes list; the extra layer too
  printf '%s\n' \
    "{\"rid\":\"r\",\"spec\":{\"image\":\"$big\",\"layers\":[\"$small\"]}}" \
    >"$T/req"
  plan
  # c holds 900 of the 1000 bytes, b 100, a none
  jq -e '.node == "c" and .fetch_bytes == 100' <<<"$output"
  # 0.6 x 0.9 + 0.4 x (1 - 1/8)
  jq -e '.score == 0.89' <<<"$output"

  # a node that has the layers mounted beats one that holds them cold
  # (a shared store: every node holds every layer)
  printf '%s\n' \
    "{\"node\":\"a\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$big\",\"size\":900,\"mounted\":false}]}" \
    "{\"node\":\"b\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$big\",\"size\":900,\"mounted\":true}]}" \
    >"$T/nodes.mounted"
  printf '%s\n' "{\"rid\":\"m\",\"count\":2,\"spec\":{\"image\":\"$big\"}}" >"$T/req.mounted"
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes.mounted" "$T/req.mounted"
  # 0.6 x 1 + 0.4 x (1 - 1/8) for b; a would have 0.6 x (1 - 1/4) + 0.35
  jq -se '[.[].node] == ["b", "b"] and .[0].fetch_bytes == 0 and
    .[0].score == 0.95' <<<"$output"

  # without the big layer anywhere, b wins over a (name order would say a)
  printf '%s\n' \
    "{\"rid\":\"r\",\"spec\":{\"image\":\"$small\"}}" >"$T/req"
  plan
  jq -e '.node == "b" and .fetch_bytes == 0' <<<"$output"

  # a digest nobody lists and a name the store does not know: no bytes
  # known, so the least loaded node, then the first name, wins
  printf '%s\n' \
    "{\"rid\":\"r\",\"spec\":{\"image\":\"$(dg 3)\"}}" \
    '{"rid":"n","spec":{"image":"python:3.11"}}' >"$T/req"
  plan
  [ "$(node_of r 0)" = a ]
  [ "$(node_of n 0)" = b ]
  [ ! -e "$DSEC_ROOT/store" ]
}

@test "place: a node that takes an image's first sandbox holds its layers for the next" {
  printf '%s\n' '{"node":"a","cpus":8,"memory_mb":8192}' \
    '{"node":"b","cpus":8,"memory_mb":8192}' >"$T/nodes"
  printf '%s\n' \
    "{\"rid\":\"warm\",\"spec\":{\"image\":\"$(dg 9)\"}}" >"$T/req"
  printf '%s\n' "{\"node\":\"z\",\"cpus\":1,\"memory_mb\":1024,\"backends\":[],\"layers\":[{\"digest\":\"$(dg 9)\",\"size\":5000}]}" >>"$T/nodes"
  printf '%s\n' \
    "{\"rid\":\"img\",\"count\":3,\"spec\":{\"image\":\"$(dg 9)\"}}" >>"$T/req"
  plan
  # the first goes to a (both cold, a sorts first) and fetches 5000
  # bytes; the rest follow it there
  jq -se 'map(select(.rid == "warm")) | .[0].node == "a" and
         .[0].fetch_bytes == 5000' <<<"$output"
  [ "$(per_node img)" = "a 3" ]
  jq -se '[.[] | select(.rid == "img") | .fetch_bytes] == [0, 0, 0]' \
    <<<"$output"
}

@test "place: image names resolve through the local store" {
  local layer
  mkdir -p "$T/d"
  echo content >"$T/d/f"
  tar -C "$T/d" -cf "$T/img.tar" .
  run -0 --separate-stderr dsec-pull --name img:1 "tar:$T/img.tar"
  layer=$(jq -r '.layers[0].digest' <<<"$output")
  printf '%s\n' '{"node":"a","cpus":8,"memory_mb":8192}' \
    "{\"node\":\"b\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$layer\",\"size\":10240}]}" \
    >"$T/nodes"
  printf '%s\n' '{"rid":"r","spec":{"image":"img:1"}}' >"$T/req"
  plan
  jq -e '.node == "b" and .fetch_bytes == 0' <<<"$output"
  # a layer name, as an extra layer, resolves too
  run -0 --separate-stderr dsec-layer create --dir "$T/d" --name extra@v1
  printf '%s\n' '{"node":"a","cpus":8,"memory_mb":8192}' \
    "{\"node\":\"b\",\"cpus\":8,\"memory_mb\":8192,\"layers\":[{\"digest\":\"$(jq -r .digest <<<"$output")\",\"size\":1}]}" \
    >"$T/nodes"
  printf '%s\n' '{"rid":"r","spec":{"image":"unknown","layers":["extra@v1"]}}' \
    >"$T/req"
  plan
  jq -e '.node == "b"' <<<"$output"
}

@test "place: spread bounds one group's sandboxes per node" {
  printf '%s\n' '{"node":"a","cpus":64,"memory_mb":65536}' \
    '{"node":"b","cpus":64,"memory_mb":65536}' \
    '{"node":"c","cpus":64,"memory_mb":65536}' >"$T/nodes"
  # without spread, the image's layers pull every sandbox to one node
  printf '%s\n' \
    "{\"rid\":\"j\",\"count\":6,\"spec\":{\"image\":\"$(dg 5)\"}}" >"$T/req"
  printf '%s\n' "{\"node\":\"z\",\"cpus\":1,\"memory_mb\":1,\"backends\":[],\"layers\":[{\"digest\":\"$(dg 5)\",\"size\":100000}]}" >>"$T/nodes"
  plan
  [ "$(per_node j)" = "a 6" ]
  # with it, at most ceil(6 / 3) on each
  printf '%s\n' \
    "{\"rid\":\"j\",\"count\":6,\"spread\":\"job-1\",\"spec\":{\"image\":\"$(dg 5)\"}}" \
    >"$T/req"
  plan
  [ "$(per_node j)" = "$(printf 'a 2\nb 2\nc 2')" ]
  # a group spans requests: 4 + 5 sandboxes, 3 a node
  printf '%s\n' \
    '{"rid":"p","count":4,"spread":"g","spec":{"image":"x"}}' \
    '{"rid":"q","count":5,"spread":"g","spec":{"image":"x"}}' \
    '{"rid":"other","count":4,"spread":"h","spec":{"image":"x"}}' >"$T/req"
  plan
  [ "$(jq -r 'select(.rid != "other") | .node' <<<"$output" | sort | uniq -c |
    awk '{ print $1 }' | sort -u)" = 3 ]
  [ "$(per_node other | awk '{ print $2 }' | sort -u)" = "$(printf '1\n2')" ]
  # spread_max sets the bound; what is left over is unplaced
  printf '%s\n' \
    '{"rid":"m","count":5,"spread":"g","spread_max":1,"spec":{"image":"x"}}' \
    >"$T/req"
  plan
  [ "$(per_node m)" = "$(printf 'a 1\nb 1\nc 1')" ]
  [ "$(node_of m 3)" = unplaced:spread ]
  [ "$(node_of m 4)" = unplaced:spread ]
}

@test "place: burst nodes take sandboxes only when the others are full" {
  # the burst node sorts first, is empty and holds the image: it would win
  # on every count but the pool
  printf '%s\n' \
    "{\"node\":\"a-burst\",\"cpus\":8,\"memory_mb\":8192,\"labels\":{\"pool\":\"burst\"},\"layers\":[{\"digest\":\"$(dg 4)\",\"size\":1000}]}" \
    '{"node":"b","cpus":2,"memory_mb":8192,"labels":{"pool":"main"}}' \
    '{"node":"c","cpus":2,"memory_mb":8192}' >"$T/nodes"
  printf '%s\n' \
    "{\"rid\":\"r\",\"count\":4,\"spec\":{\"image\":\"$(dg 4)\"}}" >"$T/req"
  plan
  [ "$(per_node r)" = "$(printf 'b 2\nc 2')" ]
  printf '%s\n' \
    "{\"rid\":\"r\",\"count\":7,\"spec\":{\"image\":\"$(dg 4)\"}}" >"$T/req"
  plan
  [ "$(per_node r)" = "$(printf 'a-burst 3\nb 2\nc 2')" ]
  jq -se '[.[] | .node] | .[:4] | all(. != "a-burst")' <<<"$output"
  # a spread bound that the regular nodes reach overflows too
  printf '%s\n' \
    '{"rid":"s","count":4,"spread":"g","spread_max":1,"spec":{"image":"x","resources":{"cpus":0.1}}}' \
    >"$T/req"
  plan
  [ "$(per_node s)" = "$(printf 'a-burst 1\nb 1\nc 1')" ]
  [ "$(node_of s 3)" = unplaced:spread ]
}

@test "place: a task world is one request, its members' resources summed" {
  printf '%s\n' '{"node":"a","cpus":4,"memory_mb":4096}' >"$T/nodes"
  # agent 1 CPU 1024 MiB (defaults) + db 1 CPU 512 MiB + web 0.5 CPU 256 MiB
  printf '%s\n' \
    '{"rid":"w","count":3,"spec":{"image":"x","services":[
      {"name":"db","image":"y","cmd":["db"],"resources":{"cpus":1,"memory_mb":512}},
      {"name":"web","image":"z","cmd":["web"],"resources":{"cpus":0.5,"memory_mb":256}}]}}' |
    jq -c . >"$T/req"
  plan
  [ "$(node_of w 0)" = a ]
  [ "$(node_of w 1)" = unplaced:capacity ]
  [ "$(wc -l <<<"$output")" -eq 3 ]
  # a world bigger than any node is too large, not split
  printf '%s\n' '{"rid":"big","spec":{"image":"x","resources":{"cpus":3},"services":[
      {"name":"db","image":"y","cmd":["db"],"resources":{"cpus":2}}]}}' |
    jq -c . >"$T/req"
  plan
  [ "$(node_of big 0)" = unplaced:too_large ]
}

@test "place: unplaceable sandboxes say why" {
  printf '%s\n' '{"node":"a","cpus":4,"memory_mb":4096}' \
    '{"node":"v","cpus":2,"memory_mb":2048,"backends":["fncall","container","microvm","vm","unheard-of"]}' \
    >"$T/nodes"
  printf '%s\n' \
    '{"rid":"vm","count":2,"spec":{"image":"x","backend":"vm","resources":{"cpus":1.5}}}' \
    '{"rid":"huge","spec":{"image":"x","resources":{"cpus":5}}}' \
    '{"rid":"huge-be","spec":{"image":"x","resources":{"cpus":9,"class":"besteffort"}}}' \
    '{"rid":"fits-be","spec":{"image":"x","resources":{"cpus":8,"memory_mb":6000,"class":"besteffort"}}}' \
    '{"rid":"full","spec":{"image":"x","resources":{"cpus":3}}}' \
    >"$T/req"
  plan
  [ "$(node_of vm 0)" = v ]
  [ "$(node_of vm 1)" = unplaced:capacity ]
  [ "$(node_of huge 0)" = unplaced:too_large ]
  [ "$(node_of huge-be 0)" = unplaced:too_large ]
  [ "$(node_of fits-be 0)" = a ]
  [ "$(node_of full 0)" = unplaced:capacity ]
  jq -se 'map(select(.type == "unplaced") | keys) | unique ==
         [["index", "reason", "rid", "type"]]' <<<"$output"

  printf '%s\n' '{"node":"a","cpus":4,"memory_mb":4096,"backends":["container"]}' \
    >"$T/nodes"
  printf '%s\n' '{"rid":"f","count":2,"spec":{"image":"x","backend":"fncall"}}' \
    '{"rid":"m","spec":{"image":"x","backend":"microvm"}}' >"$T/req"
  plan
  [ "$(jq -r .reason <<<"$output" | sort -u)" = backend ]
  [ "$(wc -l <<<"$output")" -eq 3 ]
}

@test "place: malformed input is exit 3, naming the line and the field" {
  local ok_node='{"node":"a","cpus":4,"memory_mb":4096}'
  local ok_req='{"rid":"r","spec":{"image":"x"}}'
  check() { # FILE-CONTENT-OF-REQ EXPECTED-IN-STDERR
    printf '%s\n' "$ok_node" >"$T/nodes"
    printf '%s\n' "$ok_req" "$1" >"$T/req"
    run -3 --separate-stderr dsec-place place --nodes "$T/nodes" "$T/req"
    [ -z "$output" ] || { echo "stdout: $output" >&2; return 1; }
    [[ $stderr == *"$T/req:2:"*"$2"* ]] ||
      { echo "stderr: $stderr (wanted $2)" >&2; return 1; }
  }
  check '{"rid":"x","spec":' "invalid JSON"
  check '["rid"]' "not a JSON object"
  check '{"spec":{"image":"x"}}' '`rid`'
  check '{"rid":7,"spec":{"image":"x"}}' '`rid` must be a string'
  check '{"rid":"","spec":{"image":"x"}}' '`rid`'
  check '{"rid":"r","spec":{"image":"x"}}' '`rid`: `r` is used twice'
  check '{"rid":"x","count":"2","spec":{"image":"x"}}' '`count` must be an integer'
  check '{"rid":"x","count":0,"spec":{"image":"x"}}' '`count` must be from 1'
  check '{"rid":"x","count":1.5,"spec":{"image":"x"}}' '`count`'
  check '{"rid":"x"}' '`spec`'
  check '{"rid":"x","spec":[]}' '`spec` must be an object'
  check '{"rid":"x","spec":{}}' '`image`'
  check '{"rid":"x","spec":{"image":"x","colour":"red"}}' '`colour`'
  check '{"rid":"x","spec":{"image":"x","backend":"cloud"}}' '`backend`'
  check '{"rid":"x","spec":{"image":"x","resources":{"cpus":0}}}' '`resources.cpus`'
  check '{"rid":"x","spec":{"image":"x","resources":{"class":"gold"}}}' '`resources.class`'
  check '{"rid":"x","spread":5,"spec":{"image":"x"}}' '`spread`'
  check '{"rid":"x","spread_max":2,"spec":{"image":"x"}}' '`spread_max` needs `spread`'
  check '{"rid":"x","spread":"g","spread_max":0,"spec":{"image":"x"}}' '`spread_max`'
  check '{"rid":"x","rid":"y","spec":{"image":"x"}}' "duplicate"

  checkn() { # NODE-LINE EXPECTED-IN-STDERR
    printf '%s\n' "$ok_node" "$1" >"$T/nodes"
    printf '%s\n' "$ok_req" >"$T/req"
    run -3 --separate-stderr dsec-place place --nodes "$T/nodes" "$T/req"
    [ -z "$output" ] || { echo "stdout: $output" >&2; return 1; }
    [[ $stderr == *"$T/nodes:2:"*"$2"* ]] ||
      { echo "stderr: $stderr (wanted $2)" >&2; return 1; }
  }
  checkn '{"cpus":4,"memory_mb":1}' '`node`'
  checkn '{"node":"a","cpus":4,"memory_mb":1}' 'node `a` is listed twice'
  checkn '{"node":"b","memory_mb":1}' '`cpus`'
  checkn '{"node":"b","cpus":-1,"memory_mb":1}' '`cpus` must be a number above 0'
  checkn '{"node":"b","cpus":1}' '`memory_mb`'
  checkn '{"node":"b","cpus":1,"memory_mb":1.5}' '`memory_mb` must be an integer'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"type":"sandbox"}' '`type`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"backends":"container"}' '`backends`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"backends":[1]}' '`backends[0]`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"layers":[{"digest":"md5:1","size":1}]}' '`layers[0].digest`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"layers":[{"digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","size":-1}]}' '`layers[0].size`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"committed":{"latency":{"cpus":"x"}}}' '`committed.latency.cpus`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"committed":{"besteffort":{"memory_mb":-5}}}' '`committed.besteffort.memory_mb`'
  checkn '{"node":"b","cpus":1,"memory_mb":1,"labels":[]}' '`labels`'
  checkn 'not json' 'invalid JSON'

  # no nodes at all; files that do not exist
  : >"$T/nodes"
  run -3 --separate-stderr dsec-place place --nodes "$T/nodes" "$T/req"
  [[ $stderr == *"no nodes"* ]]
  run -3 --separate-stderr dsec-place place --nodes "$T/missing" "$T/req"
  [[ $stderr == *"$T/missing"* ]]
  printf '%s\n' "$ok_node" >"$T/nodes"
  run -3 --separate-stderr dsec-place place --nodes "$T/nodes" "$T/missing"
  # stdin is named as such
  run -3 --separate-stderr dsec-place place --nodes "$T/nodes" <<<'{"rid":1}'
  [[ $stderr == *"stdin:1:"*'`rid`'* ]]
  # an empty request list is a valid, empty plan
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes" </dev/null
  [ -z "$output" ]
}

@test "place: the same input gives the same plan, whatever the node order" {
  local i
  for i in $(seq 1 12); do
    printf '{"node":"n%02d","cpus":%d,"memory_mb":%d,"layers":[{"digest":"%s","size":%d}]%s}\n' \
      "$i" $((4 + i % 3 * 4)) $((8192 * (1 + i % 2))) "$(dg $((i % 5)))" \
      $((1000 * i)) "$( ((i % 6 == 0)) && echo ',"labels":{"pool":"burst"}')"
  done >"$T/nodes"
  for i in $(seq 1 150); do
    printf '{"rid":"r%d","count":%d,"spec":{"image":"%s","resources":{"cpus":%s,"memory_mb":%d,"class":"%s"}}%s}\n' \
      "$i" $((1 + i % 3)) "$(dg $((i % 7)))" "$( ((i % 2)) && echo 0.5 || echo 1)" \
      $((256 * (1 + i % 4))) "$( ((i % 3)) && echo latency || echo besteffort)" \
      "$( ((i % 4 == 0)) && echo ",\"spread\":\"job-$((i % 5))\"")"
  done >"$T/req"
  plan
  echo "$output" >"$T/plan1"
  # a mix of outcomes, so the comparison means something
  [ "$(jq -r .node "$T/plan1" | sort -u | grep -vc null)" -ge 8 ]
  jq -se 'any(.[]; .type == "unplaced")' "$T/plan1"
  [ "$(wc -l <"$T/plan1")" -eq "$(jq -s 'map(.count) | add' "$T/req")" ]
  plan
  [ "$output" = "$(cat "$T/plan1")" ]
  # reversed and shuffled node lists
  tac "$T/nodes" >"$T/nodes.rev"
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes.rev" "$T/req"
  [ "$output" = "$(cat "$T/plan1")" ]
  shuf --random-source=<(yes) "$T/nodes" >"$T/nodes.shuf"
  run -0 --separate-stderr dsec-place place --nodes "$T/nodes.shuf" "$T/req"
  [ "$output" = "$(cat "$T/plan1")" ]
}

@test "place: a write error on stdout fails" {
  [ -w /dev/full ] || skip "needs /dev/full"
  printf '%s\n' '{"node":"a","cpus":4,"memory_mb":4096}' >"$T/nodes"
  printf '%s\n' '{"rid":"r","spec":{"image":"x"}}' >"$T/req"
  run -1 --separate-stderr sh -c \
    'dsec-place place --nodes "$1" "$2" >/dev/full' sh "$T/nodes" "$T/req"
  [[ $stderr == *"write"* ]]
}
