"""Many threads on one Serve against the real `dsec-run serve` (root), and
serve driven with its standard input kept open and several requests per
write."""

import json
import os
import select
import subprocess
import threading
import time

import support


def run_threads(target, n):
    """Runs target(i) in n threads; returns the exceptions they raised."""
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # reported by the test
            errors.append((i, repr(e)))
    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


class ThreadsTest(support.StoreTest):
    def test_many_threads_on_one_serve(self):
        s = self.serve()
        boxes = [s.create(image="busybox:1") for _ in range(4)]

        def worker(t):
            sb = boxes[t % len(boxes)]
            for i in range(10):
                token = "t%d-%d" % (t, i)
                r = sb.exec(["echo", token])
                assert (r.exit_code, r.stdout, r.id) == (
                    0, token + "\n", sb.id), (token, r.raw)
        self.assertEqual(run_threads(worker, 32), [])
        self.assertEqual(s._calls, {})

    def test_concurrent_creates_and_removes(self):
        s = self.serve()
        ids = []

        def worker(t):
            sb = s.create(image="busybox:1", labels={"t": str(t)})
            ids.append(sb.id)
            assert sb.exec(["echo", str(t)]).stdout == "%d\n" % t
            assert sb.remove()["type"] == "removed"
        self.assertEqual(run_threads(worker, 16), [])
        self.assertEqual(len(set(ids)), 16)
        self.assertEqual(s.sandboxes(), [])

    def test_each_thread_its_trajectory_replayed_from_threads(self):
        s = self.serve()
        boxes = [s.create(image="busybox:1") for _ in range(8)]
        step = ["sh", "-c", "echo x >> /runs; wc -l < /runs"]
        first = {}

        def live(t):
            first[t] = [boxes[t].exec(step, seq=q).stdout
                        for q in range(1, 6)]

        def replay(t):
            for q in range(1, 6):
                r = boxes[t].exec(step, seq=q)
                assert r.replayed and r.stdout == first[t][q - 1], r.raw
        self.assertEqual(run_threads(live, 8), [])
        self.assertEqual(first[0], ["1\n", "2\n", "3\n", "4\n", "5\n"])
        self.assertEqual(run_threads(replay, 8), [])
        for sb in boxes:
            self.assertEqual(sb.exec(["wc", "-l", "/runs"]).stdout,
                             "5 /runs\n")

    def test_several_requests_per_write_from_threads_stdin_open(self):
        s = self.serve()
        boxes = [s.create(image="busybox:1") for _ in range(2)]

        def worker(t):
            sb = boxes[t % 2]
            batch = [{"op": "exec", "id": sb.id,
                      "cmd": ["echo", "%d-%d" % (t, i)]} for i in range(8)]
            for _ in range(2):
                pendings = s.submit_many(batch)
                got = [p.result(timeout=120)["stdout"] for p in pendings]
                assert got == ["%d-%d\n" % (t, i) for i in range(8)], got
        # serve's standard input stays open throughout: every request
        # must be answered while it is
        self.assertEqual(run_threads(worker, 8), [])
        self.assertIsNone(s.returncode)

    def test_raw_serve_answers_lines_written_together(self):
        """serve itself, without the SDK: two requests in one write(2),
        standard input kept open, both answered."""
        sb = self.serve().create(image="busybox:1")
        p = subprocess.Popen([self.store.program, "serve"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=self.store.environ())
        self.addCleanup(p.wait)
        self.addCleanup(p.stdin.close)
        os.write(p.stdin.fileno(),
                 b'{"op":"exec","rid":1,"id":"%s","cmd":["echo","a"]}\n'
                 b'{"op":"exec","rid":2,"id":"%s","cmd":["echo","b"]}\n'
                 % (sb.id.encode(), sb.id.encode()))
        answers, buf = {}, b""
        # a bound on a hang, not a measure: both answers take milliseconds
        deadline = time.monotonic() + 60
        while len(answers) < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([p.stdout], [], [], 1)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    rec = json.loads(line)
                    answers[rec["rid"]] = rec["stdout"]
        self.assertEqual(answers, {1: "a\n", 2: "b\n"})


if __name__ == "__main__":
    import unittest
    unittest.main()
