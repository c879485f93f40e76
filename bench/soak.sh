#!/usr/bin/env bash
# bench/soak.sh [SECONDS]: a soak of the sandbox lifecycle through
# `dsec-run serve`.  For SECONDS (default 600), BENCH_CLIENTS (64) client
# threads share BENCH_SERVES (2) serve processes and each, at random, makes
# busybox sandboxes (container backend) and runs exec (plain, with a seq
# and sent again, timed out, streamed), session commands, cp in and out
# (upload, download, compared), checkpoint, fork, suspend (with and without
# --release), resume and rm on them, with kills now and then: an exec's
# command killed by a signal, and (BENCH_KILL_PCT percent of the rounds)
# the sandbox's supervisor killed with SIGKILL, after which the sandbox
# is removed with rm --force.  One witness sandbox lives through it all and
# takes an exec from each client now and then.
#
# At the end every sandbox but the witness is removed, and the script
# compares with the start: the serve processes' open descriptors, the
# witness supervisor's descriptors and memory (RSS, after the same number
# of execs is no promise, so it reports the growth), cgroups, mounts and
# loop devices of the soak's sandboxes, ids under $DSEC_ROOT/ids, sandbox
# directories, and processes of the soak's DSEC_ROOT.  A failed request
# that no kill caused is a failure (but a session command's "session ...
# was lost" once after a release, as documented).  Prints one JSON line
# (requests, failures, explained failures, leaks) and exits 1 on a
# failure or a leak.  A benchmark, not a test: needs root and
# busybox-static.  See bench/README.
set -euo pipefail
export LC_ALL=C

prog=soak.sh
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")

SECONDS_RUN=${1:-600}
CLIENTS=${BENCH_CLIENTS:-64}
SERVES=${BENCH_SERVES:-2}
KILL_PCT=${BENCH_KILL_PCT:-3}
CACHE=${BENCH_CACHE:-/var/tmp/dsec-soak}
BIN=${DSEC_BIN:-$top}

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "$*"; exit 1; }

[[ $SECONDS_RUN =~ ^[0-9]+$ ]] || die "usage: soak.sh [SECONDS]"
[[ $(id -u) -eq 0 ]] || die "needs root; run: sudo $0"
for b in dsec-pull dsec-run; do
  [[ -x $BIN/$b ]] || die "$BIN/$b not found: build dsec first (or set DSEC_BIN)"
done
for c in python3 jq losetup; do
  command -v "$c" >/dev/null || die "missing tool: $c"
done

mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
WORK=$(mktemp -d "$CACHE/run.XXXXXX")
chmod 711 "$WORK"
# the binaries copied: a rebuild during the run cannot mix two builds
mkdir "$WORK/bin"
for b in dsec-run dsec-pull dsec-layer dsec-vm dsec-reap dsec-agent; do
  [[ -x $BIN/$b ]] && cp "$BIN/$b" "$WORK/bin/"
done
export PATH=$WORK/bin:$PATH
export DSEC_ROOT=$WORK/root DSEC_RUN=$WORK/run
unset DSEC_STORE DSEC_LAYER_FORMAT
mkdir -m 711 "$DSEC_RUN"

cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  if [[ -d $DSEC_ROOT/sandboxes ]]; then
    dsec-run ps --all 2>/dev/null | jq -r .id |
      xargs -r dsec-run rm --force >/dev/null 2>&1
  fi
  # the layers' shared mounts (dsec-reap's to undo), then anything left
  dsec-reap >/dev/null 2>&1
  awk -v w="$WORK" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo |
    sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf --one-file-system "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

log "image: busybox (examples/mkrootfs-busybox.sh)"
"$top/examples/mkrootfs-busybox.sh" "$WORK/busybox.tar.gz"
dsec-pull --name busybox:soak "tar:$WORK/busybox.tar.gz" >/dev/null
head -c 300000 /dev/urandom >"$WORK/upload.bin"

export SOAK_SECONDS=$SECONDS_RUN SOAK_CLIENTS=$CLIENTS SOAK_SERVES=$SERVES \
  SOAK_KILL_PCT=$KILL_PCT SOAK_WORK=$WORK SOAK_TOP=$top
log "$CLIENTS clients, $SERVES serve processes, ${SECONDS_RUN} s"
python3 - <<'PYEOF'
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.environ["SOAK_TOP"], "python"))
import dsec  # noqa: E402

