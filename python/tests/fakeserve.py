#!/usr/bin/env python3
"""A scripted stand-in for `dsec-run serve`, for the SDK's protocol tests
that need no root: it speaks serve's JSON Lines, including the ops of the
contract a dsec-run may not have yet (exec with "session" or "stream",
upload, download, sessions, session_rm), answering from a script instead
of sandboxes.  It is a test of the SDK's side of the protocol only.

    fakeserve.py serve        (as the SDK runs it: PROGRAM serve)

Each request is answered on a thread of its own, after "delay" seconds if
the request has one, so answers come out of order.  With FAKE_LOG=FILE,
it appends one line per read(2) of its stdin: how many request lines that
read completed.

exec: {"cmd": ["echo", X]} -> a result with stdout X; {"cmd": ["exit", N]}
-> exit_code N; {"cmd": ["error", N]} -> an error record with exit_code N;
{"cmd": ["garbage"]} -> a line that is not JSON, then the result;
"session" -> the result carries it (the line "lose" sets session_lost);
"stream" -> output records (fd 1, then fd 2), then the result.
fork: {"count": N, "fail": [I...]} -> a sandbox or error record per index,
then, if any failed, the summary error without index (as dsec-run does).
crash: the process exits at once, answering nothing.
"badline": true -> answered as serve answers a line that is not a request
(an error record with "line" and no rid).
"""

import base64
import json
import os
import threading
import time

out_lock = threading.Lock()


def emit(rec, rid):
    if rid is not None:
        rec = dict(rec, rid=rid)
    data = (json.dumps(rec) + "\n").encode()
    with out_lock:
        os.write(1, data)


def result(req, **kw):
    rec = {"type": "result", "id": req.get("id"), "seq": req.get("seq"),
           "exit_code": 0, "signal": None, "stdout": "", "stderr": "",
           "stdout_bytes": 0, "stderr_bytes": 0, "truncated": False,
           "timed_out": False, "oom_killed": False, "duration_ms": 0.1,
           "replayed": False}
    rec.update(kw)
    return rec


def answer(req, lineno):
    rid = req.get("rid")
    op = req.get("op")
    time.sleep(req.get("delay", 0))
    if req.get("badline"):
        # as serve answers a line that is not a request: no rid, its line
        emit({"type": "error", "error": "request: must be an object",
              "line": lineno, "exit_code": 3}, None)
    elif op == "exec":
        cmd = req.get("cmd") or [""]
        if "session" in req:
            emit(result(req, stdout=cmd[0] + "\n", session=req["session"],
                        session_lost=cmd[0] == "lose"), rid)
        elif req.get("stream"):
            for fd, text in ((1, "out\n"), (2, "err\n"), (1, "more\n")):
                emit({"type": "output", "fd": fd,
                      "stream": "stdout" if fd == 1 else "stderr",
                      "data": text,
                      "data_b64": base64.b64encode(text.encode()).decode()},
                     rid)
                time.sleep(0.01)
            emit(result(req, stdout="out\nmore\n", stderr="err\n"), rid)
        elif cmd[0] == "echo":
            emit(result(req, stdout=" ".join(cmd[1:])), rid)
        elif cmd[0] == "exit":
            emit(result(req, exit_code=int(cmd[1])), rid)
        elif cmd[0] == "error":
            emit({"type": "error", "error": "scripted",
                  "exit_code": int(cmd[1])}, rid)
        elif cmd[0] == "garbage":
            with out_lock:
                os.write(1, b"this is not json\n[1,2]\n")
            emit(result(req), rid)
        else:
            emit(result(req), rid)
    elif op == "create":
        emit({"type": "sandbox", "id": "sb-fake", "state": "running",
              "spec": req.get("spec")}, rid)
    elif op == "fork":
        fail = req.get("fail", [])
        for i in range(req.get("count", 1)):
            if i in fail:
                emit({"type": "error", "index": i, "parent": req["id"],
                      "error": "cannot mount the overlay", "exit_code": 1},
                     rid)
            else:
                emit({"type": "sandbox", "id": "sb-kid%d" % i, "index": i,
                      "parent": req["id"]}, rid)
        if fail:
            emit({"type": "error", "error": "%d of %d forks failed" % (
                len(fail), req.get("count", 1)), "exit_code": 1}, rid)
    elif op in ("upload", "download"):
        emit({"type": "copied", "direction": "in" if op == "upload"
              else "out", "bytes": 5, "files": 1, "digest": "sha256:00",
              "src": req.get("src"), "dst": req.get("dst")}, rid)
    elif op == "sessions":
        emit({"type": "sessions", "sessions": [{"name": "main"},
                                               {"name": "b"}]}, rid)
    elif op == "session_rm":
        emit({"type": "session_removed", "name": req.get("name")}, rid)
    elif op == "ps":
        emit({"type": "ps", "sandboxes": [
            {"type": "sandbox", "id": "sb-a", "labels": {"job": "1"}},
            {"type": "sandbox", "id": "sb-b", "labels": {"job": "2"}}]}, rid)
    elif op == "crash":
        os._exit(3)
    elif op in ("inspect", "rm", "kill", "checkpoint", "suspend", "resume"):
        emit({"type": {"rm": "removed", "inspect": "sandbox"}.get(op, op),
              "id": req.get("id"), "req": req}, rid)
    else:
        emit({"type": "error", "error": "unknown op `%s`" % op,
              "exit_code": 3}, rid)


def main():
    log = os.environ.get("FAKE_LOG")
    buf = b""
    lineno = 0
    threads = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        buf += chunk
        lines = buf.split(b"\n")
        buf = lines.pop()
        if log:
            with open(log, "a") as f:
                f.write("%d\n" % len(lines))
        for line in lines:
            lineno += 1
            try:
                req = json.loads(line)
            except ValueError as e:
                emit({"type": "error", "error": str(e), "line": lineno,
                      "exit_code": 3}, None)
                continue
            t = threading.Thread(target=answer, args=(req, lineno))
            t.start()
            threads.append(t)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
