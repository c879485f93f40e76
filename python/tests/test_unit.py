"""The SDK's pieces that need no dsec-run: specs, requests, errors,
results and output records."""

import base64
import os
import shutil
import subprocess
import tempfile
import unittest

import support  # noqa: F401  (puts the package on sys.path)

import dsec
from dsec import protocol as P


class SpecTest(unittest.TestCase):
    def test_keywords_map_to_the_spec(self):
        spec = P.spec_of(image="busybox:1", backend="fncall", memory_mb=256,
                         cpus=0.5, pids=64, disk_mb=100,
                         resource_class="besteffort", env={"A": "1"},
                         workdir="/work", user="1000:1000", layers=["l@1"],
                         protect=["/grader"], hide=["/sol"],
                         labels={"job": "j"}, ttl_s=60, network="none")
        self.assertEqual(spec, {
            "image": "busybox:1", "backend": "fncall",
            "resources": {"memory_mb": 256, "cpus": 0.5, "pids": 64,
                          "disk_mb": 100, "class": "besteffort"},
            "env": {"A": "1"}, "workdir": "/work", "user": "1000:1000",
            "layers": ["l@1"], "protect": ["/grader"], "hide": ["/sol"],
            "labels": {"job": "j"}, "ttl_s": 60,
            "network": {"mode": "none"}})

    def test_a_whole_spec_with_keywords_over_it(self):
        whole = {"image": "a", "resources": {"pids": 10, "cpus": 1}}
        spec = P.spec_of(whole, memory_mb=64, image="b")
        self.assertEqual(spec, {"image": "b", "resources": {
            "pids": 10, "cpus": 1, "memory_mb": 64}})
        # the caller's spec is not changed
        self.assertEqual(whole, {"image": "a",
                                 "resources": {"pids": 10, "cpus": 1}})

    def test_none_is_left_out_and_unknown_keywords_pass_through(self):
        spec = P.spec_of(image="a", workdir=None, future_field={"x": 1})
        self.assertEqual(spec, {"image": "a", "future_field": {"x": 1}})

    def test_mount_strings(self):
        spec = P.spec_of(mounts=["/data:/task:ro", "rel:/x",
                                 {"source": "/s", "target": "/t"}])
        self.assertEqual(spec["mounts"], [
            {"source": "/data", "target": "/task", "ro": True},
            {"source": os.path.abspath("rel"), "target": "/x", "ro": False},
            {"source": "/s", "target": "/t"}])
        with self.assertRaises(dsec.BadInput):
            P.spec_of(mounts=["nocolon"])


class RequestTest(unittest.TestCase):
    def test_exec_fields(self):
        f = P.exec_fields("sb-1", ["ls"], seq=3, timeout=10, stdin=b"in",
                          env={"K": "V"}, workdir="/w", max_output=100,
                          exclusive=True, extra={"tty": False})
        self.assertEqual(f, {"id": "sb-1", "cmd": ["ls"], "seq": 3,
                             "timeout_s": 10, "stdin": "in",
                             "env": {"K": "V"}, "workdir": "/w",
                             "max_output_bytes": 100, "exclusive": True,
                             "tty": False})
        self.assertEqual(P.exec_fields("x", ["true"]),
                         {"id": "x", "cmd": ["true"]})

    def test_seq_zero_is_sent(self):
        self.assertEqual(P.exec_fields("x", ["true"], seq=0)["seq"], 0)

    def test_command(self):
        self.assertEqual(P.command("echo $HOME"), ["sh", "-c", "echo $HOME"])
        self.assertEqual(P.command(("a", "b")), ["a", "b"])

    def test_stdin_bytes_must_be_utf8(self):
        with self.assertRaises(dsec.BadInput):
            P.exec_fields("x", ["cat"], stdin=b"\xff")

    def test_encode_is_one_compact_utf8_line(self):
        line = P.encode({"op": "exec", "cmd": ["echo", "é\n"], "rid": 1})
        self.assertEqual(line, '{"op":"exec","cmd":["echo","é\\n"],"rid":1}\n'
                         .encode("utf-8"))
        self.assertEqual(line.count(b"\n"), 1)

    def test_encode_refuses_what_is_not_json(self):
        for bad in ({"x": float("nan")}, {"x": "\udcff"}, {"x": object()}):
            with self.assertRaises(dsec.BadInput):
                P.encode(bad)

    def test_host_paths_are_absolute_with_their_slash(self):
        self.assertEqual(P.host_path("repo/"), os.path.abspath("repo") + "/")
        self.assertEqual(P.host_path("/a/b"), "/a/b")
        self.assertEqual(P.host_path(b"rel"), os.path.abspath("rel"))