SECS = int(os.environ["SOAK_SECONDS"])
NCLIENTS = int(os.environ["SOAK_CLIENTS"])
NSERVES = int(os.environ["SOAK_SERVES"])
KILL_PCT = int(os.environ["SOAK_KILL_PCT"])
WORK = os.environ["SOAK_WORK"]
ROOT = os.environ["DSEC_ROOT"]
RUN = os.environ["DSEC_RUN"]
UPLOAD = os.path.join(WORK, "upload.bin")
SPEC = {"image": "busybox:soak", "resources": {"memory_mb": 128, "pids": 64}}


def log(msg):
    print("soak.sh: " + msg, file=sys.stderr, flush=True)


def count_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def supervisor(sid):
    try:
        with open(os.path.join(ROOT, "sandboxes", sid, "state.json")) as f:
            return int(json.load(f).get("supervisor_pid") or 0)
    except (OSError, ValueError):
        return 0


def is_supervisor(pid, sid):
    """pid is the supervisor of sid (not a reused pid)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            if f.read().strip() != "dsec-supervise":
                return False
        return os.path.exists("/proc/%d/fd" % pid) and any(
            sid in os.readlink("/proc/%d/fd/%s" % (pid, fd))
            for fd in os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return False


def keep_logs(sid, why):
    """A sandbox's supervisor.log and events, kept for a failure no kill
    explains (under $BENCH_CACHE/failures/)."""
    d = os.path.join(os.path.dirname(WORK), "failures",
                     "%s-%d" % (sid, int(time.time())))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "why"), "w") as f:
        f.write(why + "\n")
    for name in ("supervisor.log", "events.jsonl", "state.json", "spec.json"):
        try:
            shutil.copy(os.path.join(ROOT, "sandboxes", sid, name), d)
        except OSError:
            pass


def cgroups(ids):
    found = []
    for top in ["/sys/fs/cgroup"] + ["/sys/fs/cgroup/" + d for d in
                                     os.listdir("/sys/fs/cgroup")]:
        d = os.path.join(top, "dsec")
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            if name in ids:
                found.append(os.path.join(d, name))
    return found


def mounts():
    with open("/proc/self/mountinfo") as f:
        return sorted(l.split()[4] for l in f if WORK in l.split()[4])


def loops():
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"],
                         capture_output=True, text=True).stdout
    return sorted(l for l in out.splitlines() if WORK in l)


def processes():
    want = ("DSEC_ROOT=" + ROOT).encode()
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % p, "rb") as f:
                if want in f.read().split(b"\0"):
                    with open("/proc/%s/comm" % p) as c:
                        found.append((int(p), c.read().strip()))
        except OSError:
            pass
    return found


def listing(d):
    try:
        return sorted(os.listdir(d))
    except OSError:
        return []


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = {}
        self.failures = []   # (op, error): no kill explains them
        self.killed = {}     # op -> failures a kill explains
        self.kills = {"command": 0, "supervisor": 0}
        self.created = set()

    def kill(self, what):
        with self.lock:
            self.kills[what] += 1

    def ok(self, op):
        with self.lock:
            self.requests[op] = self.requests.get(op, 0) + 1

    def fail(self, op, err, expected):
        with self.lock:
            self.requests[op] = self.requests.get(op, 0) + 1
            if expected:
                self.killed[op] = self.killed.get(op, 0) + 1
            else:
                self.failures.append((op, str(err)[:300]))


S = Stats()
DEADLINE = time.monotonic() + SECS
serves = [dsec.Serve("dsec-run") for _ in range(NSERVES)]


class Client:
    def __init__(self, n):
        self.n = n
        self.rnd = random.Random(n * 7919 + int(time.time()))
        self.serve = serves[n % NSERVES]
        self.sbs = {}     # id -> {"seq": next seq, "dead": supervisor killed,
                          #        "suspended": bool}
        self.tmp = os.path.join(WORK, "c%d" % n)
        os.mkdir(self.tmp)

    def call(self, op, sid=None, **kw):
        """The answer, or None after a failure (counted)."""
        if sid is not None:
            kw["id"] = sid
        try:
            r = self.serve.call(op, **kw)
            S.ok(op)
            return r
        except dsec.Error as e:
            dead = sid is not None and self.sbs.get(sid, {}).get("dead")
            S.fail(op, "%s %s: %s" % (op, sid, e), dead)
            if sid is not None and not dead:
                keep_logs(sid, "%s: %s" % (op, e))
            return None

    def create(self):
        r = self.call("create", spec=SPEC)
        if r:
            self.sbs[r["id"]] = {"seq": 0, "dead": False, "suspended": False}
            with S.lock:
                S.created.add(r["id"])

    def rm(self, sid):
        st = self.sbs.pop(sid)
        self.call("rm", sid, force=True) if st["dead"] else \
            self.call("rm", sid) or self.call("rm", sid, force=True)

    def pick(self):
        live = [s for s, st in self.sbs.items() if not st["suspended"]]
        return self.rnd.choice(live) if live else None

    def exec(self, sid, cmd, **kw):
        r = self.call("exec", sid, cmd=cmd, **kw)
        return r

    def round(self, witness):
        rnd = self.rnd
        if len(self.sbs) < 1 or (len(self.sbs) < 3 and rnd.random() < 0.1):
            self.create()
            return
        x = rnd.random()
        sid = self.pick()
        if sid is None:
            sid = rnd.choice(list(self.sbs))
            r = self.call("resume", sid)
            if r is not None:
                self.sbs[sid]["suspended"] = False
            else:
                self.rm(sid)  # counted; not tried again and again
            return
        st = self.sbs[sid]
        if x < 0.30:
            r = self.exec(sid, ["sh", "-c", "echo $((%d + 1))" % self.n])
            if r is not None and (r.get("exit_code") != 0 or
                                  r.get("stdout") != "%d\n" % (self.n + 1)):
                S.fail("exec", "exec %s: wrong result %r" % (sid, r),
                       st["dead"])
        elif x < 0.38:
            # with a seq, then the same again: replayed
            seq = st["seq"]
            r = self.exec(sid, ["sh", "-c", "echo $$"], seq=seq)
            if r is not None:
                st["seq"] += 1
                r2 = self.exec(sid, ["sh", "-c", "echo $$"], seq=seq)
                if r2 is not None and (not r2.get("replayed") or
                                       r2.get("stdout") != r.get("stdout")):
                    S.fail("exec", "replay %s: %r vs %r" % (sid, r2, r),
                           st["dead"])
        elif x < 0.44:
            # the command killed by a signal (its own kill -9)
            S.kill("command")
            r = self.exec(sid, ["sh", "-c", "kill -9 $$"])
            if r is not None and r.get("signal") != 9:
                S.fail("exec", "kill %s: %r" % (sid, r), st["dead"])
        elif x < 0.48:
            r = self.exec(sid, ["sleep", "5"], timeout_s=0.3)
            if r is not None and not r.get("timed_out"):
                S.fail("exec", "timeout %s: %r" % (sid, r), st["dead"])
        elif x < 0.56:
            # a session that a release ended says so once (documented):
            # its next command starts a new one
            try:
                r = self.serve.call("exec", id=sid,
                                    cmd=["cd /tmp && echo $PWD"],
                                    session="s%d" % self.n)
                S.ok("exec")
            except dsec.Error as e:
                r = None
                lost = st.get("released") and "was lost" in str(e)
                S.fail("exec", "session %s: %s" % (sid, e),
                       st["dead"] or lost)
            st["released"] = False
            if r is not None and r.get("stdout") != "/tmp\n":
                S.fail("exec", "session %s: %r" % (sid, r), st["dead"])
            if r is not None and rnd.random() < 0.3:
                self.call("session_rm", sid, name="s%d" % self.n)
        elif x < 0.64:
            back = os.path.join(self.tmp, "back.bin")
            if self.call("upload", sid, src=UPLOAD, dst="/tmp/u.bin"):
                if self.call("download", sid, src="/tmp/u.bin", dst=back):
                    with open(UPLOAD, "rb") as a, open(back, "rb") as b:
                        if a.read() != b.read():
                            S.fail("download", "cp %s: differs" % sid,
                                   st["dead"])
                    os.unlink(back)
        elif x < 0.69:
            self.call("checkpoint", sid)
        elif x < 0.73:
            # one answer per fork: through the SDK's fork
            try:
                kids = self.serve.sandbox(sid).fork(1)
                S.ok("fork")
            except dsec.Error as e:
                kids = getattr(e, "forked", None) or []
                S.fail("fork", "fork %s: %s" % (sid, e), st["dead"])
            for k in kids:
                self.sbs[k.id] = {"seq": 0, "dead": False,
                                  "suspended": False}
                with S.lock:
                    S.created.add(k.id)
        elif x < 0.78:
            release = rnd.random() < 0.5
            if self.call("suspend", sid, release=release):
                st["suspended"] = True
                st["released"] = st.get("released") or release
        elif x < 0.78 + KILL_PCT / 100.0:
            pid = supervisor(sid)
            if not is_supervisor(pid, sid):
                # never a reused pid: a supervisor gone by itself is a
                # failure
                S.fail("kill", "%s: supervisor %d is not running" % (sid, pid),
                       st["dead"])
            elif pid > 0:
                S.kill("supervisor")
                st["dead"] = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                # a request to it now fails, for the kill's sake
                self.exec(sid, ["true"])
                self.rm(sid)
        elif x < 0.92:
            r = self.exec(witness, ["cat", "/proc/self/status"])
            if r is not None and r.get("exit_code") != 0:
                S.fail("exec", "witness: %r" % r, False)
        else:
            self.rm(sid)

    def run(self, witness):
        while time.monotonic() < DEADLINE:
            try:
                self.round(witness)
            except dsec.ServeClosed as e:
                S.fail("serve", "serve closed: %s" % e, False)
                return
        for sid in list(self.sbs):
            if self.sbs[sid]["suspended"] and not self.sbs[sid]["dead"]:
                self.call("resume", sid)
            self.rm(sid)


witness = serves[0].create(spec=SPEC)
wid = witness.id
wpid = supervisor(wid)
for _ in range(20):
    witness.exec(["cat", "/proc/self/status"])
start = {
    "serve_fds": [count_fds(s.pid) for s in serves],
    "witness_fds": count_fds(wpid),
    "witness_rss_kb": rss_kb(wpid),
    "ids": listing(os.path.join(ROOT, "ids")),
    "sandboxes": listing(os.path.join(ROOT, "sandboxes")),
    "mounts": mounts(),
    "loops": loops(),
    "processes": sorted(c for _, c in processes()),
}
clients = [Client(i) for i in range(NCLIENTS)]
threads = [threading.Thread(target=c.run, args=(wid,)) for c in clients]
t0 = time.monotonic()
for t in threads:
    t.start()
last = t0
while any(t.is_alive() for t in threads):
    time.sleep(1)
    if time.monotonic() - last >= 60:
        last = time.monotonic()
        log("%d s: %d requests, %d failures" % (
            last - t0, sum(S.requests.values()), len(S.failures)))
for t in threads:
    t.join()
elapsed = time.monotonic() - t0
# layers no sandbox uses any more are unmounted by dsec-reap, as on a host
subprocess.run(["dsec-reap"], stdout=subprocess.DEVNULL)
time.sleep(2)
created = set(S.created)
end = {
    "serve_fds": [count_fds(s.pid) for s in serves],
    "witness_fds": count_fds(wpid),
    "witness_rss_kb": rss_kb(wpid),
    "ids": listing(os.path.join(ROOT, "ids")),
    "sandboxes": listing(os.path.join(ROOT, "sandboxes")),
    "mounts": mounts(),
    "loops": loops(),
    "processes": sorted(c for _, c in processes()),
}
leaks = {}
# counts that grew, and what is there now and was not at the start
for k in ("serve_fds", "witness_fds"):
    a, b = start[k], end[k]
    if any(y > x for x, y in zip(a, b)) if isinstance(a, list) else b > a:
        leaks[k] = {"start": a, "end": b}
for k in ("ids", "sandboxes", "mounts", "loops", "processes"):
    more = [x for x in end[k] if x not in start[k] or
            end[k].count(x) > start[k].count(x)]
    if more:
        leaks[k] = sorted(set(more))
left = cgroups(created)
if left:
    leaks["cgroups"] = left
gone = [s for s in created if os.path.exists(os.path.join(RUN, s))]
if gone:
    leaks["run_dirs"] = gone
out = {
    "type": "soak", "seconds": round(elapsed, 1), "clients": NCLIENTS,
    "serves": NSERVES, "requests": sum(S.requests.values()),
    "by_op": S.requests, "sandboxes": len(created), "kills": S.kills,
    # explained: by a kill, or a session a release ended (its next
    # command says so, as documented)
    "failures": len(S.failures), "explained_failures": S.killed,
    "leaks": len(leaks), "leaked": leaks,
    "witness_rss_kb": [start["witness_rss_kb"], end["witness_rss_kb"]],
    "first_failures": S.failures[:20],
}
print(json.dumps(out), flush=True)
witness.remove()
for s in serves:
    s.close()
sys.exit(1 if S.failures or leaks else 0)
PYEOF
