#!/usr/bin/env python3
"""bench/sdk.py: what the Python SDK (python/dsec) costs over speaking
`dsec-run serve`'s JSON Lines by hand, for the same exec loop, in one run.

    sudo bench/sdk.py                  # ~1 minute
    sudo BENCH_N=2000 bench/sdk.py

One busybox sandbox (BENCH_BACKEND, default container) in a private
DSEC_ROOT under BENCH_DIR; every call is {"cmd": ["true"]}.

Sequential (one call at a time, BENCH_N calls per client, in blocks of
BENCH_BLOCK that alternate between the clients, so that the machine's
drift hits them alike):
  raw       a line written to serve's stdin, a line read back, json.loads:
            the least any client does
  sdk       dsec.Serve: sb.exec(["true"]) (writer lock, reader thread,
            dispatch by rid, Result)
  aio       dsec.aio.Serve: await sb.exec(["true"])
Concurrent (BENCH_CONC calls in flight, BENCH_N calls in all; calls/s):
  raw       a window of BENCH_CONC requests, one sent per answer read
  sdk       BENCH_CONC threads, each in an exec loop
  aio       BENCH_CONC tasks, each in an exec loop

Prints one table: p50, p99 (nearest rank) and mean per call in ms, calls/s,
and each client's ratio to raw (p50, p99; for concurrent runs, raw's
calls/s over the client's).  The goal is <= 1.1x.  Needs root, the dsec
binaries (the tree's, or DSEC_BIN=DIR) and busybox-static.  Cleans up on
any exit: the sandbox is removed (rm --force), BENCH_DIR deleted.
"""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(TOP, "python"))
import dsec  # noqa: E402
import dsec.aio  # noqa: E402