class ErrorTest(unittest.TestCase):
    def test_each_exit_status_has_its_class(self):
        for code, cls in ((1, dsec.Failure), (2, dsec.UsageError),
                          (3, dsec.BadInput), (4, dsec.SequenceConflict),
                          (125, dsec.DsecFailure), (7, dsec.Failure),
                          (None, dsec.Failure)):
            rec = {"type": "error", "error": "why", "exit_code": code}
            e = dsec.errors.error_from(rec)
            self.assertIs(type(e), cls, code)
            self.assertIsInstance(e, dsec.Error)
            self.assertIs(e.record, rec)
            self.assertEqual(str(e), "why")
            if code is not None:
                self.assertEqual(e.exit_code, code)

    def test_unknown_op_is_unsupported_and_bad_input(self):
        e = dsec.errors.error_from({"type": "error", "exit_code": 3,
                                    "error": "unknown op `upload`"})
        self.assertIsInstance(e, dsec.Unsupported)
        self.assertIsInstance(e, dsec.BadInput)

    def test_check_raises_error_records_only(self):
        ok = {"type": "removed", "id": "x"}
        self.assertIs(P.check(ok), ok)
        with self.assertRaises(dsec.SequenceConflict):
            P.check({"type": "error", "error": "seq", "exit_code": 4})

    def test_serve_closed(self):
        e = dsec.ServeClosed("gone", -9)
        self.assertEqual(e.returncode, -9)
        self.assertEqual(e.record["type"], "error")


class ResultTest(unittest.TestCase):
    REC = {"type": "result", "id": "sb-1", "seq": 2, "exit_code": 3,
           "signal": None, "stdout": "o", "stderr": "e", "stdout_bytes": 1,
           "stderr_bytes": 1, "truncated": False, "timed_out": False,
           "oom_killed": False, "duration_ms": 1.5, "replayed": True}

    def test_fields(self):
        r = P.result(dict(self.REC))
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.seq, r.replayed,
                          r.timed_out, r.truncated, r.id, r.duration_ms),
                         (3, "o", "e", 2, True, False, False, "sb-1", 1.5))
        self.assertFalse(r.ok)
        self.assertFalse(r.session_lost)
        self.assertEqual(r["stdout"], "o")
        self.assertEqual(r.raw, self.REC)

    def test_non_zero_exit_is_not_an_error(self):
        self.assertEqual(P.result(dict(self.REC, exit_code=127)).exit_code,
                         127)

    def test_a_result_where_dsec_failed_raises(self):
        with self.assertRaises(dsec.DsecFailure) as c:
            P.result(dict(self.REC, exit_code=125,
                          error="cannot record the result"))
        self.assertEqual(c.exception.record["seq"], 2)

    def test_a_session_exec_answered_as_plain_is_unsupported(self):
        with self.assertRaises(dsec.Unsupported):
            P.result(dict(self.REC), session="main")
        r = P.result(dict(self.REC, session="main", session_lost=True),
                     session="main")
        self.assertTrue(r.session_lost)
        self.assertEqual(r.session, "main")

    def test_output_records(self):
        o = P.Output({"type": "output", "fd": 2, "stream": "stderr",
                      "data": "hé", "data_b64": base64.b64encode(
                          "hé".encode()).decode()})
        self.assertEqual((o.fd, o.stream, o.data, o.bytes),
                         (2, "stderr", "hé", "hé".encode()))
        # bytes that are not UTF-8: data_b64 has them, data is replaced
        o = P.Output({"type": "output", "stream": "stdout",
                      "data_b64": base64.b64encode(b"\xffa").decode()})
        self.assertEqual((o.fd, o.bytes, o.data), (1, b"\xffa", "\ufffda"))

    def test_stream_of_a_serve_that_does_not_stream(self):
        old = {"type": "output", "stream": "stdout", "data_b64": "YQo="}
        with self.assertRaises(dsec.Unsupported):
            P.stream_record(old, first=True)


