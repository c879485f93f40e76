#!/usr/bin/env python3
"""A client of a sandbox's exec socket for a command on a terminal, for
tests/tty.bats: the EXEC PROTOCOL's "Terminals" from the wire.

  ttyproto.py [--timeout S] [--pipeline] SOCKET REQUEST [STEP]...

REQUEST (a JSON object) is sent as the connection's first line; with
--pipeline, the lines of the steps before the first --expect go in the
same write (the supervisor reads them with the request, before the
command's terminal exists).  The steps run in order:

  --expect RE     wait until the terminal's output so far (the data of the
                  output records, latin-1) matches the Python regex RE past
                  the last match; fail after --timeout
  --input TEXT    {"op":"input","data_b64":...} with TEXT (backslash
                  escapes: \\n, \\x03 ...)
  --eof           {"op":"input","eof":true}
  --resize CxR    {"op":"resize","cols":C,"rows":R}
  --signal N      {"op":"signal","signal":N}
  --close         close the connection and stop (no result is read)

then every record until the result (included) is read.  Each record
received is printed as it came, one per line, so `jq -s` sees them in
order.  A step that times out, or a connection that ends before the
result, is an exit 1 with the records so far on stderr.  The timeouts are
only there so that a broken build fails instead of hanging.
"""

import base64
import codecs
import json
import re
import select
import socket
import sys
import time


def main(argv):
    timeout, pipeline = 60.0, False
    while argv[:1] in (["--timeout"], ["--pipeline"]):
        if argv[0] == "--pipeline":
            pipeline = True
            argv = argv[1:]
        else:
            timeout = float(argv[1])
            argv = argv[2:]
    if len(argv) < 2:
        sys.exit("usage: ttyproto.py [--timeout S] [--pipeline] SOCKET "
                 "REQUEST [STEP]...")
    path, request, argv = argv[0], json.loads(argv[1]), argv[2:]
    steps, i = [], 0
    while i < len(argv):
        if argv[i] in ("--expect", "--input", "--resize", "--signal"):
            if i + 1 >= len(argv):
                sys.exit("ttyproto: %s takes an argument" % argv[i])
            steps.append((argv[i], argv[i + 1]))
            i += 2
        elif argv[i] in ("--eof", "--close"):
            steps.append((argv[i], None))
            i += 1
        else:
            sys.exit("ttyproto: unknown step %s" % argv[i])

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    buf = bytearray()
    shown = bytearray()
    records = []
    pending = bytearray()
    mark = 0

    def send(obj):
        pending.extend((json.dumps(obj) + "\n").encode())
        if not pipeline:
            flush()

    def flush():
        s.sendall(pending)
        pending.clear()

    def fail(why):
        sys.stderr.write("ttyproto: %s\nrecords so far:\n" % why)
        for r in records:
            sys.stderr.write(json.dumps(r) + "\n")
        sys.stderr.write("terminal so far: %r\n" % bytes(shown))
        sys.exit(1)

    send(request)

    def receive(deadline):
        """Reads what came (waiting until deadline): False at the end."""
        wait = max(0.0, deadline - time.monotonic())
        if not select.select([s], [], [], min(wait, 0.2))[0]:
            return True
        data = s.recv(65536)
        if not data:
            return False
        buf.extend(data)
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            rec = json.loads(line)
            records.append(rec)
            print(json.dumps(rec), flush=True)
            if rec.get("type") == "output":
                shown.extend(base64.b64decode(rec.get("data_b64", "")))
        return True

    def result_seen():
        return any(r.get("type") in ("result", "error") for r in records)

    for op, arg in steps:
        if op == "--expect":
            flush()
            rx = re.compile(arg.encode("latin-1"), re.DOTALL)
            deadline = time.monotonic() + timeout
            while True:
                m = rx.search(shown, mark)
                if m:
                    mark = m.end()
                    break
                if time.monotonic() > deadline:
                    fail("no %r within %gs" % (arg, timeout))
                if result_seen():
                    fail("the result came before %r" % arg)
                if not receive(deadline):
                    fail("the connection ended before %r" % arg)
        elif op == "--input":
            data = codecs.decode(arg, "unicode_escape").encode("latin-1")
            send({"op": "input",
                  "data_b64": base64.b64encode(data).decode()})
        elif op == "--eof":
            send({"op": "input", "eof": True})
        elif op == "--resize":
            cols, rows = (int(x) for x in arg.split("x"))
            send({"op": "resize", "cols": cols, "rows": rows})
        elif op == "--signal":
            send({"op": "signal", "signal": int(arg)})
        elif op == "--close":
            flush()
            s.close()
            return

    flush()
    deadline = time.monotonic() + timeout
    while not result_seen():
        if time.monotonic() > deadline:
            fail("no result within %gs" % timeout)
        if not receive(deadline):
            fail("the connection ended before the result")
    s.close()


if __name__ == "__main__":
    main(sys.argv[1:])