N = int(os.environ.get("BENCH_N", "1000"))
BLOCK = int(os.environ.get("BENCH_BLOCK", "50"))
CONC = int(os.environ.get("BENCH_CONC", "16"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
N_OWN = int(os.environ.get("BENCH_OWN", "20000"))
BACKEND = os.environ.get("BENCH_BACKEND", "container")
BIN = os.environ.get("DSEC_BIN", TOP)
BENCH_DIR = os.environ.get("BENCH_DIR", "/var/tmp/dsec-bench-sdk")
CMD = ["true"]


def log(msg):
    print("sdk.py: " + msg, file=sys.stderr, flush=True)


def pct(samples, p):
    s = sorted(samples)
    return s[max(0, -(-len(s) * p // 100) - 1)]


class Raw:
    """serve by hand: the floor."""

    def __init__(self, program, sid):
        self.p = subprocess.Popen([program, "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self.sid = sid
        self.rid = 0

    def line(self):
        self.rid += 1
        return (json.dumps({"op": "exec", "rid": self.rid, "id": self.sid,
                            "cmd": CMD}) + "\n").encode()

    def call(self):
        self.p.stdin.write(self.line())
        self.p.stdin.flush()
        rec = json.loads(self.p.stdout.readline())
        assert rec["exit_code"] == 0, rec

    def window(self, n, width):
        """n calls, width in flight."""
        sent = got = 0
        while sent < min(width, n):
            self.p.stdin.write(self.line())
            sent += 1
        self.p.stdin.flush()
        while got < n:
            rec = json.loads(self.p.stdout.readline())
            assert rec["exit_code"] == 0, rec
            got += 1
            if sent < n:
                self.p.stdin.write(self.line())
                self.p.stdin.flush()
                sent += 1

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def timed(fn, n, out):
    for _ in range(n):
        t = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t) / 1e6)


# A stand-in for serve that answers every request at once: what is left is
# the client's own cost (and the pipes').
INSTANT = """import json, sys
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    rid = json.loads(line)["rid"]
    out.write(b'{"type":"result","exit_code":0,"stdout":"","stderr":"",'
              b'"replayed":false,"rid":%d}\\n' % rid)
    out.flush()
"""


def client_cost(work, loop):
    """Microseconds per call of each client against the instant serve."""
    prog = os.path.join(work, "instant-serve")
    with open(prog, "w") as f:
        f.write("#!%s\n%s" % (sys.executable, INSTANT))
    os.chmod(prog, 0o755)
    log("client's own cost: %d calls against an instant serve" % N_OWN)
    out = {}
    raw = Raw(prog, "x")
    t = time.perf_counter()
    for _ in range(N_OWN):
        raw.call()
    out["raw"] = (time.perf_counter() - t) / N_OWN * 1e6
    raw.close()
    with dsec.Serve(prog) as s:
        sb = s.sandbox("x")
        t = time.perf_counter()
        for _ in range(N_OWN):
            sb.exec(CMD)
        out["sdk"] = (time.perf_counter() - t) / N_OWN * 1e6

    async def aio():
        async with dsec.aio.Serve(prog) as s:
            sb = s.sandbox("x")
            t = time.perf_counter()
            for _ in range(N_OWN):
                await sb.exec(CMD)
            return (time.perf_counter() - t) / N_OWN * 1e6
    out["aio"] = loop.run_until_complete(aio())
    return out


def main():
    if os.geteuid() != 0:
        sys.exit("sdk.py: needs root (dsec-run create); run: sudo %s"
                 % sys.argv[0])
    for b in ("dsec-run", "dsec-pull"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            sys.exit("sdk.py: %s/%s not found: build dsec first (or set "
                     "DSEC_BIN)" % (BIN, b))
    os.makedirs(BENCH_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="run.", dir=BENCH_DIR)
    os.chmod(work, 0o711)
    # the binaries copied: a rebuild during the run cannot mix two builds
    bindir = os.path.join(work, "bin")
    os.mkdir(bindir)
    for b in ("dsec-run", "dsec-pull", "dsec-layer", "dsec-vm",
              "dsec-agent"):
        if os.path.exists(os.path.join(BIN, b)):
            shutil.copy2(os.path.join(BIN, b), bindir)
    program = os.path.join(bindir, "dsec-run")
    os.environ.update(DSEC_ROOT=os.path.join(work, "root"),
                      DSEC_RUN=os.path.join(work, "run"),
                      PATH=bindir + os.pathsep + os.environ["PATH"])
    os.environ.pop("DSEC_STORE", None)
    os.mkdir(os.environ["DSEC_RUN"], 0o711)
    clients = []
    sid = None
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        tar = os.path.join(work, "busybox.tar.gz")
        subprocess.run([os.path.join(TOP, "examples", "mkrootfs-busybox.sh"),
                        tar], check=True)
        subprocess.run([os.path.join(bindir, "dsec-pull"), "--name",
                        "busybox:bench", "tar:" + tar], check=True,
                       stdout=subprocess.DEVNULL)
        sdk = dsec.Serve(program)
        clients.append(sdk)
        sb = sdk.create(image="busybox:bench", backend=BACKEND)
        sid = sb.id
        raw = Raw(program, sid)
        clients.append(raw)
        loop = asyncio.new_event_loop()
        aserve = loop.run_until_complete(dsec.aio.Serve(program).start())
        asb = aserve.sandbox(sid)

        def aio_call():
            loop.run_until_complete(asb.exec(CMD))

        def sdk_call():
            assert sb.exec(CMD).exit_code == 0

        seq = {"raw": [], "sdk": [], "aio": []}
        calls = {"raw": raw.call, "sdk": sdk_call, "aio": aio_call}
        for name, fn in calls.items():  # warm up
            timed(fn, 20, [])
        log("sequential: %d calls per client, blocks of %d" % (N, BLOCK))
        done = 0
        while done < N:
            k = min(BLOCK, N - done)
            for name, fn in calls.items():
                timed(fn, k, seq[name])
            done += k

        log("concurrent: %d calls, %d in flight, in %d rounds"
            % (N, CONC, ROUNDS))
        busy = {"raw": 0.0, "sdk": 0.0, "aio": 0.0}

        def sdk_worker(n):
            for _ in range(n):
                sdk_call()

        async def aio_worker(n):
            for _ in range(n):
                await asb.exec(CMD)

        async def aio_all(n):
            await asyncio.gather(*[aio_worker(n // CONC + (i < n % CONC))
                                   for i in range(CONC)])
        for r in range(ROUNDS):
            n = N // ROUNDS + (r < N % ROUNDS)
            t = time.perf_counter()
            raw.window(n, CONC)
            busy["raw"] += time.perf_counter() - t
            threads = [threading.Thread(target=sdk_worker,
                                        args=(n // CONC + (i < n % CONC),))
                       for i in range(CONC)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            busy["sdk"] += time.perf_counter() - t
            t = time.perf_counter()
            loop.run_until_complete(aio_all(n))
            busy["aio"] += time.perf_counter() - t
        rate = {k: N / v for k, v in busy.items()}
        own = client_cost(work, loop)
        loop.run_until_complete(aserve.close())
        loop.close()

        print("dsec SDK overhead: %d cores, kernel %s, python %s, backend %s"
              % (os.cpu_count(), os.uname().release,
                 sys.version.split()[0], BACKEND))
        print("%-34s %8s %8s %8s %9s %14s" % ("case", "p50 ms", "p99 ms",
                                             "mean ms", "calls/s",
                                             "vs raw p50/p99"))
        r50, r99 = pct(seq["raw"], 50), pct(seq["raw"], 99)
        for name, title in (("raw", "raw serve JSON Lines, sequential"),
                            ("sdk", "dsec.Serve, sequential"),
                            ("aio", "dsec.aio.Serve, sequential")):
            s = seq[name]
            p50, p99, mean = pct(s, 50), pct(s, 99), sum(s) / len(s)
            print("%-34s %8.3f %8.3f %8.3f %9.0f %6.3fx/%.3fx" % (
                title, p50, p99, mean, 1000 / mean, p50 / r50, p99 / r99))
        for name, title in (("raw", "raw, %d in flight" % CONC),
                            ("sdk", "dsec.Serve, %d threads" % CONC),
                            ("aio", "dsec.aio.Serve, %d tasks" % CONC)):
            print("%-34s %8s %8s %8s %9.0f %14s" % (
                title, "", "", "", rate[name],
                "%.3fx" % (rate["raw"] / rate[name])))
        for name, title in (("raw", "raw, against an instant serve"),
                            ("sdk", "dsec.Serve, instant serve"),
                            ("aio", "dsec.aio.Serve, instant serve")):
            print("%-34s %8s %8s %8.3f %9.0f %14s" % (
                title, "", "", own[name] / 1000, 1e6 / own[name],
                "+%.0f us" % (own[name] - own["raw"])))
        print("goal: sequential p50 <= 1.1x raw; sdk %.3fx, aio %.3fx" % (
            pct(seq["sdk"], 50) / r50, pct(seq["aio"], 50) / r50))
    finally:
        for c in clients:
            try:
                c.close()
            except Exception:
                pass
        if sid:
            subprocess.run([program, "rm", "--force", sid],
                           stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        try:
            os.rmdir(BENCH_DIR)
        except OSError:
            pass


if __name__ == "__main__":
    main()
