#!/usr/bin/env python3
"""Runs the SDK's unittest tests and prints TAP for automake's tap-driver
(tests/python.sh runs it in make check).

    python3 python/tests/tap.py [MODULE|MODULE.Class|MODULE.Class.test]...

A skipped test is "ok N - NAME # SKIP reason"; a failure's traceback goes
out as TAP comments.  A watchdog (DSEC_PY_TIMEOUT seconds, default 900)
ends a run that hangs: it prints every thread's stack, removes the
sandboxes of the run's stores, and exits 1.
"""

import faulthandler
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["test_unit", "test_fake", "test_serve", "test_threads",
           "test_aio", "test_closed"]


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.failed = False
        self.t0 = 0.0

    def _line(self, test, ok, directive=""):
        self.n += 1
        name = test.id().replace("__main__.", "")
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, name,
                                directive), flush=True)

    def _comment(self, text):
        for line in text.rstrip("\n").splitlines():
            print("# " + line, flush=True)

    def startTest(self, test):
        super().startTest(test)
        self.t0 = time.monotonic()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(test, True, " (%.1fs)" % (time.monotonic() - self.t0))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.failed = True
        self._line(test, False)
        self._comment(self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self.failed = True
        if isinstance(test, unittest.TestCase):
            self._line(test, False)
        else:  # a class or module fixture (setUpClass, tearDownClass...)
            self.n += 1
            print("not ok %d - %s" % (self.n, test), flush=True)
        self._comment(self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        reason = reason.replace("\n", " ")
        if isinstance(test, unittest.TestCase):
            self._line(test, True, " # SKIP " + reason)
        else:  # a whole class skipped in setUpClass
            self.n += 1
            print("ok %d - %s # SKIP %s" % (self.n, test, reason),
                  flush=True)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line(test, True, " # TODO expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.failed = True
        self._line(test, False, " # unexpected success")


def watchdog(seconds):
    def fire():
        print("# watchdog: the run took more than %ss; stacks follow"
              % seconds, flush=True)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        try:
            import support
            support.destroy_all()
        finally:
            print("Bail out! watchdog: the run hung", flush=True)
            os._exit(1)
    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def main():
    os.environ.setdefault("LC_ALL", "C")
    sys.dont_write_bytecode = True
    scratch = tempfile.mkdtemp(prefix="dsec-py.")
    os.chmod(scratch, 0o711)
    os.environ["DSEC_PY_SCRATCH"] = scratch
    sys.path.insert(0, HERE)
    watchdog(float(os.environ.get("DSEC_PY_TIMEOUT", "900")))
    names = sys.argv[1:] or MODULES
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    result = TapResult()
    try:
        suite.run(result)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("1..%d" % result.n, flush=True)
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
