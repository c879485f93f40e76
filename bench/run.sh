#!/usr/bin/env bash
# bench/run.sh: how fast dsec-run creates, runs and removes sandboxes, next
# to crun, bubblewrap and nsenter on the same busybox rootfs, in one run:
#   1. create + exec `true` + destroy   (dsec-run run --rm | crun run | bwrap)
#   2. exec `true` in a running sandbox (dsec-run exec, and one --requests
#      stream | crun exec | nsenter)
#   3. fncall calls per second          (one --requests stream, also with
#      "durable": false | bare fork+exec)
#   4. 64-way burst of creates          (dsec-run create | crun run -d)
#   5. memory per idle sandbox          (200 dsec sandboxes | idle crun)
# A benchmark, not a test: `make check` never runs it.  Needs root; installs
# crun and bubblewrap from apt when missing.  Prints one table on stdout.
# See bench/README for the columns and the knobs.
set -euo pipefail
export LC_ALL=C

prog=run.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

BIN=${DSEC_BIN:-$top}
BASE=${BENCH_BASE:-}
BENCH_DIR=${BENCH_DIR:-/var/tmp/dsec-bench-run}
N_CYCLE=${BENCH_CYCLES:-50}
N_EXEC=${BENCH_EXECS:-200}
N_CALLS=${BENCH_CALLS:-2000}
N_BURST=${BENCH_BURST:-64}
N_IDLE=${BENCH_IDLE:-200}
N_CRUN_IDLE=${BENCH_CRUN_IDLE:-5}
N_WARM=${BENCH_WARMUP:-3}
KEEP=${BENCH_KEEP:-0}
CASES=${BENCH_CASES:-1 2 3 4 5}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