class ForkTest(unittest.TestCase):
    def test_partial_failure(self):
        recs = [{"type": "sandbox", "id": "b", "index": 1},
                {"type": "error", "index": 0, "error": "no", "exit_code": 1},
                {"type": "sandbox", "id": "c", "index": 2}]
        kids, errors = P.forked(recs)
        self.assertEqual([k["id"] for k in kids], ["b", "c"])
        e = P.fork_error(errors, kids)
        self.assertIsInstance(e, dsec.Failure)
        self.assertEqual(str(e), "1 of 3 forks failed: no")
        self.assertEqual(len(e.forked), 2)

    def test_whole_failure(self):
        with self.assertRaises(dsec.BadInput):
            P.forked([{"type": "error", "error": "no sandbox", "exit_code": 3}])

    def test_when_a_fork_is_answered(self):
        c = P.Call(1, P.FORK, 2)
        self.assertFalse(c.final({"type": "sandbox", "index": 0}))
        self.assertTrue(c.final({"type": "error", "index": 1}))
        c = P.Call(1, P.FORK, 5)
        self.assertTrue(c.final({"type": "error", "exit_code": 3}))
        c = P.Call(1, P.STREAM)
        self.assertFalse(c.final({"type": "output"}))
        self.assertTrue(c.final({"type": "result"}))


class EventsErrorTest(unittest.TestCase):
    def test_json_log_record(self):
        e = P.events_error(3, b'{"level":"error","msg":"no sandbox `x`",'
                              b'"prog":"dsec-run"}\n')
        self.assertIsInstance(e, dsec.BadInput)
        self.assertEqual(str(e), "no sandbox `x`")

    def test_text(self):
        e = P.events_error(1, b"dsec-run: broken\n")
        self.assertIsInstance(e, dsec.Failure)
        self.assertEqual(str(e), "dsec-run: broken")


DEBIAN_PYTHON = "/usr/bin/python3"


@unittest.skipUnless(os.access(DEBIAN_PYTHON, os.X_OK),
                     "needs Debian's python3 (/usr/bin/python3)")
class InstallTest(unittest.TestCase):
    def test_pip_install_works_offline(self):
        """`pip install ./python` with Debian's python3 and pip, in a
        virtual environment, without the package index: setup.py and
        setup.cfg, built with the setuptools that is there."""
        tmp = tempfile.mkdtemp(dir=support.SCRATCH)
        self.addCleanup(shutil.rmtree, tmp)
        src = os.path.join(tmp, "python")
        # a copy: pip builds in the tree (build/, dsec.egg-info/)
        shutil.copytree(os.path.join(support.SRCDIR, "python"), src,
                        ignore=shutil.ignore_patterns("__pycache__",
                                                      "build", "*.egg-info"))
        env = os.path.join(tmp, "env")
        p = subprocess.run([DEBIAN_PYTHON, "-m", "venv", env],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            self.skipTest("no venv for Debian's python3 (python3-venv): "
                          + p.stdout.decode(errors="replace")[-200:])
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("PIP_", "PYTHON"))}
        clean["PIP_CONFIG_FILE"] = os.devnull
        p = subprocess.run([os.path.join(env, "bin", "pip"), "install",
                            "--no-index", "--disable-pip-version-check",
                            src], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=clean, cwd=tmp)
        self.assertEqual(p.returncode, 0, p.stdout.decode(errors="replace"))
        p = subprocess.run([os.path.join(env, "bin", "python"), "-c",
                            "import dsec, dsec.aio; print(dsec.__version__);"
                            "print(dsec.__file__)"],
                           stdout=subprocess.PIPE, env=clean, cwd=tmp,
                           check=True)
        version, where = p.stdout.decode().split()
        self.assertEqual(version, dsec.__version__)
        self.assertTrue(where.startswith(env + "/"), where)


if __name__ == "__main__":
    unittest.main()
