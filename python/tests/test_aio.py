"""The asyncio twin against the real `dsec-run serve` (root): many tasks
on one Serve, the verbs as coroutines, errors, stream as an async
iterator, and a serve that is killed."""

import asyncio
import os
import signal

import support

import dsec


class AioTest(support.StoreTest):
    def run_async(self, coro):
        # a bound on a hang, not a measure
        return asyncio.run(asyncio.wait_for(coro, 300))

    def test_many_tasks_on_one_serve(self):
        async def main():
            async with self.store.aio_serve() as s:
                boxes = await asyncio.gather(*[
                    s.create(image="busybox:1", labels={"i": str(i)})
                    for i in range(8)])
                self.assertEqual(len({b.id for b in boxes}), 8)

                async def worker(t):
                    sb = boxes[t % 8]
                    for i in range(5):
                        token = "%d-%d" % (t, i)
                        r = await sb.exec(["echo", token], seq=None)
                        assert r.stdout == token + "\n", r.raw
                await asyncio.gather(*[worker(t) for t in range(64)])
                self.assertEqual(s._calls, {})
                await asyncio.gather(*[b.remove() for b in boxes])
                self.assertEqual(await s.sandboxes(), [])
        self.run_async(main())

    def test_verbs_and_errors(self):
        async def main():
            async with self.store.aio_serve() as s:
                async with await s.create(image="busybox:1",
                                          workdir="/work") as sb:
                    r = await sb.exec("echo hi > f; cat f; exit 2", seq=1)
                    self.assertEqual((r.exit_code, r.stdout), (2, "hi\n"))
                    again = await sb.exec("echo hi > f; cat f; exit 2",
                                          seq=1)
                    self.assertTrue(again.replayed)
                    with self.assertRaises(dsec.SequenceConflict):
                        await sb.exec(["true"], seq=1)
                    with self.assertRaises(dsec.BadInput):
                        await s.sandbox("nope").inspect()
                    with self.assertRaises(dsec.UsageError):
                        await sb.kill("NOSUCHSIGNAL")
                    self.assertEqual((await sb.inspect())["id"], sb.id)
                    ck = await sb.checkpoint()
                    self.assertEqual(ck["type"], "checkpoint")
                    kids = await sb.fork(2)
                    outs = await asyncio.gather(*[
                        k.exec(["cat", "/work/f"]) for k in kids])
                    self.assertEqual([o.stdout for o in outs],
                                     ["hi\n", "hi\n"])
                    await asyncio.gather(*[k.remove() for k in kids])
                    await sb.suspend()
                    await sb.resume()
                    events = await sb.events()
                    self.assertIn("exec", [e["type"] for e in events])
                # the async context manager removed it
                self.assertEqual(await s.sandboxes(all=True), [])
        self.run_async(main())

    def test_stream(self):
        async def main():
            async with self.store.aio_serve() as s:
                sb = await s.create(image="busybox:1")
                with self.newer_op("exec stream"):
                    recs = [r async for r in sb.stream(
                        ["sh", "-c", "echo a; echo b >&2"])]
                self.assertEqual(
                    [(r.fd, r.data) for r in recs[:-1]
                     if isinstance(r, dsec.Output)],
                    [(1, "a\n"), (2, "b\n")])
                self.assertEqual(recs[-1].stdout, "a\n")
        self.run_async(main())

    def test_session(self):
        async def main():
            async with self.store.aio_serve() as s:
                sb = await s.create(image="busybox:1")
                sh = sb.session("main")
                with self.newer_op("exec session"):
                    await sh.run("cd /tmp; X=5")
                self.assertEqual((await sh.run("echo $PWD $X")).stdout,
                                 "/tmp 5\n")
        self.run_async(main())

    def test_large_answers_among_small_ones(self):
        async def main():
            async with self.store.aio_serve() as s:
                sb = await s.create(image="busybox:1")
                big = "head -c 3000000 /dev/zero | tr '\\0' b"
                rs = await asyncio.gather(*[
                    sb.exec(big if i % 4 == 0 else ["echo", str(i)],
                            max_output=4 << 20) for i in range(16)])
                for i, r in enumerate(rs):
                    if i % 4 == 0:
                        self.assertEqual(r.stdout, "b" * 3000000)
                    else:
                        self.assertEqual(r.stdout, "%d\n" % i)
        self.run_async(main())

    def test_serve_killed(self):
        async def main():
            s = await self.store.aio_serve().start()
            sb = await s.create(image="busybox:1")
            pending = await s.submit("exec", id=sb.id, cmd=["sleep", "60"])
            os.kill(s.pid, signal.SIGKILL)
            with self.assertRaises(dsec.ServeClosed) as c:
                await pending.result()
            self.assertEqual(c.exception.returncode, -signal.SIGKILL)
            with self.assertRaises(dsec.ServeClosed):
                await sb.exec(["true"])
            self.assertEqual(await s.close(), -signal.SIGKILL)
        self.run_async(main())


if __name__ == "__main__":
    import unittest
    unittest.main()
