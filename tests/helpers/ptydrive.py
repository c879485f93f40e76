#!/usr/bin/env python3
"""Drives a program on a pseudo-terminal of its own, the way a person at a
terminal would, for tests/tty.bats.

  ptydrive.py [--size CxR] [--timeout S] [STEP]... -- CMD...

CMD runs as the leader of a new session whose controlling terminal is the
pty (COLS x ROWS, default 80x24); the steps run in order:

  --expect RE     wait until the output since the last match matches the
                  Python regex RE (bytes, DOTALL); fail after --timeout
  --send TEXT     type TEXT (backslash escapes: \\n, \\r, \\x04 ...)
  --resize CxR    set the window's size (the kernel sends SIGWINCH to the
                  terminal's foreground process group, CMD's)
  --modes         note whether the terminal is in raw mode now

then it waits (--timeout) for CMD to end, and prints one JSON object:
{"status": N (as a shell gives it: 128+N for signal N),
 "restored": the terminal's modes are those from before CMD ran,
 "raw": [one boolean per --modes step], "output": what CMD wrote (latin-1)}.
A step that times out prints what came so far to stderr, kills CMD (by
its pid) and exits 1.  Nothing is decided by timing: the timeouts are only
there so that a broken build fails instead of hanging.
"""

import codecs
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time


def winsize(fd, spec):
    cols, rows = (int(x) for x in spec.split("x"))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def is_raw(fd):
    lflag = termios.tcgetattr(fd)[3]
    return not (lflag & (termios.ICANON | termios.ECHO | termios.ISIG))


def main(argv):
    size, timeout, steps = "80x24", 60.0, []
    i = 0
    while i < len(argv) and argv[i] != "--":
        opt = argv[i]
        if opt in ("--size", "--timeout", "--expect", "--send", "--resize"):
            if i + 1 >= len(argv):
                sys.exit("ptydrive: %s takes an argument" % opt)
            arg = argv[i + 1]
            i += 2
            if opt == "--size":
                size = arg
            elif opt == "--timeout":
                timeout = float(arg)
            else:
                steps.append((opt, arg))
        elif opt == "--modes":
            steps.append((opt, None))
            i += 1
        else:
            sys.exit("ptydrive: unknown option %s" % opt)
    cmd = argv[i + 1:]
    if not cmd:
        sys.exit("usage: ptydrive.py [--size CxR] [STEP]... -- CMD...")

    master, slave = os.openpty()
    winsize(slave, size)
    before = termios.tcgetattr(slave)

    def child_setup():
        # a session of its own, the pty its controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=child_setup,
                            close_fds=True)
    os.set_blocking(master, False)
    out = bytearray()
    mark = 0
    raw = []

    def pump(wait):
        r, _, _ = select.select([master], [], [], wait)
        if r:
            try:
                data = os.read(master, 65536)
            except (BlockingIOError, OSError):
                return
            out.extend(data)

    def fail(why):
        sys.stderr.write("ptydrive: %s\noutput so far: %r\n" % (why, bytes(out)))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sys.exit(1)

    for op, arg in steps:
        if op == "--expect":
            rx = re.compile(arg.encode("latin-1"), re.DOTALL)
            deadline = time.monotonic() + timeout
            while True:
                m = rx.search(out, mark)
                if m:
                    mark = m.end()
                    break
                if time.monotonic() > deadline:
                    fail("no %r within %gs" % (arg, timeout))
                if proc.poll() is not None:
                    pump(0)
                    if not rx.search(out, mark):
                        fail("the command ended (%s) before %r" %
                             (proc.returncode, arg))
                    continue
                pump(0.2)
        elif op == "--send":
            data = codecs.decode(arg, "unicode_escape").encode("latin-1")
            while data:
                try:
                    n = os.write(master, data)
                except BlockingIOError:
                    pump(0.05)
                    continue
                data = data[n:]
        elif op == "--resize":
            winsize(slave, arg)
        else:
            raw.append(is_raw(slave))

    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            fail("the command did not end within %gs" % timeout)
        pump(0.2)
    status = proc.returncode
    if status < 0:
        status = 128 - status
    after = termios.tcgetattr(slave)
    # what it wrote last: the pty hands it over asynchronously, and its end
    # (EIO) comes once no one holds the terminal open
    os.close(slave)
    deadline = time.monotonic() + timeout
    while True:
        if time.monotonic() > deadline:
            fail("the terminal was held open after the command ended")
        if not select.select([master], [], [], 0.2)[0]:
            continue
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            continue
        except OSError:
            break
        if not data:
            break
        out.extend(data)
    print(json.dumps({"status": status, "restored": after == before,
                      "raw": raw, "output": bytes(out).decode("latin-1")}))


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main(sys.argv[1:])
