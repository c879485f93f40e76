"""ServeClosed: a serve that is killed, that exits, that was closed; and
close() answering what is in flight first."""

import asyncio
import os
import signal
import threading
import unittest

import support

import dsec


class ClosedTest(unittest.TestCase):
    """No root: serve stand-ins that end."""

    def test_a_program_that_exits_at_once(self):
        s = dsec.Serve("/bin/false")
        with self.assertRaises(dsec.ServeClosed) as c:
            # written before or after it ended: the same error
            for _ in range(3):
                s.call("ps")
        self.assertIsInstance(c.exception, dsec.Error)
        self.assertEqual(s.close(), 1)
        self.assertEqual(c.exception.returncode, 1)

    def test_a_program_that_exits_at_once_aio(self):
        async def main():
            s = await dsec.aio.Serve("/bin/false").start()
            with self.assertRaises(dsec.ServeClosed) as c:
                for _ in range(3):
                    await s.call("ps")
            self.assertEqual(await s.close(), 1)
            self.assertEqual(c.exception.returncode, 1)
        asyncio.run(main())

    def test_calls_after_close(self):
        s = dsec.Serve(os.path.join(support.HERE, "fakeserve.py"))
        self.assertEqual(s.call("ps")["type"], "ps")
        self.assertEqual(s.close(), 0)
        with self.assertRaises(dsec.ServeClosed):
            s.call("ps")
        self.assertEqual(s.close(), 0)

    def test_a_program_that_does_not_exist(self):
        with self.assertRaises(FileNotFoundError):
            dsec.Serve("/nonexistent/dsec-run")


class ClosedServeTest(support.StoreTest):
    def test_serve_killed_with_requests_in_flight(self):
        s = self.serve()
        sb = s.create(image="busybox:1")
        pendings = [s.submit("exec", id=sb.id, cmd=["sleep", "60"])
                    for _ in range(3)]
        errors = []

        def waiter():
            try:
                sb.exec(["sleep", "60"])
            except dsec.ServeClosed as e:
                errors.append(e)
        t = threading.Thread(target=waiter)
        t.start()
        os.kill(s.pid, signal.SIGKILL)
        for p in pendings:
            with self.assertRaises(dsec.ServeClosed) as c:
                p.result()
            self.assertEqual(c.exception.returncode, -signal.SIGKILL)
        t.join()
        self.assertEqual(len(errors), 1)
        with self.assertRaises(dsec.ServeClosed):
            sb.exec(["true"])
        self.assertEqual(s.close(), -signal.SIGKILL)

    def test_close_answers_what_is_in_flight(self):
        s = self.store.serve()
        sb = s.create(image="busybox:1")
        p = s.submit("exec", id=sb.id, cmd=["sh", "-c", "sleep 1; echo done"])
        self.assertEqual(s.close(), 0)
        self.assertEqual(p.result()["stdout"], "done\n")
        # the sandbox lives on, for the next Serve
        with self.store.serve() as s2:
            self.assertEqual(s2.sandbox(sb.id).exec(["true"]).exit_code, 0)


if __name__ == "__main__":
    unittest.main()
