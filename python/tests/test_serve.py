"""The threaded client against the real `dsec-run serve` (root): every
verb, the result's fields, replay by seq, the error classes, and the
contract's newer ops (sessions, streams, copies), which skip with the
reason while dsec-run does not have them."""

import os
import shutil
import tempfile
import threading
import time
import unittest

import support

import dsec


class ServeTest(support.StoreTest):
    def setUp(self):
        super().setUp()
        self.s = self.serve()

    def create(self, **kw):
        kw.setdefault("image", "busybox:1")
        return self.s.create(**kw)

    def test_create_exec_and_the_result(self):
        sb = self.create(memory_mb=256, pids=64, env={"A": "1"},
                         workdir="/work", labels={"job": "py"})
        self.assertTrue(sb.id.startswith("sb-"))
        self.assertEqual(sb.record["state"], "running")
        spec = sb.inspect()["spec"]
        self.assertEqual((spec["resources"]["memory_mb"],
                          spec["resources"]["pids"], spec["env"],
                          spec["workdir"], spec["labels"]),
                         (256, 64, {"A": "1"}, "/work", {"job": "py"}))
        r = sb.exec(["sh", "-c", "echo $A; pwd; echo err >&2; exit 3"],
                    seq=1, timeout=10)
        # the command's own failure is a result, not an error
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.seq,
                          r.replayed, r.timed_out, r.truncated, r.signal,
                          r.id, r.ok),
                         (3, "1\n/work\n", "err\n", 1, False, False, False,
                          None, sb.id, False))
        self.assertEqual(r.raw["type"], "result")
        self.assertEqual(r.raw["stdout_bytes"], 8)

    def test_exec_options(self):
        sb = self.create()
        self.assertEqual(sb.exec(["cat"], stdin="in put").stdout, "in put")
        self.assertEqual(sb.exec(["cat"], stdin="é".encode()).stdout, "é")
        self.assertEqual(sb.exec("echo $K; pwd", env={"K": "v"},
                                 workdir="/tmp").stdout, "v\n/tmp\n")
        r = sb.exec(["sleep", "10"], timeout=0.2)
        self.assertEqual((r.exit_code, r.timed_out, r.signal), (124, True, 9))
        r = sb.exec(["sh", "-c", "printf %0100d 0"], max_output=10)
        self.assertEqual((r.stdout, r.stdout_bytes, r.truncated),
                         ("0" * 10, 100, True))
        self.assertEqual(sb.exec(["no-such-command"]).exit_code, 127)

    def test_a_large_answer(self):
        sb = self.create()
        r = sb.exec("head -c 5000000 /dev/zero | tr '\\0' a",
                    max_output=8 << 20)
        self.assertEqual((len(r.stdout), r.stdout_bytes, r.truncated),
                         (5000000, 5000000, False))
        self.assertEqual(set(r.stdout), {"a"})

    def test_replay_and_sequence_conflicts(self):
        sb = self.create()
        count = ["sh", "-c", "n=$(cat /count 2>/dev/null || echo 0); "
                 "echo $((n+1)) | tee /count"]
        first = sb.exec(count, seq=1)
        again = sb.exec(count, seq=1)
        self.assertEqual((first.stdout, first.replayed), ("1\n", False))
        self.assertEqual((again.stdout, again.replayed), ("1\n", True))
        self.assertEqual(sb.exec(["cat", "/count"], seq=2).stdout, "1\n")
        with self.assertRaises(dsec.SequenceConflict) as c:
            sb.exec(["true"], seq=1)
        self.assertEqual((c.exception.exit_code, c.exception.record["seq"]),
                         (4, 1))
        with self.assertRaises(dsec.SequenceConflict):
            sb.exec(["true"], seq=9)
        # nothing ran: the counter is still 1
        self.assertEqual(sb.exec(["cat", "/count"]).stdout, "1\n")

    def test_errors_by_exit_status(self):
        sb = self.create()
        with self.assertRaises(dsec.BadInput) as c:
            self.s.sandbox("no-such-sandbox").exec(["true"])
        self.assertEqual(c.exception.record["type"], "error")
        with self.assertRaises(dsec.BadInput) as c:
            self.create(bogus=1)
        self.assertIn("bogus", str(c.exception))
        with self.assertRaises(dsec.UsageError) as c:
            sb.kill("NOSUCHSIGNAL")
        self.assertEqual(c.exception.exit_code, 2)
        with self.assertRaises(dsec.Failure) as c:
            sb.resume()  # it is running
        self.assertEqual(c.exception.exit_code, 1)
        self.assertEqual(sb.suspend(release=True)["type"], "suspended")
        with self.assertRaises(dsec.DsecFailure) as c:
            sb.exec(["true"])
        self.assertEqual(c.exception.exit_code, 125)
        self.assertEqual(sb.resume()["type"], "resumed")
        self.assertEqual(sb.exec(["true"]).exit_code, 0)
        # every one of them is a dsec.Error that keeps its record
        self.assertTrue(issubclass(dsec.DsecFailure, dsec.Error))

    def test_ps_checkpoint_fork_suspend_resume_remove(self):
        sb = self.create(labels={"job": "a"})
        other = self.create(labels={"job": "b"})
        self.assertEqual([x.id for x in self.s.sandboxes(
            labels={"job": "a"})], [sb.id])
        self.assertEqual({x.id for x in self.s.sandboxes()},
                         {sb.id, other.id})
        sb.exec("echo state > /work/f")
        ck = sb.checkpoint()
        self.assertEqual(ck["type"], "checkpoint")
        self.assertTrue(ck["layer"]["digest"].startswith("sha256:"))
        kids = sb.fork(2)
        self.assertEqual(len(kids), 2)
        for k in kids:
            self.assertEqual(k.record["parent"], sb.id)
            self.assertEqual(k.exec(["cat", "/work/f"]).stdout, "state\n")
        self.assertEqual(sb.suspend()["type"], "suspended")
        self.assertEqual(sb.resume()["type"], "resumed")
        self.assertEqual(sb.exec(["cat", "/work/f"]).stdout, "state\n")
        for x in kids + [other]:
            self.assertEqual(x.remove()["type"], "removed")
        self.assertEqual(sb.remove(force=True)["type"], "removed")
        self.assertEqual(self.s.sandboxes(), [])

    def test_kill_ends_a_running_exec(self):
        sb = self.create()
        out = {}
        t = threading.Thread(target=lambda: out.update(
            r=sb.exec(["sleep", "60"])))
        t.start()
        deadline = time.monotonic() + 30
        while sb.inspect().get("execs_running", 0) < 1:
            self.assertLess(time.monotonic(), deadline, "sleep never ran")
            time.sleep(0.05)
        self.assertEqual(sb.kill()["type"], "killed")
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertEqual((out["r"].exit_code, out["r"].signal), (137, 9))

    def test_events(self):
        sb = self.create()
        sb.exec(["echo", "audited"], seq=1)
        events = sb.events()
        self.assertEqual(events[0]["type"], "created")
        self.assertIn(["echo", "audited"], [e.get("argv") for e in events
                                            if e["type"] == "exec"])
        with self.assertRaises(dsec.BadInput):
            self.s.sandbox("no-such-sandbox").events()

    def test_a_sandbox_as_context_manager_is_removed(self):
        with self.create() as sb:
            self.assertEqual(sb.exec(["true"]).exit_code, 0)
        self.assertEqual(self.s.sandboxes(all=True), [])

    def test_fncall_backend(self):
        sb = self.create(backend="fncall")
        self.assertEqual(sb.record["backend"], "fncall")
        sb.exec("echo x > /tmp/f")
        # each call gets a clean /tmp
        self.assertEqual(sb.exec("cat /tmp/f 2>/dev/null; echo $?").stdout,
                         "1\n")

    # ---- the contract's newer ops

    def test_session_keeps_the_shell_state(self):
        sb = self.create()
        sh = sb.session("main")
        with self.newer_op("exec session"):
            r = sh.run("cd /tmp")
        self.assertEqual((r.exit_code, r.session, r.session_lost),
                         (0, "main", False))
        sh.run("export GREETING=hi; f() { echo f:$1; }; X=1")
        r = sh.run("pwd; echo $GREETING $X; f arg")
        self.assertEqual(r.stdout, "/tmp\nhi 1\nf:arg\n")
        self.assertEqual(sh.run("false").exit_code, 1)
        # another session is another shell
        self.assertEqual(sb.session("other").run("pwd").stdout, "/\n")
        r = sh.run("sleep 10", timeout=0.2)
        self.assertTrue(r.timed_out)
        with self.newer_op("sessions"):
            names = sorted(x.name for x in sb.sessions())
        self.assertIn("other", names)
        with self.newer_op("session_rm"):
            rec = sb.session("other").remove()
        self.assertEqual((rec["type"], rec["name"]),
                         ("session_removed", "other"))
        self.assertNotIn("other", [x.name for x in sb.sessions()])

    def test_session_replay_by_seq(self):
        sb = self.create()
        sh = sb.session("main")
        with self.newer_op("exec session"):
            first = sh.run("echo $$ > /pid; echo ran >> /log; cat /log",
                           seq=1)
        again = sh.run("echo $$ > /pid; echo ran >> /log; cat /log", seq=1)
        self.assertEqual((again.replayed, again.stdout),
                         (True, first.stdout))
        self.assertEqual(sh.run("cat /log", seq=2).stdout, "ran\n")

    def test_stream(self):
        sb = self.create()
        with self.newer_op("exec stream"):
            recs = list(sb.stream(["sh", "-c", "echo a; echo b >&2; echo c"],
                                  seq=1))
        *outs, res = recs
        self.assertIsInstance(res, dsec.Result)
        self.assertTrue(all(isinstance(o, dsec.Output) for o in outs))
        self.assertEqual("".join(o.data for o in outs if o.fd == 1), "a\nc\n")
        self.assertEqual(b"".join(o.bytes for o in outs if o.fd == 2),
                         b"b\n")
        self.assertEqual((res.exit_code, res.stdout, res.stderr),
                         (0, "a\nc\n", "b\n"))

    def test_upload_and_download(self):
        sb = self.create()
        host = tempfile.mkdtemp(dir=support.SCRATCH)
        self.addCleanup(shutil.rmtree, host)
        os.makedirs(os.path.join(host, "repo", "sub"))
        with open(os.path.join(host, "repo", "a"), "w") as f:
            f.write("alpha\n")
        with open(os.path.join(host, "repo", "sub", "b"), "w") as f:
            f.write("beta\n")
        with self.newer_op("upload"):
            rec = sb.upload(os.path.join(host, "repo") + "/", "/src/repo")
        self.assertEqual((rec["type"], rec["direction"]), ("copied", "in"))
        # (whether directories count as files, and archive headers as
        # bytes, the contract does not say)
        self.assertGreaterEqual(rec["files"], 2)
        self.assertGreaterEqual(rec["bytes"], 11)
        self.assertTrue(rec["digest"].startswith("sha256:"))
        self.assertEqual(sb.exec(["cat", "/src/repo/a",
                                  "/src/repo/sub/b"]).stdout,
                         "alpha\nbeta\n")
        sb.exec("printf 'diff\\n' > /src/patch.diff")
        out = os.path.join(host, "out.diff")
        with self.newer_op("download"):
            rec = sb.download("/src/patch.diff", out)
        with open(out, "rb") as f:
            data = f.read()
        self.assertEqual(data, b"diff\n")
        # one file: its bytes; the digest is dsec's of the copy (kinds,
        # modes, paths and data), the same for the same content
        self.assertEqual((rec["direction"], rec["bytes"], rec["files"]),
                         ("out", 5, 1))
        self.assertTrue(rec["digest"].startswith("sha256:"))
        again = sb.download("/src/patch.diff", out + ".2")
        self.assertEqual(again["digest"], rec["digest"])
        with self.assertRaises(dsec.Error):
            sb.download("/no/such/file", os.path.join(host, "x"))


def _vm_missing():
    if not shutil.which("qemu-system-x86_64"):
        return "qemu-system-x86 is not installed"
    if not any(n.startswith("vmlinuz-") for n in os.listdir("/boot")):
        return "no guest kernel (linux-image-amd64)"
    return None


@unittest.skipIf(_vm_missing(), _vm_missing() or "")
class BackendsTest(support.StoreTest):
    def test_one_serve_drives_the_four_backends(self):
        s = self.serve()
        out = {}

        def run(backend):
            try:
                sb = s.create(image="busybox:1", backend=backend)
                out[backend] = (sb.record["backend"],
                                sb.exec(["echo", backend], seq=1).stdout,
                                sb.exec(["echo", backend], seq=1).replayed)
                sb.remove()
            except dsec.Error as e:
                out[backend] = repr(e)
        threads = [threading.Thread(target=run, args=(b,)) for b in
                   ("fncall", "container", "microvm", "vm")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(out, {b: (b, b + "\n", True) for b in
                               ("fncall", "container", "microvm", "vm")})


if __name__ == "__main__":
    unittest.main()
