#!/usr/bin/env bash
# bench/place.sh: how long `dsec-place place` takes to plan BENCH_REQUESTS
# requests (32,000) over BENCH_NODES nodes (160), on one core.
# A benchmark, not a test: `make check` never runs it.  Needs no root.
#
#   bench/place.sh                       # 5 runs, the best and the median
#   BENCH_COUNT=4 bench/place.sh         # 4 sandboxes per request
#
# The inputs are generated here (awk, fixed seed, so every run plans the
# same thing): nodes of 64, 128 or 192 CPUs and 4 GiB of memory per CPU,
# one in ten in the burst pool, one in four with the VM backends, each
# holding 300 of a pool of 2,000 layers and some committed load; requests
# for 1 (BENCH_COUNT) sandbox of 0.5, 1 or 2 CPUs and 512 MiB to 4 GiB,
# half latency, half best-effort, 5% microvm, an image named by a layer
# digest (so the layer-cache affinity has bytes to count) plus one extra
# layer, and a spread group for one request in two (400 jobs).  No store
# is used (DSEC_ROOT is an empty directory).
#
# Environment:
#   BENCH_NODES=160 BENCH_REQUESTS=32000 BENCH_COUNT=1 BENCH_N=5
#   BENCH_CPU=0        the CPU the runs are pinned to (taskset), "" for none
#   DSEC_BIN=<tree>    where dsec-place is (default: the source tree)
set -euo pipefail
export LC_ALL=C

prog=place.sh
here=$(cd "$(dirname "$0")" && pwd)
BIN=${DSEC_BIN:-$(dirname "$here")}
NODES=${BENCH_NODES:-160}
REQUESTS=${BENCH_REQUESTS:-32000}
COUNT=${BENCH_COUNT:-1}
N=${BENCH_N:-5}
CPU=${BENCH_CPU-0}

die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }

for v in NODES REQUESTS COUNT N; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "BENCH_$v must be a positive integer"
done
[[ -x $BIN/dsec-place ]] || die "$BIN/dsec-place not found: build dsec first (or set DSEC_BIN)"
command -v awk >/dev/null || die "missing tool: awk"
pin=()
if [[ -n $CPU ]]; then
  command -v taskset >/dev/null || die "missing tool: taskset (or set BENCH_CPU=)"
  pin=(taskset -c "$CPU")
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dsec-bench-place.XXXXXX")
trap 'rm -rf "$work"' EXIT
export DSEC_ROOT=$work/root DSEC_RUN=$work/run
unset DSEC_STORE
mkdir -p "$DSEC_ROOT"

# A layer digest per index: 64 hex digits, made from the index.
awk -v nodes="$NODES" -v requests="$REQUESTS" -v count="$COUNT" \
  -v out_nodes="$work/nodes.jsonl" -v out_reqs="$work/requests.jsonl" '
  function digest(i) { return sprintf("sha256:%064x", i * 2654435761 % 4294967296 + 1) }
  BEGIN {
    srand(17)
    pool = 2000
    for (n = 1; n <= nodes; n++) {
      cpus = (n % 3 == 0) ? 64 : (n % 3 == 1) ? 128 : 192
      backends = (n % 4 == 0) ? "[\"fncall\",\"container\",\"microvm\",\"vm\"]" \
                              : "[\"fncall\",\"container\"]"
      layers = ""
      for (k = 0; k < 300; k++) {
        l = int(rand() * pool)
        layers = layers (k ? "," : "") sprintf("{\"digest\":\"%s\",\"size\":%d}",
          digest(l), 1048576 * (1 + l % 500))
      }
      labels = (n % 10 == 0) ? "{\"pool\":\"burst\"}" : "{\"rack\":\"r" int(n / 20) "\"}"
      printf "{\"type\":\"node\",\"node\":\"n%03d\",\"cpus\":%d,\"memory_mb\":%d," \
        "\"backends\":%s,\"accel\":\"kvm\",\"layers\":[%s]," \
        "\"committed\":{\"latency\":{\"cpus\":%d,\"memory_mb\":%d,\"count\":%d}," \
        "\"besteffort\":{\"cpus\":0,\"memory_mb\":0,\"count\":0}},\"labels\":%s}\n",
        n, cpus, cpus * 4096, backends, layers, cpus / 8, cpus * 256, cpus / 8,
        labels > out_nodes
    }
    split("0.5 1 2", cpuc, " ")
    split("512 1024 2048 4096", memc, " ")
    for (r = 1; r <= requests; r++) {
      cls = (r % 2) ? "latency" : "besteffort"
      backend = (r % 20 == 0) ? "microvm" : "container"
      img = int(rand() * pool)
      extra = int(rand() * pool)
      spread = (r % 2) ? sprintf(",\"spread\":\"job-%d\"", r % 400) : ""
      printf "{\"rid\":\"r%05d\",\"count\":%d,\"spec\":{\"backend\":\"%s\"," \
        "\"image\":\"%s\",\"layers\":[\"%s\"],\"resources\":{\"cpus\":%s," \
        "\"memory_mb\":%s,\"class\":\"%s\"}}%s}\n",
        r, count, backend, digest(img), digest(extra), cpuc[1 + int(rand() * 3)],
        memc[1 + int(rand() * 4)], cls, spread > out_reqs
    }
  }'

expected=$((REQUESTS * COUNT))
printf 'dsec-place place: %d requests x %d sandboxes over %d nodes\n' \
  "$REQUESTS" "$COUNT" "$NODES"
printf 'input: nodes %s bytes, requests %s bytes; %s CPUs, %s, %s\n' \
  "$(stat -c %s "$work/nodes.jsonl")" "$(stat -c %s "$work/requests.jsonl")" \
  "$(nproc)" "$(uname -r)" \
  "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
[[ -n $CPU ]] && printf 'pinned to CPU %s\n' "$CPU"

times=()
for ((i = 1; i <= N; i++)); do
  start=$(date +%s%N)
  "${pin[@]}" "$BIN/dsec-place" place --nodes "$work/nodes.jsonl" \
    "$work/requests.jsonl" >"$work/plan.jsonl"
  end=$(date +%s%N)
  times+=($(((end - start) / 1000)))
done
lines=$(wc -l <"$work/plan.jsonl")
[[ $lines -eq $expected ]] || die "the plan has $lines lines, not $expected"

mapfile -t sorted < <(printf '%s\n' "${times[@]}" | sort -n)
ms() { awk -v us="$1" 'BEGIN { printf "%.1f ms", us / 1000 }'; }
printf 'wall time of %d runs: best %s, median %s, worst %s\n' "$N" \
  "$(ms "${sorted[0]}")" "$(ms "${sorted[$((N / 2))]}")" "$(ms "${sorted[$((N - 1))]}")"
awk -F'"' '
  /"type":"assignment"/ { placed++; for (i = 1; i < NF; i++) if ($i == "node") nodes[$(i + 2)]++ }
  /"type":"unplaced"/ { unplaced++; for (i = 1; i < NF; i++) if ($i == "reason") why[$(i + 2)]++ }
  END {
    for (n in nodes) used++
    printf "plan: %d placed on %d nodes, %d unplaced", placed, used, unplaced
    for (w in why) printf " (%s: %d)", w, why[w]
    printf "\n"
  }' "$work/plan.jsonl"
if ((sorted[N / 2] < 1000000)); then
  echo "goal (under 1 s on one core): met"
else
  echo "goal (under 1 s on one core): missed"
fi