for v in N_CYCLE N_EXEC N_CALLS N_BURST N_IDLE N_CRUN_IDLE; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer"
done
[[ $N_WARM =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a number"
[[ $CASES =~ ^[1-5\ ]+$ ]] || die "BENCH_CASES is a list of case numbers (1 to 5)"
# want N: case N is to be run (BENCH_CASES)
want() { [[ " $CASES " == *" $1 "* ]]; }
# block K N: how many of N runs go in block K of ten alternating blocks
# (the ten add up to N)
block() { echo $(($2 * ($1 + 1) / 10 - $2 * $1 / 10)); }
[[ $(id -u) -eq 0 ]] || die "needs root (dsec-run, crun, cgroups); run: sudo $0"
for b in dsec-run dsec-pull; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
DSEC=$BIN/dsec-run
if [[ -n $BASE ]]; then
  for b in dsec-run dsec-layer; do
    [[ -x $BASE/$b ]] || die "BENCH_BASE: $BASE/$b not found"
  done
fi

need_pkgs=()
command -v crun >/dev/null || need_pkgs+=(crun)
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
command -v nsenter >/dev/null || need_pkgs+=(util-linux)
# the rootfs gets a copy of /bin/busybox: it must be the static one
if [[ ! -x /bin/busybox ]] || ldd /bin/busybox >/dev/null 2>&1; then
  need_pkgs+=(busybox-static)
fi
if ((${#need_pkgs[@]})); then
  log "installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need_pkgs[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q "${need_pkgs[@]}" >/dev/null; } ||
    die "apt-get install ${need_pkgs[*]} failed"
fi
for c in crun bwrap nsenter jq cc tar awk; do
  command -v "$c" >/dev/null || die "missing tool: $c"
done

# ---------------------------------------------------------------- cleanup
# Everything that can outlive the script is private to it: dsec's state
# lives under $BENCH_DIR (so every sandbox there is ours), crun's state dir
# is $BENCH_DIR/crun (so every container there is ours), crun's cgroups are
# named after its containers ($CPFX*), and the only mounts made are inside
# private mount namespaces (gone with their processes).
mkdir -p "$BENCH_DIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
WORK=$BENCH_DIR/work.$$
export DSEC_ROOT=$BENCH_DIR/root DSEC_RUN=$BENCH_DIR/run
unset DSEC_STORE DSEC_DEBUG DSEC_LOG_FORMAT
CRUN_ROOT=$BENCH_DIR/crun
CPFX=dsecbench-$$-
BH=$WORK/bh
HELPER_PID=
POOL_PID=
POOL_BASE_PID=

dsec_ids() {
  # every sandbox of our private root, whatever state it is in
  local d
  for d in "$DSEC_ROOT"/sandboxes/sb-*; do
    [[ -d $d ]] && basename "$d"
  done
  return 0
}

cleanup() {
  local rc=$? ids=() ctrs=() id pid comm d
  trap - EXIT INT TERM HUP
  set +e
  if [[ -n $HELPER_PID ]] && kill -0 "$HELPER_PID" 2>/dev/null; then
    kill "$HELPER_PID" 2>/dev/null
    wait "$HELPER_PID" 2>/dev/null
  fi
  # the pool removes what it keeps when it stops
  for pid in "$POOL_PID" "${POOL_BASE_PID-}"; do
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
    fi
  done
  # dsec sandboxes: rm --force kills the supervisor, removes cgroups+files
  mapfile -t ids < <(dsec_ids)
  if ((${#ids[@]})); then
    log "cleanup: dsec-run rm --force ${#ids[@]} sandbox(es)"
    printf '%s\n' "${ids[@]}" | xargs -r -n 50 "$DSEC" rm --force >/dev/null 2>&1
    for id in "${ids[@]}"; do
      # a supervisor rm could not stop: ours by the state file, checked by
      # name before it is killed
      pid=$(jq -r '.supervisor_pid // 0' "$DSEC_ROOT/sandboxes/$id/state.json" 2>/dev/null)
      if [[ -n $pid && $pid != 0 ]]; then
        comm=$(cat "/proc/$pid/comm" 2>/dev/null)
        [[ $comm == dsec-supervise ]] && kill -KILL "$pid" 2>/dev/null
      fi
      for d in /sys/fs/cgroup/*/dsec/"$id"; do
        [[ -d $d ]] && rmdir "$d" 2>/dev/null
      done
    done
  fi
  # crun containers: delete -f each one in our state dir
  if [[ -d $CRUN_ROOT ]]; then
    mapfile -t ctrs < <(crun --root "$CRUN_ROOT" list -q 2>/dev/null)
    if ((${#ctrs[@]})); then
      log "cleanup: crun delete -f ${#ctrs[@]} container(s)"
      for id in "${ctrs[@]}"; do
        [[ -n $id ]] && crunw delete -f "$id" >/dev/null 2>&1
      done
    fi
  fi
  for d in /sys/fs/cgroup/*/"$CPFX"*; do
    [[ -d $d ]] && rmdir "$d" 2>/dev/null
  done
  # nothing should be mounted under our dir; if something is, undo it
  findmnt -rno TARGET | awk -v p="$BENCH_DIR/" 'index($0, p) == 1' | sort -r |
    while read -r m; do umount -l "$m"; done
  if [[ $KEEP != 1 ]]; then
    rm -rf --one-file-system "$WORK" "$DSEC_ROOT" "$DSEC_RUN" "$CRUN_ROOT" 2>/dev/null
    rmdir "$BENCH_DIR" 2>/dev/null
  fi
  exit "$rc"
}
# shellcheck source=bench/traps.sh
. "$here/traps.sh"

# runs the helper in the background, so that a signal reaches the trap at
# once and the trap can stop it
helper() {
  "$BH" "$@" &
  HELPER_PID=$!
  wait "$HELPER_PID"
  local rc=$?
  HELPER_PID=
  return $rc
}

# ------------------------------------------------------------ the helper
# bh run N CMD...        runs CMD N times one after the other ("{}" in an
#                        argument becomes the run's index), prints the wall
#                        time of each run in microseconds, fails on a
#                        nonzero status
# bh burst K DIR CMD...  starts K CMDs at once, each with stdout in
#                        DIR/<i>.out; prints "i us status" per CMD
# bh stream N CMD...     starts CMD once and writes N {"cmd":["true"]} lines
#                        (or $BH_REQ's) to it, one after the answer to the
#                        previous one; prints each call's microseconds,
#                        then "total US"
# bh nswrap CMD...       CMD in a private mount namespace with a tmpfs over
#                        /sys/fs/cgroup/unified (crun 1.8 refuses a hybrid
#                        layout whose cgroup2 tree owns a controller)
mkdir -p "$WORK"
cat >"$WORK/bh.c" <<'EOF'
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* children get SIGTERM when we do, and are waited for: the script's
 * cleanup must not race a create still in flight */
static pid_t kids[4096];
static int nkids;

static void on_term(int sig)
{
  (void) sig;
  for (int i = 0; i < nkids; i++)
    if (kids[i] > 0)
      kill(kids[i], SIGTERM);
}

static double now_us(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static char **subst(char **argv, int n, int idx)
{
  char **v = calloc((size_t) n + 1, sizeof *v);
  for (int i = 0; i < n; i++) {
    char *p = strstr(argv[i], "{}");
    if (p) {
      if (asprintf(&v[i], "%.*s%d%s", (int) (p - argv[i]), argv[i], idx,
                   p + 2) < 0)
        exit(1);
    } else
      v[i] = argv[i];
  }
  return v;
}

static pid_t spawn(char **argv, int out)
{
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(out >= 0 ? out : null, 1);
    dup2(null, 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  if (pid > 0 && nkids < 4096)
    kids[nkids++] = pid;
  return pid;
}

int main(int argc, char **argv)
{
  if (argc < 3) {
    fprintf(stderr, "usage: bh run|burst|stream|nswrap ...\n");
    return 2;
  }
  {
    struct sigaction sa = { .sa_handler = on_term };
    sigaction(SIGTERM, &sa, NULL);
  }
  if (strcmp(argv[1], "nswrap") == 0) {
    if (unshare(CLONE_NEWNS) < 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("none", "/sys/fs/cgroup/unified", "tmpfs", 0, NULL) < 0) {
      perror("bh nswrap");
      return 125;
    }
    execvp(argv[2], argv + 2);
    perror(argv[2]);
    return 127;
  }
  if (strcmp(argv[1], "run") == 0 && argc > 3) {
    int n = atoi(argv[2]), cmdn = argc - 3;
    for (int i = 0; i < n; i++) {
      char **cmd = subst(argv + 3, cmdn, i);
      int st;
      double t0 = now_us();
      pid_t pid, w;
      nkids = 0;
      pid = spawn(cmd, -1);
      while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
      if (pid < 0 || w < 0)
        return perror("bh run"), 1;
      printf("%.1f\n", now_us() - t0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bh run: %s: run %d ended with status 0x%x\n",
                cmd[0], i, st);
        return 1;
      }
    }
    return 0;
  }
  if (strcmp(argv[1], "burst") == 0 && argc > 4) {
    int k = atoi(argv[2]), cmdn = argc - 4, bad = 0;
    double *t0 = calloc((size_t) k, sizeof *t0), *t1 = calloc((size_t) k, sizeof *t1);
    int *st = calloc((size_t) k, sizeof *st);
    pid_t *pids = calloc((size_t) k, sizeof *pids);
    char **cmds[4096];
    if (k > 4096)
      return 2;
    for (int i = 0; i < k; i++)
      cmds[i] = subst(argv + 4, cmdn, i);
    for (int i = 0; i < k; i++) {
      char path[4096];
      int out;
      snprintf(path, sizeof path, "%s/%d.out", argv[3], i);
      out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      t0[i] = now_us();
      pids[i] = spawn(cmds[i], out);
      close(out);
    }
    for (int left = k; left > 0;) {
      int s;
      pid_t p = waitpid(-1, &s, 0);
      double t = now_us();
      if (p < 0) {
        if (errno == EINTR)
          continue;
        break;
      }
      for (int i = 0; i < k; i++)
        if (pids[i] == p) {
          t1[i] = t;
          st[i] = s;
          left--;
        }
    }
    for (int i = 0; i < k; i++) {
      printf("%d %.1f %d\n", i, t1[i] - t0[i], st[i]);
      bad += st[i] != 0;
    }
    return bad ? 1 : 0;
  }
  if (strcmp(argv[1], "stream") == 0 && argc > 3) {
    char req[4096];
    int n = atoi(argv[2]), in[2], out[2], st, bad = 0;
    char buf[65536];
    size_t have = 0;
    double start = now_us(), *lat = calloc((size_t) n, sizeof *lat);
    pid_t pid;
    FILE *o;

    size_t reqlen;

    snprintf(req, sizeof req, "%s\n",
             getenv("BH_REQ") ? getenv("BH_REQ") : "{\"cmd\":[\"true\"]}");
    reqlen = strlen(req);
    signal(SIGPIPE, SIG_IGN);
    if (pipe(in) < 0 || pipe(out) < 0)
      return 1;
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]); close(in[1]); close(out[0]); close(out[1]);
      execvp(argv[3], argv + 3);
      _exit(127);
    }
    kids[nkids++] = pid;
    close(in[0]);
    close(out[1]);
    for (int i = 0; i < n; i++) {
      double t0 = now_us();
      char *nl;
      if (write(in[1], req, reqlen) != (ssize_t) reqlen)
        return perror("bh stream: write"), 1;
      while (!(nl = memchr(buf, '\n', have))) {
        ssize_t r = read(out[0], buf + have, sizeof buf - have);
        if (r <= 0)
          return fprintf(stderr, "bh stream: no answer to call %d\n", i), 1;
        have += (size_t) r;
      }
      lat[i] = now_us() - t0;
      *nl = '\0';
      if (!strstr(buf, "\"exit_code\":0,") && bad++ < 3)
        fprintf(stderr, "bh stream: call %d: %s\n", i, buf);
      have -= (size_t) (nl + 1 - buf);
      memmove(buf, nl + 1, have);
    }
    close(in[1]);
    while (read(out[0], buf, sizeof buf) > 0)
      ;
    waitpid(pid, &st, 0);
    o = stdout;
    for (int i = 0; i < n; i++)
      fprintf(o, "%.1f\n", lat[i]);
    fprintf(o, "total %.1f\n", now_us() - start);
    return bad || st ? 1 : 0;
  }
  fprintf(stderr, "bh: bad arguments\n");
  return 2;
}
EOF
cc -O2 -Wall -o "$BH" "$WORK/bh.c" || die "cannot compile the helper"

# a snapshot of the programs: others rebuild the tree while this runs, and
# one run must measure one build (dsec-run finds dsec-layer next to itself)
mkdir -p "$WORK/bin"
for b in dsec-run dsec-pull dsec-layer; do
  [[ -x $BIN/$b ]] && cp "$BIN/$b" "$WORK/bin/$b"
done
BUILD="$(stat -c %y "$BIN/dsec-run" | cut -d. -f1) (tree at $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?'))"
BIN=$WORK/bin
DSEC=$BIN/dsec-run
if [[ -n $BASE ]]; then
  mkdir -p "$WORK/base"
  cp "$BASE/dsec-run" "$BASE/dsec-layer" "$WORK/base/"
  BASE_BUILD="$(git -C "$BASE" rev-parse --short HEAD 2>/dev/null || echo "$BASE")"
  BASE=$WORK/base
fi

crunw() { "$BH" nswrap crun --root "$CRUN_ROOT" "$@"; }

# ---------------------------------------------------------------- numbers
RES=$WORK/res
mkdir -p "$RES"

# pct FILE Q: nearest-rank quantile of the numbers in FILE (one per line)
pct() {
  sort -n "$1" | awk -v q="$2" '{ v[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit }
    r = int(q * NR); if (r < q * NR) r++; if (r < 1) r = 1; print v[r] }'
}
mean() { awk '{ s += $1 } END { printf("%.1f", NR ? s / NR : 0) }' "$1"; }
# net FILE OUT US: FILE's samples minus US (a wrapper's median cost)
net() { awk -v d="$3" '{ x = $1 - d; print (x > 0 ? x : 0) }' "$1" >"$2"; }
ms() { awk -v u="$1" 'BEGIN { printf("%.2f ms", u / 1000) }'; }
kib() { awk -v b="$1" 'BEGIN { printf("%.0f KiB", b / 1024) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf("%.2fx", a / b); else print "-" }'; }
# verdict VALUE LIMIT: "met" when VALUE <= LIMIT
verdict() { awk -v a="$1" -v b="$2" 'BEGIN { print (a <= b ? "met" : "MISSED") }'; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------- the rootfs
log "building the busybox rootfs with examples/mkrootfs-busybox.sh"
TARBALL=$WORK/busybox.tar
"$top/examples/mkrootfs-busybox.sh" "$TARBALL"
ROOTFS=$WORK/bundle/rootfs
mkdir -p "$ROOTFS"
tar -C "$ROOTFS" --numeric-owner -xpf "$TARBALL"
log "dsec-pull --name busybox:bench tar:$TARBALL (DSEC_ROOT=$DSEC_ROOT)"
"$BIN/dsec-pull" --name busybox:bench "tar:$TARBALL" >"$WORK/image.json"
IMAGE=busybox:bench

# crun bundles: `crun spec` with the rootfs, no terminal; one for `true`,
# one kept running with `sleep infinity`; the rootfs is read-only and
# shared by every container
mkdir -p "$WORK/bundle" "$WORK/bundle-sleep"
(cd "$WORK/bundle" && rm -f config.json && crun spec)
jq --arg r "$ROOTFS" '.process.terminal = false | .process.args = ["true"] |
  .root.path = $r | .root.readonly = true' "$WORK/bundle/config.json" >"$WORK/c.json"
mv "$WORK/c.json" "$WORK/bundle/config.json"
jq '.process.args = ["sleep", "infinity"]' "$WORK/bundle/config.json" \
  >"$WORK/bundle-sleep/config.json"
mkdir -p "$CRUN_ROOT"

# ------------------------------------------------- 0. wrapper and fork+exec
log "the nswrap wrapper's own cost and a bare fork+exec of /bin/true"
helper run "$N_WARM" "$BH" nswrap true >/dev/null
helper run "$N_CYCLE" "$BH" nswrap true >"$RES/wrap"
WRAP=$(pct "$RES/wrap" 0.5)
helper run 20 /bin/true >/dev/null

# --------------------------------------------------- 1. create+exec+destroy
if want 1; then
log "1. create+exec+destroy of true, $N_CYCLE cycles each"
helper run "$N_WARM" "$DSEC" run --rm --image "$IMAGE" -- true >/dev/null
# with BENCH_BASE, the base build's cycles in blocks alternating with
# this build's (as case 2's).  The pooled cycles claim from a
# `dsec-run pool` of a spec of their own (one more env variable, so the
# others never claim from it); each starts when the pool is full again,
# so a claim never meets the pool's own creates.  The base build claims
# from a pool of its own (its supervisors), of a spec of its own.
: >"$RES/c1_dsec"
: >"$RES/c1_base"
: >"$RES/c1_pool"
: >"$RES/c1_pool_base"
POOLED=(run --rm --image "$IMAGE" --env DSEC_BENCH=pool -- true)
POOLED_BASE=(run --rm --image "$IMAGE" --env DSEC_BENCH=pool-base -- true)
"$DSEC" pool --image "$IMAGE" --env DSEC_BENCH=pool --size 2 >"$WORK/pool.out" 2>&1 &
POOL_PID=$!
POOLS=2
if [[ -n $BASE ]]; then
  "$BASE/dsec-run" pool --image "$IMAGE" --env DSEC_BENCH=pool-base --size 2 \
    >"$WORK/pool-base.out" 2>&1 &
  POOL_BASE_PID=$!
  POOLS=4
fi
pool_full() {
  local i n
  for ((i = 0; i < 300; i++)); do
    n=$(find "$DSEC_ROOT/pools" -path '*/ready/sb-*' 2>/dev/null | wc -l) || n=0
    ((n >= POOLS)) && return 0
    kill -0 "$POOL_PID" 2>/dev/null || die "dsec-run pool ended: $(cat "$WORK/pool.out")"
    [[ -z ${POOL_BASE_PID-} ]] || kill -0 "$POOL_BASE_PID" 2>/dev/null ||
      die "the base build's dsec-run pool ended: $(cat "$WORK/pool-base.out")"
    sleep 0.05
  done
  die "the pools were not refilled in 15 s"
}
pool_full
helper run "$N_WARM" "$DSEC" "${POOLED[@]}" >/dev/null
[[ -z $BASE ]] || { pool_full; helper run "$N_WARM" "$BASE/dsec-run" "${POOLED_BASE[@]}" >/dev/null; }
[[ -n $BASE ]] && helper run "$N_WARM" "$BASE/dsec-run" run --rm --image "$IMAGE" -- true >/dev/null
for ((k = 0; k < 10; k++)); do
  nb=$(block "$k" "$N_CYCLE")
  ((nb > 0)) || continue
  helper run "$nb" "$DSEC" run --rm --image "$IMAGE" -- true >>"$RES/c1_dsec"
  [[ -z $BASE ]] ||
    helper run "$nb" "$BASE/dsec-run" run --rm --image "$IMAGE" -- true >>"$RES/c1_base"
  for ((j = 0; j < nb; j++)); do
    pool_full
    helper run 1 "$DSEC" "${POOLED[@]}" >>"$RES/c1_pool"
    [[ -z $BASE ]] && continue
    pool_full
    helper run 1 "$BASE/dsec-run" "${POOLED_BASE[@]}" >>"$RES/c1_pool_base"
  done
done
kill -TERM "$POOL_PID"
wait "$POOL_PID" || die "dsec-run pool failed: $(cat "$WORK/pool.out")"
POOL_PID=
if [[ -n ${POOL_BASE_PID-} ]]; then
  kill -TERM "$POOL_BASE_PID"
  wait "$POOL_BASE_PID" || die "the base build's dsec-run pool failed: $(cat "$WORK/pool-base.out")"
  POOL_BASE_PID=
fi
helper run "$N_WARM" "$BH" nswrap crun --root "$CRUN_ROOT" run -b "$WORK/bundle" "${CPFX}w{}" >/dev/null
helper run "$N_CYCLE" "$BH" nswrap crun --root "$CRUN_ROOT" run -b "$WORK/bundle" "${CPFX}c{}" >"$RES/c1_crun_raw"
net "$RES/c1_crun_raw" "$RES/c1_crun" "$WRAP"
BWRAP=(bwrap --unshare-all --ro-bind "$ROOTFS" / --proc /proc --dev /dev true)
helper run "$N_WARM" "${BWRAP[@]}" >/dev/null
helper run "$N_CYCLE" "${BWRAP[@]}" >"$RES/c1_bwrap"
fi

# ------------------------------------------------------------- 2. exec
if want 2; then
log "2. exec of true into a running sandbox, $N_EXEC each"
# every runner in ten blocks, one after the other in each block, so that
# the machine's load changes weigh on all of them alike: dsec-run exec (a
# process per exec), one --requests stream per block, nsenter into a crun
# container, and with BENCH_BASE the base build's two into a sandbox of
# its own (its supervisor)
SB=$("$DSEC" create --image "$IMAGE" | jq -er .id)
helper run "$N_WARM" "$DSEC" exec "$SB" -- true >/dev/null
helper stream 20 "$DSEC" exec "$SB" --requests - >/dev/null
SBB=
if [[ -n $BASE ]]; then
  SBB=$("$BASE/dsec-run" create --image "$IMAGE" | jq -er .id)
  helper run "$N_WARM" "$BASE/dsec-run" exec "$SBB" -- true >/dev/null
  helper stream 20 "$BASE/dsec-run" exec "$SBB" --requests - >/dev/null
fi
CTR=${CPFX}exec
crunw run -d -b "$WORK/bundle-sleep" "$CTR" >/dev/null </dev/null
CPID=$(crun --root "$CRUN_ROOT" state "$CTR" | jq -er .pid)
helper run "$N_WARM" nsenter -t "$CPID" -a true >/dev/null
: >"$RES/c2_dsec"
: >"$RES/c2_base"
: >"$RES/c2s_dsec.raw"
: >"$RES/c2s_base.raw"
: >"$RES/c2_nsenter"
for ((k = 0; k < 10; k++)); do
  nb=$(block "$k" "$N_EXEC")
  ((nb > 0)) || continue
  helper stream "$nb" "$DSEC" exec "$SB" --requests - >>"$RES/c2s_dsec.raw"
  helper run "$nb" nsenter -t "$CPID" -a true >>"$RES/c2_nsenter"
  helper run "$nb" "$DSEC" exec "$SB" -- true >>"$RES/c2_dsec"
  if [[ -n $BASE ]]; then
    helper stream "$nb" "$BASE/dsec-run" exec "$SBB" --requests - >>"$RES/c2s_base.raw"
    helper run "$nb" "$BASE/dsec-run" exec "$SBB" -- true >>"$RES/c2_base"
  fi
done
# (|| true: without BENCH_BASE its file is empty, and grep then fails)
grep -v '^total' "$RES/c2s_dsec.raw" >"$RES/c2s_dsec" || true
grep -v '^total' "$RES/c2s_base.raw" >"$RES/c2s_base" || true
[[ -n $BASE ]] && "$BASE/dsec-run" rm --force "$SBB" >/dev/null
"$DSEC" rm --force "$SB" >/dev/null
# crun exec joins the container's existing cgroups and works without the
# wrapper here; when it does not, it runs wrapped and the wrapper's median
# is taken off
if crun --root "$CRUN_ROOT" exec "$CTR" true >/dev/null 2>&1; then
  CRUN_EXEC_NOTE="crun exec (no wrapper needed)"
  helper run "$N_WARM" crun --root "$CRUN_ROOT" exec "$CTR" true >/dev/null
  helper run "$N_EXEC" crun --root "$CRUN_ROOT" exec "$CTR" true >"$RES/c2_crun"
else
  CRUN_EXEC_NOTE="crun exec (wrapped, wrapper median taken off)"
  helper run "$N_WARM" "$BH" nswrap crun --root "$CRUN_ROOT" exec "$CTR" true >/dev/null
  helper run "$N_EXEC" "$BH" nswrap crun --root "$CRUN_ROOT" exec "$CTR" true >"$RES/c2_crun_raw"
  net "$RES/c2_crun_raw" "$RES/c2_crun" "$WRAP"
fi
crunw delete -f "$CTR" >/dev/null 2>&1 || true
fi

# ----------------------------------------------------------- 3. fncall
if want 3; then
log "3. $N_CALLS fncall calls of true through --requests streams"
# in ten blocks, as case 2: a stream of this build, bare fork+execs, and
# with BENCH_BASE a stream of the base build into an fncall sandbox of its
# own
FSB=$("$DSEC" create --backend fncall --image "$IMAGE" | jq -er .id)
helper stream 20 "$DSEC" exec "$FSB" --requests - >/dev/null
FSBB=
if [[ -n $BASE ]]; then
  FSBB=$("$BASE/dsec-run" create --backend fncall --image "$IMAGE" | jq -er .id)
  helper stream 20 "$BASE/dsec-run" exec "$FSBB" --requests - >/dev/null
fi
: >"$RES/c3_fncall.raw"
: >"$RES/c3_base.raw"
: >"$RES/c3_volatile.raw"
: >"$RES/c3_forkexec"
for ((k = 0; k < 10; k++)); do
  nb=$(block "$k" "$N_CALLS")
  ((nb > 0)) || continue
  helper stream "$nb" "$DSEC" exec "$FSB" --requests - >>"$RES/c3_fncall.raw"
  helper run "$nb" /bin/true >>"$RES/c3_forkexec"
  # the same calls without their trajectory record's fdatasync (what the
  # disk adds to a call)
  BH_REQ='{"cmd":["true"],"durable":false}' \
    helper stream "$nb" "$DSEC" exec "$FSB" --requests - >>"$RES/c3_volatile.raw"
  [[ -n $BASE ]] && helper stream "$nb" "$BASE/dsec-run" exec "$FSBB" --requests - >>"$RES/c3_base.raw"
done
grep -v '^total' "$RES/c3_fncall.raw" >"$RES/c3_fncall" || true
grep -v '^total' "$RES/c3_base.raw" >"$RES/c3_base" || true
grep -v '^total' "$RES/c3_volatile.raw" >"$RES/c3_volatile"
# calls/s: the calls over the streams' own totals
C3_TOTAL=$(awk '$1 == "total" { t += $2 } END { print t }' "$RES/c3_fncall.raw")
[[ -n $BASE ]] && "$BASE/dsec-run" rm --force "$FSBB" >/dev/null
"$DSEC" rm --force "$FSB" >/dev/null
fi

# ------------------------------------------------------------- 4. burst
if want 4; then
log "4. $N_BURST concurrent creates, dsec-run create and crun run -d"
mkdir -p "$WORK/burst-dsec" "$WORK/burst-crun"
helper burst "$N_BURST" "$WORK/burst-dsec" "$DSEC" create --image "$IMAGE" \
  >"$RES/c4_dsec_raw" || log "some dsec-run creates of the burst failed"
awk '$3 == 0 { print $2 }' "$RES/c4_dsec_raw" >"$RES/c4_dsec"
C4_DSEC_FAIL=$(awk '$3 != 0' "$RES/c4_dsec_raw" | wc -l)
mapfile -t ids < <(dsec_ids)
((${#ids[@]} == 0)) || printf '%s\n' "${ids[@]}" | xargs -r -n 64 "$DSEC" rm --force >/dev/null
helper burst "$N_BURST" "$WORK/burst-crun" "$BH" nswrap crun --root "$CRUN_ROOT" \
  run -d -b "$WORK/bundle-sleep" "${CPFX}b{}" >"$RES/c4_crun_raw" ||
  log "some crun run -d of the burst failed"
awk '$3 == 0 { print $2 }' "$RES/c4_crun_raw" >"$RES/c4_crun_w"
net "$RES/c4_crun_w" "$RES/c4_crun" "$WRAP"
C4_CRUN_FAIL=$(awk '$3 != 0' "$RES/c4_crun_raw" | wc -l)
for ((i = 0; i < N_BURST; i++)); do
  crunw delete -f "${CPFX}b$i" >/dev/null 2>&1 || true
done
fi

# ------------------------------------------------------------ 5. memory
n_mem=0 mem_sum=0 pss_sum=0
if want 5; then
log "5. memory: $N_IDLE idle dsec sandboxes, $N_CRUN_IDLE idle crun containers"
: >"$WORK/idle-ids"
for ((i = 0; i < N_IDLE; i++)); do
  "$DSEC" create --image "$IMAGE" | jq -er .id >>"$WORK/idle-ids"
done
sleep 2 # let what the creates left behind (page cache, slabs) settle
mapfile -t ids <"$WORK/idle-ids"
mem_sum=0 pss_sum=0 pss_sup=0 pss_init=0 n_mem=0
pss_of() { awk '$1 == "Pss:" { print $2 * 1024; exit }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
for id in "${ids[@]}"; do
  ins=$("$DSEC" inspect "$id")
  sp=$(jq -r .supervisor_pid <<<"$ins")
  ip=$(jq -r .init_pid <<<"$ins")
  u=$(cat "/sys/fs/cgroup/memory/dsec/$id/memory.usage_in_bytes")
  a=$(pss_of "$sp")
  b=$(pss_of "$ip")
  mem_sum=$((mem_sum + u))
  pss_sup=$((pss_sup + a))
  pss_init=$((pss_init + b))
  n_mem=$((n_mem + 1))
done
pss_sum=$((pss_sup + pss_init))
C5_MEMCG=$((mem_sum / n_mem))
C5_PSS=$((pss_sum / n_mem))
C5_PSS_SUP=$((pss_sup / n_mem))
C5_PSS_INIT=$((pss_init / n_mem))
log "removing the $N_IDLE idle sandboxes"
printf '%s\n' "${ids[@]}" | xargs -r -n 50 "$DSEC" rm --force >/dev/null
crun_mem=0 crun_pss=0
for ((i = 0; i < N_CRUN_IDLE; i++)); do
  crunw run -d -b "$WORK/bundle-sleep" "${CPFX}i$i" >/dev/null </dev/null
done
sleep 2
for ((i = 0; i < N_CRUN_IDLE; i++)); do
  p=$(crun --root "$CRUN_ROOT" state "${CPFX}i$i" | jq -er .pid)
  crun_mem=$((crun_mem + $(cat "/sys/fs/cgroup/memory/${CPFX}i$i/memory.usage_in_bytes")))
  crun_pss=$((crun_pss + $(pss_of "$p")))
done
C5_CRUN=$((crun_mem / N_CRUN_IDLE))
C5_CRUN_PSS=$((crun_pss / N_CRUN_IDLE))
for ((i = 0; i < N_CRUN_IDLE; i++)); do
  crunw delete -f "${CPFX}i$i" >/dev/null 2>&1 || true
done
fi

# ------------------------------------------------------------ the table
p50() { pct "$RES/$1" 0.5; }
p99() { pct "$RES/$1" 0.99; }
# row CASE TOOL FILE [DSEC-FILE TARGET-FACTOR]: the last two make the
# row a peer: "dsec/peer" is dsec's p50 (and p99) over this row's
row() {
  local r50 r99 t=- a50 a99
  a50=$(p50 "$3") a99=$(p99 "$3")
  if [[ -n ${4:-} ]]; then
    r50=$(ratio "$(p50 "$4")" "$a50")
    r99=$(ratio "$(p99 "$4")" "$a99")
    [[ -n ${5:-} ]] && t="<= ${5}x: $(verdict "$(p50 "$4")" "$(awk -v a="$a50" -v f="$5" 'BEGIN { print a * f }')")"
  else
    r50=- r99=-
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$(ms "$a50")" "$(ms "$a99")" "$r50" "$r99" "$t"
}

C3_RATE=0
want 3 && C3_RATE=$(awk -v n="$(wc -l <"$RES/c3_fncall")" -v t="$C3_TOTAL" \
  'BEGIN { printf("%.0f", t > 0 ? n / (t / 1e6) : 0) }')
FE_RATE=0
want 3 && FE_RATE=$(awk -v m="$(mean "$RES/c3_forkexec")" 'BEGIN { printf("%.0f", 1e6 / m) }')

{
  printf 'case\trunner\tp50\tp99\tdsec/peer p50\tdsec/peer p99\ttarget\n'
  row "0 wrapper" "nswrap true (unshare -m + tmpfs)" wrap
  if want 1; then
    row "1 cycle x$N_CYCLE" "dsec-run run --rm -- true" c1_dsec
    row "1 cycle" "bwrap --unshare-all true" c1_bwrap c1_dsec 1.0
    row "1 cycle" "crun run (net of wrapper)" c1_crun c1_dsec
    row "1 cycle" "dsec-run run --rm claiming from a pool" c1_pool
    row "1 cycle" "bwrap (vs a claim from a pool)" c1_bwrap c1_pool 1.0
    [[ -n $BASE ]] && row "1 cycle" "dsec-run run --rm, BENCH_BASE build ($BASE_BUILD)" c1_base c1_dsec
    [[ -n $BASE ]] && row "1 cycle" "claiming from a pool, BENCH_BASE build ($BASE_BUILD)" c1_pool_base c1_pool
  fi
  if want 2; then
    row "2 exec x$N_EXEC" "one --requests stream: exec ID true" c2s_dsec
    row "2 exec" "nsenter -t PID -a true" c2_nsenter c2s_dsec 0.6
    row "2 exec" "dsec-run exec ID -- true (a process per exec)" c2_dsec
    row "2 exec" "nsenter (vs a dsec-run process per exec)" c2_nsenter c2_dsec
    row "2 exec" "$CRUN_EXEC_NOTE" c2_crun c2_dsec
    if [[ -n $BASE ]]; then
      row "2 exec" "one stream, BENCH_BASE build ($BASE_BUILD)" c2s_base c2s_dsec
      row "2 exec" "dsec-run exec, BENCH_BASE build ($BASE_BUILD)" c2_base c2_dsec
    fi
  fi
  if want 3; then
    row "3 fncall x$N_CALLS" "one --requests stream: $C3_RATE calls/s" c3_fncall
    row "3 fncall" "bare fork+execve+waitpid: $FE_RATE /s" c3_forkexec c3_fncall 1.3
    row "3 fncall" "one stream, \"durable\": false (no fdatasync)" c3_volatile
    row "3 fncall" "bare fork+exec (vs \"durable\": false)" c3_forkexec c3_volatile
    [[ -n $BASE ]] && row "3 fncall" "one stream, BENCH_BASE build ($BASE_BUILD)" c3_base c3_fncall
  fi
  if want 4; then
    row "4 burst x$N_BURST" "dsec-run create ($C4_DSEC_FAIL failed)" c4_dsec
    row "4 burst" "crun run -d, net of wrapper ($C4_CRUN_FAIL failed)" c4_crun c4_dsec
  fi
  if want 5; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "5 idle x$N_IDLE" "dsec memcg usage / sandbox" \
      "$(kib "$C5_MEMCG")" - "$(ratio "$C5_MEMCG" "$C5_CRUN")" - \
      "<= 1 MiB: $(verdict "$C5_MEMCG" 1048576)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "5 idle" \
      "dsec PSS supervisor+init / sandbox ($(kib "$C5_PSS_SUP") + $(kib "$C5_PSS_INIT"))" \
      "$(kib "$C5_PSS")" - "$(ratio "$C5_PSS" "$C5_CRUN_PSS")" - \
      "<= 1 MiB: $(verdict "$C5_PSS" 1048576)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "5 idle x$N_CRUN_IDLE" \
      "crun sleep infinity: memcg (PSS $(kib "$C5_CRUN_PSS"))" "$(kib "$C5_CRUN")" - - - -
  fi
} >"$WORK/table"

echo
echo "dsec-run benchmark: $(date -u +%Y-%m-%dT%H:%M:%SZ); nproc=$(nproc), kernel $(uname -r);" \
  "$(crun --version | head -n 1), bubblewrap $(bwrap --version | awk '{ print $2 }')"
echo "dsec-run built $BUILD"
echo "load average at start / end: $LOAD0 / $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine makes p99 noisy)"
echo "memory column: p50 is the mean per sandbox; 'dsec/peer' divides dsec by the crun row."
echo "crun runs inside nswrap; 'net of wrapper' rows subtract the wrapper's p50 ($(ms "$WRAP"))."
want 5 && echo "case 5 over $n_mem sandboxes: memcg usage sum $(kib "$mem_sum"), PSS sum $(kib "$pss_sum")."
want 3 && echo "fncall: $N_CALLS calls in $(ms "$C3_TOTAL") (dsec-run exec --requests -, ten streams)."
echo "cases 2 and 3: every runner in ten blocks that alternate, so that the load weighs on all alike."
[[ -n $BASE ]] && echo "BENCH_BASE: $BASE_BUILD, its own sandboxes, in blocks alternating with this build's."
if command -v column >/dev/null; then
  column -t -s $'\t' "$WORK/table"
else
  cat "$WORK/table"
fi
