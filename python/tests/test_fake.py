"""The SDK's side of serve's protocol, against a scripted serve
(fakeserve.py): dispatch by rid from many threads, out-of-order answers,
several requests per write, multi-record answers (stream, fork), the
contract's newer ops' requests and answers, error records without a rid,
and a serve that dies.  No root, no sandboxes: what dsec-run itself does
is tested in test_serve.py and the others."""

import asyncio
import os
import random
import tempfile
import threading
import unittest

import support  # noqa: F401

import dsec

FAKE = os.path.join(support.HERE, "fakeserve.py")


class FakeTest(unittest.TestCase):
    def setUp(self):
        fd, self.log = tempfile.mkstemp(prefix="fake-log.",
                                        dir=support.SCRATCH)
        os.close(fd)
        self.addCleanup(os.unlink, self.log)
        self.s = dsec.Serve(FAKE, env={"FAKE_LOG": self.log})
        self.addCleanup(self.s.close)
        self.sb = self.s.sandbox("sb-fake")

    def test_answers_go_to_their_request_whatever_their_order(self):
        slow = self.s.submit("exec", id="x", cmd=["echo", "slow"], delay=0.5)
        fast = self.s.submit("exec", id="x", cmd=["echo", "fast"])
        self.assertEqual(fast.result()["stdout"], "fast")
        self.assertFalse(slow.done())
        self.assertEqual(slow.result()["stdout"], "slow")

    def test_many_threads_each_get_their_own_answers(self):
        bad = []

        def worker(t):
            rnd = random.Random(t)
            for i in range(20):
                token = "%d-%d" % (t, i)
                r = self.sb.exec(["echo", token],
                                 delay=rnd.choice((0, 0, 0.001, 0.005)))
                if r.stdout != token:
                    bad.append((token, r.stdout))
        threads = [threading.Thread(target=worker, args=(t,))
                   for t in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(bad, [])
        self.assertEqual(self.s._calls, {})

    def test_submit_many_is_one_write(self):
        ps = self.s.submit_many([{"op": "exec", "id": "x",
                                  "cmd": ["echo", str(i)]}
                                 for i in range(8)])
        self.assertEqual([p.result()["stdout"] for p in ps],
                         [str(i) for i in range(8)])
        with open(self.log) as f:
            reads = [int(n) for n in f.read().split()]
        self.assertIn(8, reads)

    def test_result_timeout_leaves_the_request_in_flight(self):
        p = self.s.submit("exec", id="x", cmd=["echo", "late"], delay=0.5)
        with self.assertRaises(TimeoutError):
            p.result(timeout=0.01)
        self.assertEqual(p.result()["stdout"], "late")

    def test_non_zero_exit_is_a_result_error_records_raise(self):
        self.assertEqual(self.sb.exec(["exit", "3"]).exit_code, 3)
        for code, cls in ((1, dsec.Failure), (2, dsec.UsageError),
                          (3, dsec.BadInput), (4, dsec.SequenceConflict),
                          (125, dsec.DsecFailure)):
            with self.assertRaises(cls) as c:
                self.sb.exec(["error", str(code)])
            self.assertEqual(c.exception.record["exit_code"], code)
            self.assertEqual(c.exception.exit_code, code)

    def test_unknown_op_is_unsupported(self):
        with self.assertRaises(dsec.Unsupported):
            self.s.call("frobnicate")

    def test_an_error_without_rid_finds_its_request_by_line(self):
        ok = self.s.submit("exec", id="x", cmd=["echo", "a"], delay=0.2)
        with self.assertRaises(dsec.BadInput) as c:
            self.s.call("exec", id="x", cmd=["true"], badline=True)
        self.assertEqual(c.exception.record["line"], 2)
        self.assertEqual(ok.result()["stdout"], "a")

    def test_lines_that_are_not_answers_are_ignored(self):
        self.assertEqual(self.sb.exec(["garbage"]).exit_code, 0)
        self.assertEqual(self.sb.exec(["echo", "after"]).stdout, "after")

    def test_stream_yields_output_then_the_result(self):
        recs = list(self.sb.stream(["make"]))
        self.assertEqual([type(r).__name__ for r in recs],
                         ["Output", "Output", "Output", "Result"])
        self.assertEqual([(r.fd, r.data) for r in recs[:3]],
                         [(1, "out\n"), (2, "err\n"), (1, "more\n")])
        self.assertEqual(recs[3].stdout, "out\nmore\n")

    def test_session_requests_and_results(self):
        sh = self.sb.session("main")
        r = sh.run("cd /tmp")
        self.assertEqual((r.stdout, r.session, r.session_lost),
                         ("cd /tmp\n", "main", False))
        self.assertTrue(sh.run("lose").session_lost)
        self.assertEqual([x.name for x in self.sb.sessions()], ["main", "b"])
        rec = sh.remove()
        self.assertEqual((rec["type"], rec["name"]),
                         ("session_removed", "main"))
        with self.assertRaises(TypeError):
            sh.run(["ls"])

    def test_copies_send_absolute_host_paths(self):
        rec = self.sb.upload("repo/", "/src/repo")
        self.assertEqual((rec["type"], rec["direction"], rec["src"],
                          rec["dst"]),
                         ("copied", "in", os.path.abspath("repo") + "/",
                          "/src/repo"))
        rec = self.sb.download("/src/patch.diff", "out.diff", archive=True)
        self.assertEqual((rec["direction"], rec["src"], rec["dst"]),
                         ("out", "/src/patch.diff",
                          os.path.abspath("out.diff")))

    def test_fork(self):
        kids = self.sb.fork(3)
        self.assertEqual([k.id for k in kids],
                         ["sb-kid0", "sb-kid1", "sb-kid2"])
        self.assertEqual(kids[1].record["parent"], "sb-fake")

    def test_fork_partial_failure(self):
        p = self.s._send([({"op": "fork", "id": "sb-fake", "count": 3,
                            "fail": [1]}, dsec.protocol.FORK, 3)])[0]
        while not p.done():
            p._next()
        kids, errors = dsec.protocol.forked(p.records)
        self.assertEqual([k["id"] for k in kids], ["sb-kid0", "sb-kid2"])
        self.assertEqual(errors[0]["index"], 1)
        # the summary error that follows goes nowhere
        self.assertEqual(self.sb.exec(["echo", "next"]).stdout, "next")

    def test_fork_raises_with_what_was_made(self):
        with self.assertRaises(dsec.Failure) as c:
            self._fork_failing()
        self.assertEqual(str(c.exception),
                         "1 of 2 forks failed: cannot mount the overlay")
        self.assertEqual([k.id for k in c.exception.forked], ["sb-kid0"])

    def _fork_failing(self):
        # Sandbox.fork with the scripted failure: the request's extra field
        orig = self.s._send

        def send(reqs):
            return orig([(dict(f, fail=[1]), k, n) for f, k, n in reqs])
        self.s._send = send
        try:
            return self.sb.fork(2)
        finally:
            self.s._send = orig

    def test_verbs_send_their_options(self):
        self.assertEqual(self.sb.kill("TERM")["req"]["signal"], "TERM")
        self.assertNotIn("signal", self.sb.kill()["req"])
        self.assertEqual(self.sb.remove(force=True)["req"]["force"], True)
        self.assertEqual(self.sb.suspend(release=True)["req"]["release"],
                         True)
        self.assertEqual(self.sb.checkpoint("ck@1")["req"]["name"], "ck@1")
        self.assertNotIn("name", self.sb.checkpoint()["req"])

    def test_create_and_sandboxes(self):
        sb = self.s.create(image="i", memory_mb=5)
        self.assertEqual(sb.id, "sb-fake")
        self.assertEqual(sb.record["spec"], {"image": "i",
                                             "resources": {"memory_mb": 5}})
        self.assertEqual([x.id for x in self.s.sandboxes()], ["sb-a", "sb-b"])
        self.assertEqual([x.id for x in self.s.sandboxes(
            labels={"job": "2"})], ["sb-b"])

    def test_a_serve_that_dies_closes_every_request(self):
        waiting = [self.s.submit("exec", id="x", cmd=["true"], delay=5)
                   for _ in range(3)]
        with self.assertRaises(dsec.ServeClosed):
            self.s.call("crash")
        for p in waiting:
            with self.assertRaises(dsec.ServeClosed) as c:
                p.result()
            self.assertEqual(c.exception.returncode, 3)
        with self.assertRaises(dsec.ServeClosed):
            self.sb.exec(["true"])
        self.assertEqual(self.s.close(), 3)


class AioFakeTest(unittest.TestCase):
    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    def test_out_of_order_and_many_tasks(self):
        async def main():
            async with dsec.aio.Serve(FAKE) as s:
                sb = s.sandbox("x")
                slow = await s.submit("exec", id="x", cmd=["echo", "slow"],
                                      delay=0.3)
                fast = await s.submit("exec", id="x", cmd=["echo", "fast"])
                self.assertEqual((await fast.result())["stdout"], "fast")
                self.assertFalse(slow.done())
                rs = await asyncio.gather(*[
                    sb.exec(["echo", str(i)], delay=random.random() / 100)
                    for i in range(500)])
                self.assertEqual([r.stdout for r in rs],
                                 [str(i) for i in range(500)])
                self.assertEqual((await slow.result())["stdout"], "slow")
                self.assertEqual(s._calls, {})
        self.run_async(main())

    def test_stream_session_copy_fork(self):
        async def main():
            async with dsec.aio.Serve(FAKE) as s:
                sb = s.sandbox("sb-fake")
                recs = [r async for r in sb.stream("make")]
                self.assertEqual([getattr(r, "fd", None) for r in recs],
                                 [1, 2, 1, None])
                self.assertEqual(recs[-1].stderr, "err\n")
                r = await sb.session("s").run("pwd")
                self.assertEqual(r.session, "s")
                self.assertEqual((await sb.upload("a", "/b"))["src"],
                                 os.path.abspath("a"))
                self.assertEqual([k.id for k in await sb.fork(2)],
                                 ["sb-kid0", "sb-kid1"])
                with self.assertRaises(dsec.SequenceConflict):
                    await sb.exec(["error", "4"])
                with self.assertRaises(dsec.Unsupported):
                    await s.call("nope")
        self.run_async(main())

    def test_a_serve_that_dies(self):
        async def main():
            s = await dsec.aio.Serve(FAKE).start()
            waiting = await s.submit("exec", id="x", cmd=["true"], delay=5)
            with self.assertRaises(dsec.ServeClosed):
                await s.call("crash")
            with self.assertRaises(dsec.ServeClosed) as c:
                await waiting.result()
            self.assertEqual(c.exception.returncode, 3)
            with self.assertRaises(dsec.ServeClosed):
                await s.sandbox("x").exec("true")
            self.assertEqual(await s.close(), 3)
        self.run_async(main())


if __name__ == "__main__":
    unittest.main()
