#!/usr/bin/env python3
"""Drives one `dsec-run serve` the way a trainer does: its stdin kept open,
several requests in one write, four threads writing to it at once.

  serve-threads.py [DSEC-RUN]     (default: dsec-run from PATH)

Needs busybox:1 in the store of $DSEC_ROOT.  Checks, in order:
  - eight create requests in one write are all answered;
  - two inspect requests in one write are both answered;
  - four threads, each writing three requests at a time (a session exec, a
    plain exec, a sessions op; then a streamed session exec) to two
    sandboxes of its own, get every answer, right, under its rid; each
    sends a session's next command after the answer to its last;
  - eight rm requests in one write are all answered;
  - closing stdin ends serve with status 0, nothing left unanswered and no
    record without a known rid.
Prints what failed on stderr and exits 1; exits 0 when all held.  Waits
are bounded (a hung serve fails, it does not hang the test).
"""
import json
import os
import subprocess
import sys
import threading

WAIT_S = 180


class Failed(Exception):
    pass


class Serve:
    def __init__(self, prog):
        self.p = subprocess.Popen([prog, "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self.wlock = threading.Lock()
        self.cond = threading.Condition()
        self.answers = {}      # rid -> [record...]
        self.bad = []          # lines that are not JSON objects with a rid
        self.eof = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                rec = None
            with self.cond:
                if not isinstance(rec, dict) or not isinstance(rec.get("rid"), str):
                    self.bad.append(line)
                else:
                    self.answers.setdefault(rec["rid"], []).append(rec)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def send(self, reqs):
        """All of reqs in one write."""
        data = "".join(json.dumps(r) + "\n" for r in reqs).encode()
        with self.wlock:
            n = os.write(self.p.stdin.fileno(), data)
        if n != len(data):
            raise Failed("short write to serve: %d of %d" % (n, len(data)))

    def answer(self, rid):
        """The records of rid, once its last (not an output record) came."""
        def done():
            recs = self.answers.get(rid, [])
            return recs and recs[-1].get("type") != "output"
        with self.cond:
            if not self.cond.wait_for(lambda: done() or self.eof, WAIT_S):
                raise Failed("no answer to %s in %d s" % (rid, WAIT_S))
            if not done():
                raise Failed("serve ended before answering %s" % rid)
            return list(self.answers[rid])

    def ask(self, reqs):
        self.send(reqs)
        return [self.answer(r["rid"]) for r in reqs]

    def close(self):
        self.p.stdin.close()
        try:
            rc = self.p.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise Failed("serve did not end after its stdin closed")
        self.reader.join(WAIT_S)
        return rc


def check(ok, what, recs):
    if not ok:
        raise Failed("%s: %s" % (what, json.dumps(recs)))


def one(recs, rid):
    check(len(recs) == 1, "%s: one record" % rid, recs)
    return recs[0]


def worker(s, k, ids, errors):
    try:
        sid, pid = ids[k], ids[k + 4]
        pre = "w%d" % k
        res = s.ask([
            {"op": "exec", "rid": pre + "-cd", "id": sid, "session": "s",
             "cmd": ["cd /tmp; V=w%d" % k]},
            {"op": "exec", "rid": pre + "-plain", "id": pid,
             "cmd": ["sh", "-c", "echo plain%d" % k]},
            {"op": "inspect", "rid": pre + "-inspect", "id": pid},
        ])
        r = one(res[0], pre + "-cd")
        check(r.get("type") == "result" and r.get("exit_code") == 0
              and r.get("session") == "s", pre + "-cd", r)
        r = one(res[1], pre + "-plain")
        check(r.get("stdout") == "plain%d\n" % k, pre + "-plain", r)
        r = one(res[2], pre + "-inspect")
        check(r.get("id") == pid, pre + "-inspect", r)
        for n in range(4):
            rid = "%s-%d" % (pre, n)
            res = s.ask([
                {"op": "exec", "rid": rid + "-s", "id": sid, "session": "s",
                 "cmd": ["echo $V-%d; pwd" % n]},
                {"op": "exec", "rid": rid + "-p", "id": pid,
                 "cmd": ["sh", "-c", "echo %d-%d >&2; exit %d" % (k, n, n)]},
                {"op": "sessions", "rid": rid + "-ls", "id": sid},
            ])
            r = one(res[0], rid + "-s")
            check(r.get("stdout") == "w%d-%d\n/tmp\n" % (k, n)
                  and r.get("session") == "s", rid + "-s", r)
            r = one(res[1], rid + "-p")
            check(r.get("stderr") == "%d-%d\n" % (k, n)
                  and r.get("exit_code") == n, rid + "-p", r)
            r = one(res[2], rid + "-ls")
            names = [x.get("name") for x in r.get("sessions", [])]
            check(r.get("type") == "sessions" and names == ["s"], rid + "-ls", r)
        rid = pre + "-stream"
        recs = s.ask([{"op": "exec", "rid": rid, "id": sid, "session": "s",
                       "stream": True, "cmd": ["echo $V; echo e >&2"]}])[0]
        outs = [x for x in recs[:-1] if x.get("type") == "output"]
        check(len(outs) == len(recs) - 1 and outs, rid + ": output records", recs)
        check("".join(x["data"] for x in outs if x.get("fd") == 1) == "w%d\n" % k
              and "".join(x["data"] for x in outs if x.get("fd") == 2) == "e\n",
              rid + ": streamed output", recs)
        check(recs[-1].get("type") == "result" and recs[-1].get("stdout") == "w%d\n" % k,
              rid + ": result", recs)
    except Exception as e:  # reported by the main thread
        errors.append("worker %d: %s" % (k, e))


def main():
    prog = sys.argv[1] if len(sys.argv) > 1 else "dsec-run"
    s = Serve(prog)
    try:
        # eight creates in one write
        res = s.ask([{"op": "create", "rid": "c%d" % i,
                      "spec": {"image": "busybox:1", "name": "t%d" % i}}
                     for i in range(8)])
        ids = []
        for i, recs in enumerate(res):
            r = one(recs, "c%d" % i)
            check(r.get("type") == "sandbox" and r.get("state") == "running",
                  "create c%d" % i, r)
            ids.append(r["id"])
        check(len(set(ids)) == 8, "eight sandboxes", ids)
        # two inspects in one write
        res = s.ask([{"op": "inspect", "rid": "i%d" % i, "id": "t%d" % i}
                     for i in range(2)])
        for i, recs in enumerate(res):
            r = one(recs, "i%d" % i)
            check(r.get("id") == ids[i], "inspect i%d" % i, r)
        # four threads
        errors = []
        threads = [threading.Thread(target=worker, args=(s, k, ids, errors))
                   for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S * 8)
            if t.is_alive():
                raise Failed("a worker thread did not finish")
        if errors:
            raise Failed("; ".join(errors))
        # eight rm in one write
        res = s.ask([{"op": "rm", "rid": "r%d" % i, "id": ids[i], "force": True}
                     for i in range(8)])
        for i, recs in enumerate(res):
            r = one(recs, "r%d" % i)
            check(r.get("type") == "removed", "rm r%d" % i, r)
        rc = s.close()
        check(rc == 0, "serve's exit status", rc)
        check(not s.bad, "records without a rid or not JSON", s.bad)
    except Failed as e:
        print("serve-threads: %s" % e, file=sys.stderr)
        if s.p.poll() is None:
            s.p.stdin.close()
            s.p.kill()
            s.p.wait()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
